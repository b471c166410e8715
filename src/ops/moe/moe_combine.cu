// MoE part 2's memory-bound stage, one kernel (moe_combine_reduce_block): the top-k combine (a
// thread per 8 output columns of a token, kVec such per step, each loading the token's top-k
// rows) and the owner's reduction over the ranks' slots (the same shape over senders). Both are
// bandwidth-bound copies with fp32 math; the loads of a step are issued before any is used, so a
// CTA keeps kVec * topk (or kVec * world) 16-byte loads per thread in flight (a CTA is
// latency-bound: its bandwidth is the bytes in flight over the memory latency).
#include <cuda_bf16.h>

#include "ops/common/bf16x8.cuh"
#include "ops/common/cluster_launch.hpp"
#include "ops/moe/moe_combine.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 512;
constexpr int kVec = 8;  // 16-byte vectors per thread and step: kVec * topk (or world) loads in flight

__global__ void __launch_bounds__(kThreads)
    moe_combine_kernel(MoeRsPlan plan, MoeMappingView m, SignalView sig, SymmetricView heap, const uint4* y,
                       const float* weights, __nv_bfloat16* recv, uint4* out, TraceView trace) {
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
    uint4* slot = plan.world() == 1 ? out
                                    : reinterpret_cast<uint4*>(
                                          heap.translate(plan.slot(recv, rank), static_cast<int>(owner)));
    uint4* dst = slot + uint64_t(rows.row0 - owner * plan.tokens.rows_per_rank) * vectors;
    const uint32_t total = rows.rows * vectors;
    for (uint32_t e0 = threadIdx.x; e0 < total; e0 += kVec * kThreads) {
      float acc[kVec][8] = {};
      for (uint32_t j = 0; j < topk; ++j) {
        uint4 v[kVec];
        float w[kVec];
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          const uint32_t e = e0 + u * kThreads;
          if (e >= total) continue;
          const uint32_t p = e / vectors * topk + j;
          v[u] = y[uint64_t(pair_rows[p]) * vectors + e % vectors];
          w[u] = pair_weights[p];
        }
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          if (e0 + u * kThreads < total) fma_bf16x8(acc[u], w[u], v[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        const uint32_t e = e0 + u * kThreads;
        if (e < total) dst[e] = pack_bf16x8(acc[u]);
      }
    }
  };
  auto sum_block = [&](uint32_t, uint32_t row0, uint32_t rows) {
    const uint64_t base = uint64_t(row0) * vectors;
    const uint32_t total = rows * vectors;
    for (uint32_t e0 = threadIdx.x; e0 < total; e0 += kVec * kThreads) {
      float acc[kVec][8] = {};
      for (uint32_t s = 0; s < plan.world(); ++s) {
        const uint4* slot = reinterpret_cast<const uint4*>(plan.slot(recv, s));
        uint4 v[kVec];
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          if (e0 + u * kThreads < total) v[u] = slot[base + e0 + u * kThreads];
        }
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          if (e0 + u * kThreads < total) add_bf16x8(acc[u], v[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        if (e0 + u * kThreads < total) out[base + e0 + u * kThreads] = pack_bf16x8(acc[u]);
      }
    }
  };
  moe_combine_reduce_block(ctx, plan, m, m.pair_row, sig, combine, sum_block);
}

}  // namespace

void launch_moe_combine(const MoeRsPlan& plan, const MoeMappingView& m, const SignalView& sig,
                        const SymmetricView& heap, const void* y, const float* weights, void* recv, void* out,
                        uint32_t blocks, uint32_t cluster, cudaStream_t stream, const TraceView& trace) {
  launch_in_clusters(moe_combine_kernel, blocks, kThreads, cluster, stream, plan, m, sig, heap,
                     static_cast<const uint4*>(y), weights, static_cast<__nv_bfloat16*>(recv),
                     static_cast<uint4*>(out), trace);
}

void preload_moe_combine() { preload_kernel(moe_combine_kernel); }

}  // namespace tilelink::detail
