// bf16 -> FP8 quantisation on the device, by fp8.hpp's rule (scale = amax / 448, value =
// e4m3(x / scale), saturated). The FP8 ops run quantize_rows_e4m3 to quantise a bf16 shard on
// send; callers use all three to prepare operands. Each enqueues on `stream` and launches nothing
// on bad input (InvalidArgument naming the argument).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/ops/common/fp8.hpp"

namespace tilelink {

// `rows` rows of k bf16 (row pitch src_pitch elements) into packed FP8 rows (fp8.hpp) at `dst`,
// row pitch fp8_row_pitch(k, scaling) bytes. Row and block scaling compute each row's or
// 1 x 128 block's scale from its amax and write it into the row's tail (one pass: each row is read
// once from memory); tensor scaling divides by *tensor_scale (a device float).
void quantize_rows_e4m3(const void* src, uint64_t src_pitch, uint32_t rows, uint32_t k, Fp8Scaling scaling,
                        const float* tensor_scale, void* dst, cudaStream_t stream);

// An N x K bf16 weight into N x K e4m3 (`dst`) and its fp8_b_scales(n, k, scaling) scales
// (`scales`): tensor scaling takes the amax of the whole weight (two kernels), row one per row,
// block one per 128 x 128 block.
void quantize_weight_e4m3(const void* src, uint32_t n, uint32_t k, Fp8Scaling scaling, void* dst, float* scales,
                          cudaStream_t stream);

// *scale = e4m3_scale(amax of `rows` x k bf16, row pitch src_pitch elements): the tensor scale of
// an activation.
void tensor_scale_e4m3(const void* src, uint64_t src_pitch, uint32_t rows, uint32_t k, float* scale,
                       cudaStream_t stream);

}  // namespace tilelink
