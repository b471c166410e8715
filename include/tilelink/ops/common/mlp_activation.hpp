// The activation between the two GEMMs of a feed-forward block, shared by the tensor-parallel MLP
// (ops/mlp) and the MoE layer's experts (ops/moe):
//   kSwiGlu: the first GEMM's output is [gate | up] (two column halves); act(g | u) = silu(g) * u
//   kGelu:   act(y) = gelu(y) (erf form)
// bf16 in and out, fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace tilelink {

enum class MlpActivation : uint32_t { kSwiGlu = 0, kGelu = 1 };
const char* to_string(MlpActivation a);

namespace detail {
// The checks of a feed-forward block's intermediate size and activation shared by Mlp and
// MoeLayer: "" if the intermediate size splits into 16-byte rows of `second_gemm`'s K on every
// rank and the activation is known, else what is wrong.
std::string check_ffn(int world, uint32_t intermediate, MlpActivation activation, const char* second_gemm);

// act(y) for an M x cols_out output from y (M x (2 or 1) cols_out), bf16 in and out, fp32 math.
// With `live_tiles` (on the device, read by the kernel) only the first *live_tiles * tile_rows
// rows (at most M): the MoE layer's rows in use by the call's routing.
void launch_mlp_activation(MlpActivation act, const void* y, void* h, uint32_t m, uint32_t cols_out,
                           cudaStream_t stream, const uint32_t* live_tiles = nullptr, uint32_t tile_rows = 0);
}  // namespace detail

}  // namespace tilelink
