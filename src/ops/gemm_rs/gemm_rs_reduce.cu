// The reduction half of GEMM+RS: owner rank q sums, tile by tile as the senders' parts arrive,
// the senders' partial tiles of its rows in rank order 0..P-1 in fp32 (every scatter variant;
// gemm_rs_sender_rows says where each sender's rows are).
//
// Each thread keeps kVectors 16-byte loads in flight per sender (one in flight made a CTA
// latency-bound at ~17 GB/s, slower than the GEMM produces tiles). The grid is launched in
// clusters of the GEMM's cluster size (launch_in_clusters).
#include <cuda_bf16.h>

#include "ops/common/bf16x8.cuh"
#include "ops/common/cluster_launch.hpp"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/primitives/trace.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 512;
constexpr int kVectors = 4;  // 16-byte vectors in flight per thread and sender

__global__ void __launch_bounds__(kThreads) gemm_rs_reduce_kernel(GemmRsFusedPlan plan, SignalView sig,
                                                                  SymmetricView heap, const __nv_bfloat16* buf,
                                                                  const __nv_bfloat16* recv, __nv_bfloat16* out,
                                                                  TraceView trace) {
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  const uint32_t rank = static_cast<uint32_t>(sig.rank);
  gemm_rs_fused_reduce_block(ctx, plan, sig, [&](uint32_t t, uint32_t row0, uint32_t rows, uint32_t col0,
                                                         uint32_t cols) {
    const uint64_t t0 = trace_start(trace);
    const uint32_t vectors_per_row = cols / 8;  // n and bn are multiples of 8
    const uint32_t total = rows * vectors_per_row;
    for (uint32_t e0 = threadIdx.x; e0 < total; e0 += kVectors * kThreads) {
      uint64_t at[kVectors];
      bool live[kVectors];
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        const uint32_t e = e0 + j * kThreads;
        live[j] = e < total;
        at[j] = uint64_t(row0 + e / vectors_per_row) * plan.n + col0 + (e % vectors_per_row) * 8;
      }
      float acc[kVectors][8] = {};
      for (uint32_t s = 0; s < plan.world; ++s) {
        const __nv_bfloat16* rows = gemm_rs_sender_rows(plan, heap, rank, s, buf, recv);
        uint4 v[kVectors];
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
          if (live[j]) v[j] = *reinterpret_cast<const uint4*>(rows + at[j]);
        }
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
          if (live[j]) add_bf16x8(acc[j], v[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (!live[j]) continue;
        *reinterpret_cast<uint4*>(out + at[j]) = pack_bf16x8(acc[j]);
      }
    }
    if (trace.on()) {  // the whole block's part of the tile (on is uniform over the block)
      __syncthreads();
      if (threadIdx.x == 0) {
        trace_span(trace, TraceKind::kReduce, rank * plan.tiles_per_block() + t, TraceRole::kComm, t0,
                   global_time_ns());
      }
    }
  });
}

}  // namespace

void launch_gemm_rs_reduce(const GemmRsFusedPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const void* buf, const void* recv, void* out, uint32_t blocks, uint32_t cluster,
                           cudaStream_t stream, const TraceView& trace) {
  launch_in_clusters(gemm_rs_reduce_kernel, blocks, kThreads, cluster, stream, plan, sig, heap,
                     static_cast<const __nv_bfloat16*>(buf), static_cast<const __nv_bfloat16*>(recv),
                     static_cast<__nv_bfloat16*>(out), trace);
}

void preload_gemm_rs_reduce() { preload_kernel(gemm_rs_reduce_kernel); }

}  // namespace tilelink::detail
