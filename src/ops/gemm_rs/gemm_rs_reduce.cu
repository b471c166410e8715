// The reduction half of GEMM+RS: owner rank q sums, tile by tile as the senders' parts arrive,
// the senders' partial tiles of its rows in rank order 0..P-1 in fp32 (every scatter variant;
// gemm_rs_sender_rows says where each sender's rows are).
#include <cuda_bf16.h>

#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

__global__ void __launch_bounds__(512) gemm_rs_reduce_kernel(GemmRsFusedPlan plan, SignalView sig, SymmetricView heap,
                                                             const __nv_bfloat16* buf, const __nv_bfloat16* recv,
                                                             __nv_bfloat16* out) {
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr};
  const uint32_t rank = static_cast<uint32_t>(sig.rank);
  gemm_rs_fused_reduce_block(ctx, plan, sig, [&](uint32_t, uint32_t row0, uint32_t col0, uint32_t cols) {
    const uint32_t vectors_per_row = cols / 8;  // n and bn are multiples of 8
    const uint32_t total = plan.bm * vectors_per_row;
    for (uint32_t e = threadIdx.x; e < total; e += blockDim.x) {
      const uint32_t row = row0 + e / vectors_per_row;
      const uint32_t col = col0 + (e % vectors_per_row) * 8;
      const uint64_t at = uint64_t(row) * plan.n + col;
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (uint32_t s = 0; s < plan.world; ++s) {
        const __nv_bfloat16* rows = gemm_rs_sender_rows(plan, heap, rank, s, buf, recv);
        const uint4 v = *reinterpret_cast<const uint4*>(rows + at);
        const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(h[i]);
          acc[2 * i] += f.x;
          acc[2 * i + 1] += f.y;
        }
      }
      uint4 packed;
      auto* o = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
      *reinterpret_cast<uint4*>(out + at) = packed;
    }
  });
}

}  // namespace

void launch_gemm_rs_reduce(const GemmRsFusedPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const void* buf, const void* recv, void* out, uint32_t blocks, cudaStream_t stream) {
  gemm_rs_reduce_kernel<<<blocks, 512, 0, stream>>>(plan, sig, heap, static_cast<const __nv_bfloat16*>(buf),
                                                    static_cast<const __nv_bfloat16*>(recv),
                                                    static_cast<__nv_bfloat16*>(out));
  TL_CUDA_CHECK(cudaGetLastError());
}

void preload_gemm_rs_reduce() { preload_kernel(gemm_rs_reduce_kernel); }

}  // namespace tilelink::detail
