// The ring-attention baseline's merge of one step's partial result into the running one:
// O = (w_acc O_acc + w_part O_part) / (w_acc + w_part), w = exp(LSE - max), LSE = log-sum-exp.
#include <cuda_bf16.h>

#include <cmath>

#include "ops/attention/sm90_flash_attention_kernel.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {
namespace {

constexpr uint32_t kVec = 8;  // elements per thread

__global__ void ring_merge_kernel(const __nv_bfloat16* o_part, const float* lse_part, float* o_acc, float* lse_acc,
                                  __nv_bfloat16* o_out, float* lse_out, uint32_t rows, uint32_t heads,
                                  uint32_t head_dim, bool first, bool last) {
  const uint32_t vecs = head_dim / kVec;
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= uint64_t(rows) * heads * vecs) return;
  const uint32_t v = static_cast<uint32_t>(i % vecs);
  const uint32_t head = static_cast<uint32_t>((i / vecs) % heads);
  const uint32_t row = static_cast<uint32_t>(i / (uint64_t(vecs) * heads));
  const uint64_t lse_at = uint64_t(head) * rows + row;
  const uint64_t at = (uint64_t(row) * heads + head) * head_dim + v * kVec;
  const float lp = lse_part[lse_at];
  const float la = first ? -INFINITY : lse_acc[lse_at];
  const float mx = fmaxf(la, lp);
  const float wa = mx == -INFINITY ? 0.f : expf(la - mx);
  const float wp = mx == -INFINITY ? 0.f : expf(lp - mx);
  const float norm = wa + wp > 0.f ? 1.f / (wa + wp) : 0.f;
  float out[kVec];
  for (uint32_t e = 0; e < kVec; ++e) {
    const float a = first ? 0.f : o_acc[at + e];
    out[e] = (a * wa + __bfloat162float(o_part[at + e]) * wp) * norm;
  }
  const float lse = mx == -INFINITY ? -INFINITY : mx + logf(wa + wp);
  if (last) {
    for (uint32_t e = 0; e < kVec; ++e) o_out[at + e] = __float2bfloat16_rn(out[e]);
    if (v == 0) lse_out[lse_at] = lse;
  } else {
    for (uint32_t e = 0; e < kVec; ++e) o_acc[at + e] = out[e];
    if (v == 0) lse_acc[lse_at] = lse;
  }
}

}  // namespace

void ring_merge(const void* o_part, const float* lse_part, float* o_acc, float* lse_acc, void* o_out, float* lse_out,
                uint32_t rows, uint32_t heads, uint32_t head_dim, bool first, bool last, cudaStream_t stream) {
  const uint64_t threads = uint64_t(rows) * heads * (head_dim / kVec);
  const uint32_t block = 256;
  ring_merge_kernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(o_part), lse_part, o_acc, lse_acc, static_cast<__nv_bfloat16*>(o_out),
      lse_out, rows, heads, head_dim, first, last);
  TL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tilelink::detail
