// An owner's sum of one tile of its block over the senders' partials, in rank order 0..P-1 in
// fp32 (GemmRsFusedPlan, gemm_rs_sender_rows says where each sender's rows are): the body of the
// reduction kernel's blocks (gemm_rs_reduce.cu) and of the GEMM epilogue's own-tile sum
// (sm90_gemm_rs.cuh, GemmRsReducer::kEpilogue).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/common/bf16x8.cuh"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink::detail {

// Rows [row0, row0 + rows), columns [col0, col0 + cols) of owner `rank`'s block (cols and n
// multiples of 8), by `threads` threads of which this is `thread`. Each thread keeps kVectors
// 16-byte loads in flight for each of kSenders senders at a time (one in flight made a CTA
// latency-bound at ~17 GB/s, slower than the GEMM produces tiles; a CTA's rate is about its bytes
// in flight over the load latency). The adds stay in rank order whatever kSenders is: the same
// bits.
template <int kVectors, int kSenders>
__device__ __forceinline__ void gemm_rs_sum_rows(const GemmRsFusedPlan& plan, const SymmetricView& heap,
                                                 uint32_t rank, const __nv_bfloat16* buf, const __nv_bfloat16* recv,
                                                 __nv_bfloat16* out, uint32_t row0, uint32_t rows, uint32_t col0,
                                                 uint32_t cols, uint32_t thread, uint32_t threads) {
  const uint32_t vectors_per_row = cols / 8;
  const uint32_t total = rows * vectors_per_row;
  for (uint32_t e0 = thread; e0 < total; e0 += kVectors * threads) {
    uint64_t at[kVectors];
    bool live[kVectors];
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      const uint32_t e = e0 + j * threads;
      live[j] = e < total;
      at[j] = uint64_t(row0 + e / vectors_per_row) * plan.n + col0 + (e % vectors_per_row) * 8;
    }
    float acc[kVectors][8] = {};
    for (uint32_t s0 = 0; s0 < plan.world; s0 += kSenders) {
      uint4 v[kSenders][kVectors];
#pragma unroll
      for (int i = 0; i < kSenders; ++i) {
        if (s0 + i >= plan.world) break;
        const __nv_bfloat16* src = gemm_rs_sender_rows(plan, heap, rank, s0 + i, buf, recv);
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
          if (live[j]) v[i][j] = *reinterpret_cast<const uint4*>(src + at[j]);
        }
      }
#pragma unroll
      for (int i = 0; i < kSenders; ++i) {
        if (s0 + i >= plan.world) break;
#pragma unroll
        for (int j = 0; j < kVectors; ++j) {
          if (live[j]) add_bf16x8(acc[j], v[i][j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      if (live[j]) *reinterpret_cast<uint4*>(out + at[j]) = pack_bf16x8(acc[j]);
    }
  }
}

}  // namespace tilelink::detail
