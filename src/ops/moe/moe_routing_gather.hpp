// The MoE layer's routing all-gather: each rank holds its own tokens' top-k expert ids and weights
// (what a router run on the rank's shard gives); the layer needs every token's, in token order, on
// every rank. A small all-gather on the symmetric heap (the comm layer's, SM pull: one CTA) moves
// both, then two strided copies lay them out densely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

class MoeRoutingGather {
 public:
  // Claims a signal slice and a symmetric buffer (world * 2 rows of the padded shard) and, per
  // rank this process drives, the dense ids (tokens x topk int32) and weights (fp32).
  MoeRoutingGather(const World& world, SymmetricHeap& heap, SignalSet& signals, uint32_t tokens_per_rank,
                   uint32_t topk, const std::string& name);
  MoeRoutingGather(const MoeRoutingGather&) = delete;
  MoeRoutingGather& operator=(const MoeRoutingGather&) = delete;

  // Per rank this process drives, on its compute stream: its shard (ids[r], weights[r]:
  // tokens_per_rank x topk) into its slot, the all-gather, then every token's routing into ids(r)
  // and weights(r). What the compute stream enqueues next sees them.
  void run(const std::vector<const int32_t*>& ids, const std::vector<const float*>& weights);

  const int32_t* ids(int rank) const { return ids_[static_cast<size_t>(rank)].get<int32_t>(); }
  const float* weights(int rank) const { return weights_[static_cast<size_t>(rank)].get<float>(); }

  // "" if a shard of tokens_per_rank x topk routing entries can be gathered, else why not.
  static std::string can_implement(uint32_t tokens_per_rank, uint32_t topk);
  // The symmetric bytes it allocates for this shape (heap sizing).
  static uint64_t heap_bytes(int world, uint32_t tokens_per_rank, uint32_t topk);

 private:
  const World* world_;
  uint64_t shard_bytes_ = 0, row_bytes_ = 0;  // a shard's ids (or weights); its padded row
  SymmetricBuffer gathered_;                  // rank q's ids at row 2q, its weights at row 2q + 1
  std::unique_ptr<AllGather> ag_;
  std::vector<DeviceBuffer> ids_, weights_;
};

}  // namespace tilelink::detail
