// The reduction half of GEMM+RS: owner rank q sums, tile by tile as the senders' parts arrive,
// the senders' partial tiles of its rows in rank order 0..P-1 in fp32 (every scatter variant;
// gemm_rs_sum.cuh), then passes the exit barrier. The grid is launched in clusters of the GEMM's
// cluster size (launch_in_clusters).
#include <cuda_bf16.h>

#include "ops/common/cluster_launch.hpp"
#include "ops/gemm_rs/gemm_rs_sum.cuh"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/primitives/trace.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 512;
constexpr int kVectors = 4;  // 16-byte vectors in flight per thread and sender

// kBlocks: the owner's tiles as they arrive; kEpilogue: the GEMM summed them, the block only
// waits for the count and passes the exit barrier (launched with one block after the GEMM).
__global__ void __launch_bounds__(kThreads) gemm_rs_reduce_kernel(GemmRsFusedPlan plan, SignalView sig,
                                                                  SymmetricView heap, const __nv_bfloat16* buf,
                                                                  const __nv_bfloat16* recv, __nv_bfloat16* out,
                                                                  TraceView trace) {
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  const uint32_t rank = static_cast<uint32_t>(sig.rank);
  gemm_rs_fused_reduce_block(ctx, plan, sig, [&](uint32_t t, uint32_t row0, uint32_t rows, uint32_t col0,
                                                 uint32_t cols) {
    const uint64_t t0 = trace_start(trace);
    gemm_rs_sum_rows<kVectors, 1>(plan, heap, rank, buf, recv, out, row0, rows, col0, cols, threadIdx.x, kThreads);
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
  launch_in_clusters(gemm_rs_reduce_kernel, blocks, kThreads, cluster, stream, LaunchOrder::kAfterPrevious, plan, sig, heap,
                     static_cast<const __nv_bfloat16*>(buf), static_cast<const __nv_bfloat16*>(recv),
                     static_cast<__nv_bfloat16*>(out), trace);
}

void preload_gemm_rs_reduce() { preload_kernel(gemm_rs_reduce_kernel); }

}  // namespace tilelink::detail
