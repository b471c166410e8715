// MoE part 2's memory-bound stage, one kernel (moe_combine_reduce_block): the top-k combine (a
// thread per 8 output columns of a token, kVec such per step, each loading the token's top-k
// rows) and the owner's reduction over the ranks' slots (the same shape over senders). Both are
// bandwidth-bound copies with fp32 math; the loads of a step are issued before any is used, so a
// CTA keeps kVec * topk (or kVec * world) 16-byte loads per thread in flight (a CTA is
// latency-bound: its bandwidth is the bytes in flight over the memory latency).
#include <cuda_bf16.h>

#include <cub/block/block_scan.cuh>

#include "ops/common/cluster_launch.hpp"
#include "ops/moe/moe_combine.hpp"
#include "ops/moe/moe_combine_sums.cuh"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 512;
constexpr int kVec = 8;  // 16-byte vectors per thread and step: kVec * topk (or world) loads in flight

__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(MoeRsPlan plan, MoeMappingView m, SignalView sig, SymmetricView heap, const uint4* y,
                       const float* weights, __nv_bfloat16* recv, uint4* send, uint4* out, TraceView trace) {
  __shared__ uint32_t pair_rows[kMoeCombineMaxPairs];
  __shared__ float pair_weights[kMoeCombineMaxPairs];
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  const uint32_t rank = static_cast<uint32_t>(sig.rank), topk = m.topk, vectors = plan.n / 8;
  auto combine = [&](uint32_t owner, RowRange rows) {
    // The previous item's reads of the staging arrays ended before its notify's barrier.
    const uint64_t pair0 = uint64_t(rows.row0) * topk;
    for (uint32_t i = threadIdx.x; i < rows.rows * topk; i += kThreads) {
      pair_rows[i] = m.pair_row[pair0 + i];
      pair_weights[i] = weights[pair0 + i];
    }
    __syncthreads();
    // Staged (put-with-signal), for a peer: this rank's `send`, at the tokens' global rows.
    uint4* slot = plan.world() == 1                  ? out
                  : plan.staged && owner != rank ? send + uint64_t(owner) * plan.tokens.rows_per_rank * vectors
                                                 : reinterpret_cast<uint4*>(
                                                       heap.translate(plan.slot(recv, rank), static_cast<int>(owner)));
    uint4* dst = slot + uint64_t(rows.row0 - owner * plan.tokens.rows_per_rank) * vectors;
    topk_weighted_sums<kVec>(
        rows.rows * vectors, threadIdx.x, kThreads, topk,
        [&](uint32_t e, uint32_t j, uint4& v, float& w) {
          const uint32_t p = e / vectors * topk + j;
          v = y[uint64_t(pair_rows[p]) * vectors + e % vectors];
          w = pair_weights[p];
        },
        [&](uint32_t e, const uint4& sum) { dst[e] = sum; });
  };
  auto sum_block = [&](uint32_t, uint32_t row0, uint32_t rows) {
    sum_sender_slots<kVec>(plan, recv, out, row0, rows, ColRange{0, plan.n}, threadIdx.x, kThreads);
  };
  moe_combine_reduce_block(ctx, plan, m, m.pair_row, sig, combine, sum_block);
}

// The epilogue combine's counts for a call, one block: expected[g] = the tile rows (of the call's
// *num_tiles) whose span reaches token block g -- moe_block_tiles, computed as a difference array
// (each tile adds one over its range of blocks: +1 at its first, -1 past its last) and a block-wide
// prefix sum -- and every item counter zeroed. expected holds blocks + 1 entries.
constexpr uint32_t kCountThreads = 1024;
__global__ void __launch_bounds__(kCountThreads)
    moe_epilogue_counts_kernel(MoeRsPlan plan, MoeMappingView m, const uint32_t* num_tiles, uint32_t* expected,
                               uint32_t* arrived) {
  using Scan = cub::BlockScan<uint32_t, kCountThreads>;
  __shared__ typename Scan::TempStorage scan;
  const uint32_t blocks = plan.tokens.num_channels(), tiles = min(*num_tiles, plan.max_tiles);
  for (uint32_t g = threadIdx.x; g <= blocks; g += kCountThreads) expected[g] = 0;
  for (uint64_t i = threadIdx.x; i < uint64_t(blocks) * plan.n_tiles(); i += kCountThreads) arrived[i] = 0;
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < tiles; t += kCountThreads) {
    const ChannelRange reach = moe_tile_blocks(plan, m, t);
    if (reach.count == 0) continue;
    atomicAdd(expected + reach.first, 1u);
    atomicAdd(expected + reach.first + reach.count, 0xFFFFFFFFu);  // -1, modulo 2^32
  }
  __syncthreads();
  // Thread i sums entries [lo, hi) (read at L2, where the adds landed), then writes their prefix sums.
  const uint32_t per = (blocks + kCountThreads - 1) / kCountThreads;
  const uint32_t lo = min(threadIdx.x * per, blocks), hi = min(lo + per, blocks);
  uint32_t local = 0;
  for (uint32_t g = lo; g < hi; ++g) local += __ldcg(expected + g);
  uint32_t running = 0;
  Scan(scan).ExclusiveSum(local, running);
  for (uint32_t g = lo; g < hi; ++g) {
    running += __ldcg(expected + g);
    expected[g] = running;
  }
}

// The owners' sums after the GEMM with the combine in its epilogue (moe_reduce_own_blocks): per
// item (own block, column tile), the P slots in rank order, fp32, into `out`.
__global__ void __launch_bounds__(kThreads)
    moe_reduce_kernel(MoeRsPlan plan, SignalView sig, const __nv_bfloat16* recv, uint4* out, TraceView trace) {
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  moe_reduce_own_blocks(ctx, plan, sig, [&](uint32_t row0, uint32_t rows, ColRange cols) {
    sum_sender_slots<kVec>(plan, recv, out, row0, rows, cols, threadIdx.x, kThreads);
  });
}

}  // namespace

void launch_moe_epilogue_counts(const MoeRsPlan& plan, const MoeMappingView& m, const uint32_t* num_tiles,
                                uint32_t* expected, uint32_t* arrived, cudaStream_t stream) {
  moe_epilogue_counts_kernel<<<1, kCountThreads, 0, stream>>>(plan, m, num_tiles, expected, arrived);
  TL_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_reduce(const MoeRsPlan& plan, const SignalView& sig, const void* recv, void* out, uint32_t blocks,
                       cudaStream_t stream, const TraceView& trace) {
  moe_reduce_kernel<<<blocks, kThreads, 0, stream>>>(plan, sig, static_cast<const __nv_bfloat16*>(recv),
                                                     static_cast<uint4*>(out), trace);
  TL_CUDA_CHECK(cudaGetLastError());
}

void launch_moe_combine(const MoeRsPlan& plan, const MoeMappingView& m, const SignalView& sig,
                        const SymmetricView& heap, const void* y, const float* weights, void* recv, void* send,
                        void* out, uint32_t blocks, uint32_t cluster, cudaStream_t stream, const TraceView& trace) {
  launch_in_clusters(moe_combine_kernel, blocks, kThreads, cluster, stream, LaunchOrder::kAfterPrevious, plan, m, sig, heap,
                     static_cast<const uint4*>(y), weights, static_cast<__nv_bfloat16*>(recv),
                     static_cast<uint4*>(send), static_cast<uint4*>(out), trace);
}

void preload_moe_combine() {
  preload_kernel(moe_combine_kernel);
  preload_kernel(moe_reduce_kernel);
  preload_kernel(moe_epilogue_counts_kernel);
}

}  // namespace tilelink::detail
