#include "ops/moe/moe_routing_gather.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "tilelink/core/error.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink::detail {

namespace {

uint64_t padded_row(uint32_t tokens_per_rank, uint32_t topk) {
  const uint64_t bytes = uint64_t(tokens_per_rank) * topk * 4;
  return (bytes + kTileAlignment - 1) / kTileAlignment * kTileAlignment;
}

}  // namespace

std::string MoeRoutingGather::can_implement(uint32_t tokens_per_rank, uint32_t topk) {
  // The dense copies' source pitch (two padded shards) must stay below the 2^31-byte pitch limit.
  if (tokens_per_rank == 0 || topk == 0 || padded_row(tokens_per_rank, topk) >= (uint64_t(1) << 30)) {
    return "arguments 'tokens_per_rank' = " + std::to_string(tokens_per_rank) + " and 'topk' = " +
           std::to_string(topk) + " with routing = kOwnTokens: expected 1 to 2^28 routing entries per rank";
  }
  return "";
}

uint64_t MoeRoutingGather::heap_bytes(int world, uint32_t tokens_per_rank, uint32_t topk) {
  return uint64_t(world) * 2 * padded_row(tokens_per_rank, topk);
}

MoeRoutingGather::MoeRoutingGather(const World& world, SymmetricHeap& heap, SignalSet& signals,
                                   uint32_t tokens_per_rank, uint32_t topk, const std::string& name)
    : world_(&world),
      shard_bytes_(uint64_t(tokens_per_rank) * topk * 4),
      row_bytes_(padded_row(tokens_per_rank, topk)) {
  if (std::string e = can_implement(tokens_per_rank, topk); !e.empty()) throw InvalidArgument("MoeRoutingGather: " + e);
  gathered_ = heap.allocate(heap_bytes(world.size(), tokens_per_rank, topk));
  AllGatherArguments a;
  a.gathered = &gathered_;
  a.rows_per_rank = 2;
  a.row_bytes = static_cast<uint32_t>(row_bytes_);
  // One CTA pulls (its exit barrier keeps a slot until every peer has read it); under the
  // put-with-signal transport, where no kernel reads a peer, the copy engine pushes instead.
  a.config.resource = world.transport() == Transport::kPutSignal ? CommResource::kCopyEngine : CommResource::kSm;
  a.config.method = AgMethod::kPull;
  a.config.comm_rows = 2;             // one tile (ids and weights) per rank
  a.config.num_blocks = 1;
  a.config.threads = 256;
  ag_ = std::make_unique<AllGather>(world, heap, signals, a, name);
  const size_t ranks = static_cast<size_t>(world.size());
  ids_.resize(ranks);
  weights_.resize(ranks);
  const size_t all = shard_bytes_ * ranks;
  for (int r : world.local_ranks()) {
    ids_[static_cast<size_t>(r)] = DeviceBuffer(all, world.device(r));
    weights_[static_cast<size_t>(r)] = DeviceBuffer(all, world.device(r));
  }
}

void MoeRoutingGather::run(const std::vector<const int32_t*>& ids, const std::vector<const float*>& weights) {
  const World& world = *world_;
  // Own slots first, on the compute streams (the all-gather is ordered after them).
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const cudaStream_t compute = world.compute_stream(r);
    char* slot = static_cast<char*>(gathered_.data(r)) + uint64_t(r) * 2 * row_bytes_;
    TL_CUDA_CHECK(cudaMemcpyAsync(slot, ids[i], shard_bytes_, cudaMemcpyDeviceToDevice, compute));
    TL_CUDA_CHECK(cudaMemcpyAsync(slot + row_bytes_, weights[i], shard_bytes_, cudaMemcpyDeviceToDevice, compute));
  }
  ag_->run();
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    world.compute_after_comm(r);
    const cudaStream_t compute = world.compute_stream(r);
    const char* all = static_cast<const char*>(gathered_.data(r));
    TL_CUDA_CHECK(cudaMemcpy2DAsync(ids_[i].get(), shard_bytes_, all, 2 * row_bytes_, shard_bytes_,
                                    static_cast<size_t>(world.size()), cudaMemcpyDeviceToDevice, compute));
    TL_CUDA_CHECK(cudaMemcpy2DAsync(weights_[i].get(), shard_bytes_, all + row_bytes_, 2 * row_bytes_, shard_bytes_,
                                    static_cast<size_t>(world.size()), cudaMemcpyDeviceToDevice, compute));
  }
}

}  // namespace tilelink::detail
