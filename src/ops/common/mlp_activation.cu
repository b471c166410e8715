// The activation between a feed-forward block's GEMMs: SwiGLU (silu(gate) * up over the two
// column halves of the first GEMM's output) or GELU (erf form), bf16 in and out, fp32 math, 8
// elements per thread; and its checks.
#include "tilelink/ops/common/mlp_activation.hpp"

#include <cuda_bf16.h>

#include "tilelink/core/error.hpp"

namespace tilelink {

const char* to_string(MlpActivation a) { return a == MlpActivation::kSwiGlu ? "swiglu" : "gelu"; }

std::string detail::check_ffn(int world, uint32_t intermediate, MlpActivation activation, const char* second_gemm) {
  const uint32_t w = static_cast<uint32_t>(world);
  if (intermediate == 0 || intermediate % (8 * w) != 0) {
    return "argument 'intermediate' = " + std::to_string(intermediate) + ": expected a positive multiple of 8 * " +
           "world size (" + std::to_string(8 * w) + "): each rank's slice is " + second_gemm + "'s K, 16-byte rows";
  }
  if (activation != MlpActivation::kSwiGlu && activation != MlpActivation::kGelu) {
    return "argument 'config.activation' = " + std::to_string(static_cast<uint32_t>(activation)) +
           ": expected swiglu or gelu";
  }
  return "";
}

namespace detail {
namespace {

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float gelu(float y) { return 0.5f * y * (1.0f + erff(y * 0.70710678118654752f)); }

template <MlpActivation kAct>
__global__ void mlp_activation_kernel(const __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ h, uint32_t m,
                                      uint32_t cols_out, const uint32_t* live_tiles, uint32_t tile_rows) {
  if (live_tiles != nullptr) m = min(m, *live_tiles * tile_rows);
  const uint32_t vectors_per_row = cols_out / 8;  // cols_out is a multiple of 8
  const uint64_t total = uint64_t(m) * vectors_per_row;
  const uint32_t in_cols = kAct == MlpActivation::kSwiGlu ? 2 * cols_out : cols_out;
  for (uint64_t v = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; v < total; v += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = v / vectors_per_row, col = (v % vectors_per_row) * 8;
    const uint4 a = *reinterpret_cast<const uint4*>(y + row * in_cols + col);
    const auto* ah = reinterpret_cast<const __nv_bfloat162*>(&a);
    uint4 packed;
    auto* o = reinterpret_cast<__nv_bfloat162*>(&packed);
    if constexpr (kAct == MlpActivation::kSwiGlu) {
      const uint4 b = *reinterpret_cast<const uint4*>(y + row * in_cols + cols_out + col);
      const auto* bh = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 g = __bfloat1622float2(ah[i]), u = __bfloat1622float2(bh[i]);
        o[i] = __floats2bfloat162_rn(silu(g.x) * u.x, silu(g.y) * u.y);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 g = __bfloat1622float2(ah[i]);
        o[i] = __floats2bfloat162_rn(gelu(g.x), gelu(g.y));
      }
    }
    *reinterpret_cast<uint4*>(h + row * cols_out + col) = packed;
  }
}

}  // namespace

void launch_mlp_activation(MlpActivation act, const void* y, void* h, uint32_t m, uint32_t cols_out,
                           cudaStream_t stream, const uint32_t* live_tiles, uint32_t tile_rows) {
  const auto* in = static_cast<const __nv_bfloat16*>(y);
  auto* out = static_cast<__nv_bfloat16*>(h);
  constexpr int kThreads = 256, kBlocks = 132 * 8;
  if (act == MlpActivation::kSwiGlu) {
    mlp_activation_kernel<MlpActivation::kSwiGlu><<<kBlocks, kThreads, 0, stream>>>(in, out, m, cols_out, live_tiles,
                                                                                     tile_rows);
  } else {
    mlp_activation_kernel<MlpActivation::kGelu><<<kBlocks, kThreads, 0, stream>>>(in, out, m, cols_out, live_tiles,
                                                                                     tile_rows);
  }
  TL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace tilelink
