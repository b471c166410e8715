// Device builder of the MoE dynamic mapping (moe_mapping_device.hpp), a stable counting sort of
// the (token, k) pairs by expert in small kernels: per-chunk histograms (chunks of kChunk pairs
// in pair order); per expert, an exclusive scan over the chunks (and the expert's total); padded
// offsets (one block); placement -- each pair's row is its expert's offset + the pairs of that
// expert in earlier chunks + those earlier in its own chunk, so the order is by token then k, as
// on the host; per-tile expert and token span. The tile order is a stable partition of the tiles
// by arrival step, one block per call. Part 2's tile order is a counting sort by the combine's
// need (build_combine_order). (One block per expert scanning every pair took 61-181 µs
// per call on the H200, docs/PERF.md.)
#include "tilelink/ops/moe/moe_mapping_device.hpp"

#include <cub/block/block_scan.cuh>

#include <string>

#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {
namespace {

constexpr int kThreads = 256;

// Block-wide stable append: returns the position of this thread's item among the flagged items
// of the block, in thread order, and adds the block's count to `base` (every thread). Uses
// `warp_counts` (kThreads / 32 entries of shared memory).
__device__ uint32_t block_append(bool flag, uint32_t& base, uint32_t* warp_counts) {
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, flag);
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  uint32_t before = 0, total = 0;
  for (uint32_t w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? warp_counts[w] : 0;
    total += warp_counts[w];
  }
  const uint32_t pos = base + before + __popc(ballot & ((1u << lane) - 1u));
  __syncthreads();  // warp_counts reused by the next call
  base += total;
  return pos;
}

constexpr uint32_t kChunk = 1024;  // pairs per placement block (one per thread)

// Per-chunk histogram: counts[chunk * experts + e]. An id out of range (a routing
// check_moe_routing would refuse) is dropped rather than counted out of bounds.
__global__ void __launch_bounds__(kChunk) chunk_count_kernel(const int32_t* ids, uint32_t pairs, uint32_t experts,
                                                             uint32_t* counts) {
  extern __shared__ uint32_t hist[];
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const uint32_t p = blockIdx.x * kChunk + threadIdx.x;
  if (p < pairs && static_cast<uint32_t>(ids[p]) < experts) atomicAdd(hist + ids[p], 1u);
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < experts; e += blockDim.x) counts[uint64_t(blockIdx.x) * experts + e] = hist[e];
}

// Per expert: bases[chunk * experts + e] = the expert's pairs in earlier chunks; count[e] = all.
__global__ void chunk_scan_kernel(uint32_t* counts_to_bases, uint32_t chunks, uint32_t experts, uint32_t* count) {
  const uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= experts) return;
  uint32_t running = 0;
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint32_t n = counts_to_bases[uint64_t(c) * experts + e];
    counts_to_bases[uint64_t(c) * experts + e] = running;
    running += n;
  }
  count[e] = running;
}

__global__ void offsets_kernel(const uint32_t* count, uint32_t experts, uint32_t bm, uint32_t* row_offset,
                               uint32_t* num_tiles) {
  if (threadIdx.x != 0) return;
  uint32_t row = 0;
  for (uint32_t e = 0; e < experts; ++e) {
    row_offset[e] = row;
    row += (count[e] + bm - 1) / bm * bm;
  }
  row_offset[experts] = row;
  *num_tiles = row / bm;
}

__global__ void __launch_bounds__(kChunk) place_kernel(const int32_t* ids, uint32_t pairs, uint32_t experts,
                                                       const uint32_t* row_offset, const uint32_t* bases,
                                                       uint32_t* row_pair, uint32_t* pair_row) {
  __shared__ int32_t chunk_ids[kChunk];
  const uint32_t p = blockIdx.x * kChunk + threadIdx.x;
  chunk_ids[threadIdx.x] = p < pairs ? ids[p] : -1;
  __syncthreads();
  const int32_t e = chunk_ids[threadIdx.x];
  if (p >= pairs || static_cast<uint32_t>(e) >= experts) return;
  uint32_t before = 0;  // this expert's pairs earlier in the chunk
  for (uint32_t j = 0; j < threadIdx.x; ++j) before += chunk_ids[j] == e ? 1u : 0u;
  const uint32_t pos = row_offset[e] + bases[uint64_t(blockIdx.x) * experts + uint32_t(e)] + before;
  row_pair[pos] = p;
  pair_row[p] = pos;
}

__global__ void tiles_kernel(const uint32_t* row_offset, uint32_t experts, const uint32_t* row_pair, uint32_t bm,
                             uint32_t topk, const uint32_t* num_tiles, uint32_t* tile_expert, uint32_t* tile_token0,
                             uint32_t* tile_span) {
  const uint32_t tiles = *num_tiles;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += gridDim.x * blockDim.x) {
    uint32_t lo = 0, hi = experts;  // the last expert whose offset <= t * bm (experts without rows share it)
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (row_offset[mid] <= t * bm) lo = mid; else hi = mid;
    }
    uint32_t first = kPadRow, last = 0;
    for (uint32_t row = t * bm; row < (t + 1) * bm; ++row) {
      const uint32_t pair = row_pair[row];
      if (pair == kPadRow) continue;
      first = min(first, pair / topk);
      last = max(last, pair / topk);
    }
    tile_expert[t] = lo;
    tile_token0[t] = first == kPadRow ? 0 : first;
    tile_span[t] = first == kPadRow ? 0 : last - first + 1;
  }
}

__global__ void __launch_bounds__(kThreads) order_kernel(AllGatherPlan ag, uint32_t rank, const uint32_t* num_tiles,
                                                         const uint32_t* tile_token0, const uint32_t* tile_span,
                                                         uint32_t* order) {
  __shared__ uint32_t warp_counts[kThreads / 32];
  const uint32_t tiles = *num_tiles;
  uint32_t base = 0;
  for (uint32_t s = 0; s < ag.world(); ++s) {
    for (uint32_t t0 = 0; t0 < tiles; t0 += kThreads) {
      const uint32_t t = t0 + threadIdx.x;
      const bool mine = t < tiles && (tile_span[t] == 0 ? 0u : arrival_step(ag, rank, tile_token0[t], tile_span[t])) == s;
      const uint32_t pos = block_append(mine, base, warp_counts);
      if (mine) order[pos] = t;
    }
  }
}

// Part 2's GEMM order for `rank`: tiles by the combine's need of their first token
// (MoeRsPlan::combine_key: round, then owner), in at most kKeys buckets; or, with `sweeps` fewer
// than the rounds, by (sweep of the token's round, expert): each expert's tiles of a sweep
// together, so that its weights stream once per sweep. Within a bucket in no particular order
// (the order only sets when tiles finish, never what they compute).
constexpr uint32_t kOrderThreads = 1024, kKeysPerThread = 2, kKeys = kOrderThreads * kKeysPerThread;

__global__ void __launch_bounds__(kOrderThreads)
    combine_order_kernel(MoeRsPlan plan, uint32_t rank, uint32_t sweeps, uint32_t experts, const uint32_t* num_tiles,
                         const uint32_t* tile_token0, const uint32_t* tile_span, const uint32_t* tile_expert,
                         uint32_t* order) {
  using Scan = cub::BlockScan<uint32_t, kOrderThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ uint32_t bucket[kKeys];
  const uint32_t tiles = *num_tiles, rounds = plan.tokens.chunks_per_rank();
  const bool by_token = sweeps == 0 || sweeps >= rounds || uint64_t(sweeps) * experts > kKeys;
  const uint32_t all_keys = by_token ? plan.combine_keys() : sweeps * experts;
  const uint32_t keys = all_keys < kKeys ? all_keys : kKeys;
  auto key = [&](uint32_t t) {
    if (tile_span[t] == 0) return keys - 1;
    const uint32_t k = plan.combine_key(rank, tile_token0[t]);
    if (by_token) return static_cast<uint32_t>(uint64_t(k) * keys / all_keys);
    return k / plan.world() * sweeps / rounds * experts + tile_expert[t];  // (sweep of the round, expert)
  };
  for (uint32_t k = threadIdx.x; k < kKeys; k += kOrderThreads) bucket[k] = 0;
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < tiles; t += kOrderThreads) atomicAdd(bucket + key(t), 1u);
  __syncthreads();
  uint32_t counts[kKeysPerThread];
  for (uint32_t j = 0; j < kKeysPerThread; ++j) counts[j] = bucket[threadIdx.x * kKeysPerThread + j];
  __syncthreads();
  Scan(scan).ExclusiveSum(counts, counts);
  for (uint32_t j = 0; j < kKeysPerThread; ++j) bucket[threadIdx.x * kKeysPerThread + j] = counts[j];
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < tiles; t += kOrderThreads) order[atomicAdd(bucket + key(t), 1u)] = t;
}

}  // namespace

void MoeMappingBuffers::preload() {
  preload_kernel(chunk_count_kernel);
  preload_kernel(chunk_scan_kernel);
  preload_kernel(offsets_kernel);
  preload_kernel(place_kernel);
  preload_kernel(tiles_kernel);
  preload_kernel(order_kernel);
  preload_kernel(combine_order_kernel);
}

MoeMappingBuffers::MoeMappingBuffers(uint32_t tokens, uint32_t topk, uint32_t experts, uint32_t bm, int device)
    : tokens_(tokens), topk_(topk), experts_(experts), bm_(bm) {
  TL_REQUIRE(tokens > 0, "MoeMappingBuffers", "tokens", tokens, "> 0");
  TL_REQUIRE(bm > 0, "MoeMappingBuffers", "bm", bm, "> 0");
  TL_REQUIRE(experts > 0 && experts <= 1024, "MoeMappingBuffers", "experts", experts, "1 to 1024");
  TL_REQUIRE(topk > 0 && topk <= experts, "MoeMappingBuffers", "topk", topk,
             "1 to the number of experts (" + std::to_string(experts) + ")");
  max_tiles_ = moe_max_tiles(uint64_t(tokens) * topk, experts, bm);
  count_ = DeviceBuffer(experts * sizeof(uint32_t), device);
  row_offset_ = DeviceBuffer((experts + 1) * sizeof(uint32_t), device);
  row_pair_ = DeviceBuffer(size_t(max_tiles_) * bm * sizeof(uint32_t), device);
  tile_expert_ = DeviceBuffer(max_tiles_ * sizeof(uint32_t), device);
  tile_token0_ = DeviceBuffer(max_tiles_ * sizeof(uint32_t), device);
  tile_span_ = DeviceBuffer(max_tiles_ * sizeof(uint32_t), device);
  num_tiles_ = DeviceBuffer(sizeof(uint32_t), device);
  pair_row_ = DeviceBuffer(size_t(tokens) * topk * sizeof(uint32_t), device);
  const uint64_t chunks = (uint64_t(tokens) * topk + kChunk - 1) / kChunk;
  chunk_bases_ = DeviceBuffer(size_t(chunks) * experts * sizeof(uint32_t), device);
}

void MoeMappingBuffers::build(const int32_t* ids, cudaStream_t stream) {
  const uint64_t pairs = uint64_t(tokens_) * topk_;
  TL_CUDA_CHECK(cudaMemsetAsync(row_pair_.get(), 0xFF, row_pair_.bytes(), stream));
  const uint32_t chunks = static_cast<uint32_t>((pairs + kChunk - 1) / kChunk);
  chunk_count_kernel<<<chunks, kChunk, experts_ * sizeof(uint32_t), stream>>>(ids, static_cast<uint32_t>(pairs),
                                                                             experts_, chunk_bases_.get<uint32_t>());
  TL_CUDA_CHECK(cudaGetLastError());
  chunk_scan_kernel<<<(experts_ + kThreads - 1) / kThreads, kThreads, 0, stream>>>(chunk_bases_.get<uint32_t>(), chunks,
                                                                                   experts_, count_.get<uint32_t>());
  TL_CUDA_CHECK(cudaGetLastError());
  offsets_kernel<<<1, 32, 0, stream>>>(count_.get<uint32_t>(), experts_, bm_, row_offset_.get<uint32_t>(),
                                       num_tiles_.get<uint32_t>());
  TL_CUDA_CHECK(cudaGetLastError());
  place_kernel<<<chunks, kChunk, 0, stream>>>(ids, static_cast<uint32_t>(pairs), experts_, row_offset_.get<uint32_t>(),
                                              chunk_bases_.get<uint32_t>(), row_pair_.get<uint32_t>(),
                                              pair_row_.get<uint32_t>());
  TL_CUDA_CHECK(cudaGetLastError());
  tiles_kernel<<<(max_tiles_ + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      row_offset_.get<uint32_t>(), experts_, row_pair_.get<uint32_t>(), bm_, topk_, num_tiles_.get<uint32_t>(),
      tile_expert_.get<uint32_t>(), tile_token0_.get<uint32_t>(), tile_span_.get<uint32_t>());
  TL_CUDA_CHECK(cudaGetLastError());
}

void MoeMappingBuffers::build_order(const AllGatherPlan& ag, uint32_t rank, uint32_t* order, cudaStream_t stream) const {
  TL_REQUIRE(rank < ag.world(), "MoeMappingBuffers::build_order", "rank", rank,
             "< the all-gather's world (" + std::to_string(ag.world()) + ")");
  order_kernel<<<1, kThreads, 0, stream>>>(ag, rank, num_tiles_.get<uint32_t>(), tile_token0_.get<uint32_t>(),
                                           tile_span_.get<uint32_t>(), order);
  TL_CUDA_CHECK(cudaGetLastError());
}

void MoeMappingBuffers::build_combine_order(const MoeRsPlan& plan, uint32_t rank, uint32_t* order, cudaStream_t stream,
                                            uint32_t sweeps) const {
  TL_REQUIRE(rank < plan.world(), "MoeMappingBuffers::build_combine_order", "rank", rank,
             "< the world (" + std::to_string(plan.world()) + ")");
  TL_REQUIRE(plan.tokens.total_rows() == tokens_, "MoeMappingBuffers::build_combine_order", "plan.tokens.total_rows()",
             plan.tokens.total_rows(), "the mapping's tokens (" + std::to_string(tokens_) + ")");
  combine_order_kernel<<<1, kOrderThreads, 0, stream>>>(plan, rank, sweeps, experts_, num_tiles_.get<uint32_t>(),
                                                        tile_token0_.get<uint32_t>(), tile_span_.get<uint32_t>(),
                                                        tile_expert_.get<uint32_t>(), order);
  TL_CUDA_CHECK(cudaGetLastError());
}

MoeMappingView MoeMappingBuffers::view(uint32_t num_tiles) const {
  return {bm_, topk_, experts_, num_tiles, row_offset_.get<uint32_t>(), row_pair_.get<uint32_t>(),
          tile_expert_.get<uint32_t>(), tile_token0_.get<uint32_t>(), tile_span_.get<uint32_t>(),
          pair_row_.get<uint32_t>()};
}

}  // namespace tilelink
