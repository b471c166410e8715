// bf16 -> e4m3 quantisation kernels (fp8_quantize.hpp) and fp8.hpp's names and checks. Eight bf16
// (16 bytes) per thread and step; amax reductions in fp32; one rule for every mode: scale =
// e4m3_scale(amax), value = e4m3(x / scale) saturated -- the tests' CPU reference applies the same
// operations, so the bytes match exactly.
#include "tilelink/ops/common/fp8_quantize.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "tilelink/core/error.hpp"

namespace tilelink {

const char* to_string(DType d) { return d == DType::kBf16 ? "bf16" : d == DType::kE4m3 ? "e4m3" : "?"; }

const char* to_string(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::kTensor: return "tensor";
    case Fp8Scaling::kRow: return "row";
    case Fp8Scaling::kBlock: return "block";
  }
  return "?";
}

std::string check_fp8_extents(uint32_t k, Fp8Scaling s) {
  if (static_cast<uint32_t>(s) > static_cast<uint32_t>(Fp8Scaling::kBlock)) {
    return "argument 'scaling' = " + std::to_string(static_cast<uint32_t>(s)) + ": expected tensor, row or block";
  }
  if (k == 0 || k % 16 != 0) {
    return "argument 'k' = " + std::to_string(k) + ": expected a positive multiple of 16 (TMA needs 16-byte rows of e4m3)";
  }
  if (s == Fp8Scaling::kBlock && k % kFp8BlockK != 0) {
    return "argument 'k' = " + std::to_string(k) + ": expected a multiple of " + std::to_string(kFp8BlockK) +
           " for block scaling (whole 1 x 128 and 128 x 128 scale blocks along K)";
  }
  return "";
}

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float amax_bf16x8(const uint4& v) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return m;
}

// Eight bf16 divided by `scale`, as eight e4m3 bytes.
__device__ __forceinline__ uint2 quantize_bf16x8(const uint4& v, float scale) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  uint2 out;
  auto* o = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    o[i] = __nv_cvt_float2_to_fp8x2(make_float2(f.x / scale, f.y / scale), __NV_SATFINITE, __NV_E4M3);
  }
  return out;
}

__device__ __forceinline__ float warp_max(float v, int width) {
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, width));
  return v;
}

__device__ float block_max(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_max(v, 32);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float m = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();  // `partial` is reused by the next call
  return m;
}

// One block per row. Output row r: e4m3 at dst + r * dst_pitch; its scales at
// scale + r * scale_stride (block mode: K / 128 consecutive floats); tail bytes past the scales up
// to `tail_end` (packed rows) zeroed.
template <Fp8Scaling kScaling>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const __nv_bfloat16* __restrict__ src,
                                                                 uint64_t src_pitch, uint32_t k,
                                                                 const float* tensor_scale, uint8_t* dst,
                                                                 uint64_t dst_pitch, float* scale,
                                                                 uint64_t scale_stride, uint32_t tail_end) {
  const uint64_t row = blockIdx.x;
  const __nv_bfloat16* in = src + row * src_pitch;
  uint8_t* out = dst + row * dst_pitch;
  const uint32_t vectors = k / 8;
  if constexpr (kScaling == Fp8Scaling::kBlock) {
    // 16 threads per 1 x 128 block: each its 8 values, the block's amax over the 16 lanes.
    const uint32_t lane16 = threadIdx.x % 16;
    for (uint32_t b = threadIdx.x / 16; b < k / kFp8BlockK; b += kThreads / 16) {
      const uint32_t v = b * (kFp8BlockK / 8) + lane16;
      const uint4 x = *reinterpret_cast<const uint4*>(in + uint64_t(v) * 8);
      const float s = e4m3_scale(warp_max(amax_bf16x8(x), 16));
      *reinterpret_cast<uint2*>(out + uint64_t(v) * 8) = quantize_bf16x8(x, s);
      if (lane16 == 0) scale[row * scale_stride + b] = s;
    }
  } else {
    float s;
    if constexpr (kScaling == Fp8Scaling::kTensor) {
      s = *tensor_scale;
    } else {
      float m = 0.0f;
      for (uint32_t v = threadIdx.x; v < vectors; v += kThreads) {
        m = fmaxf(m, amax_bf16x8(*reinterpret_cast<const uint4*>(in + uint64_t(v) * 8)));
      }
      s = e4m3_scale(block_max(m));
      if (threadIdx.x == 0) scale[row * scale_stride] = s;
    }
    for (uint32_t v = threadIdx.x; v < vectors; v += kThreads) {  // the row again, from cache
      *reinterpret_cast<uint2*>(out + uint64_t(v) * 8) =
          quantize_bf16x8(*reinterpret_cast<const uint4*>(in + uint64_t(v) * 8), s);
    }
  }
  // Packed rows: zero the padding after the scales.
  const uint32_t pad0 = k + 4 * fp8_row_scales(k, kScaling);
  for (uint32_t i = pad0 + threadIdx.x; i < tail_end; i += kThreads) out[i] = 0;
}

// One block per 128 x 128 block of an N x K weight: its amax, scale and values.
__global__ void __launch_bounds__(kThreads) quantize_weight_blocks_kernel(const __nv_bfloat16* __restrict__ src,
                                                                          uint32_t n, uint32_t k, uint8_t* dst,
                                                                          float* scales) {
  const uint32_t n0 = blockIdx.x * kFp8BlockN, k0 = blockIdx.y * kFp8BlockK;
  constexpr uint32_t kVecPerRow = kFp8BlockK / 8;  // 16
  const uint32_t rows = min(kFp8BlockN, n - n0);
  float m = 0.0f;
  for (uint32_t i = threadIdx.x; i < rows * kVecPerRow; i += kThreads) {
    const uint64_t r = n0 + i / kVecPerRow, c = k0 + (i % kVecPerRow) * 8;
    m = fmaxf(m, amax_bf16x8(*reinterpret_cast<const uint4*>(src + r * k + c)));
  }
  const float s = e4m3_scale(block_max(m));
  for (uint32_t i = threadIdx.x; i < rows * kVecPerRow; i += kThreads) {
    const uint64_t r = n0 + i / kVecPerRow, c = k0 + (i % kVecPerRow) * 8;
    *reinterpret_cast<uint2*>(dst + r * k + c) = quantize_bf16x8(*reinterpret_cast<const uint4*>(src + r * k + c), s);
  }
  if (threadIdx.x == 0) scales[uint64_t(blockIdx.x) * gridDim.y + blockIdx.y] = s;
}

// *amax_bits = max over the blocks (non-negative floats order as their bit patterns).
__global__ void __launch_bounds__(kThreads) amax_kernel(const __nv_bfloat16* __restrict__ src, uint64_t src_pitch,
                                                        uint32_t rows, uint32_t k, unsigned int* amax_bits) {
  const uint32_t vectors = k / 8;
  float m = 0.0f;
  for (uint64_t i = blockIdx.x * uint64_t(kThreads) + threadIdx.x; i < uint64_t(rows) * vectors;
       i += uint64_t(gridDim.x) * kThreads) {
    m = fmaxf(m, amax_bf16x8(*reinterpret_cast<const uint4*>(src + (i / vectors) * src_pitch + (i % vectors) * 8)));
  }
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void amax_to_scale_kernel(float* v) { *v = e4m3_scale(*v); }

void check_src(const void* src, uint64_t pitch_elems, uint32_t k, const char* what) {
  if (src == nullptr || reinterpret_cast<uintptr_t>(src) % 16 != 0 || pitch_elems % 8 != 0 || pitch_elems < k) {
    throw InvalidArgument(std::string(what) + ": expected a 16-byte aligned bf16 source with row pitch >= k and a " +
                          "multiple of 8 elements (pitch " + std::to_string(pitch_elems) + ", k " + std::to_string(k) +
                          ")");
  }
}

unsigned int blocks_for(uint64_t vectors) {
  return static_cast<unsigned int>(std::min<uint64_t>((vectors + kThreads - 1) / kThreads, 132 * 8));
}

}  // namespace

void quantize_rows_e4m3(const void* src, uint64_t src_pitch, uint32_t rows, uint32_t k, Fp8Scaling scaling,
                        const float* tensor_scale, void* dst, cudaStream_t stream) {
  if (std::string e = check_fp8_extents(k, scaling); !e.empty()) throw InvalidArgument("quantize_rows_e4m3: " + e);
  check_src(src, src_pitch, k, "quantize_rows_e4m3: argument 'src'");
  if (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    throw InvalidArgument("quantize_rows_e4m3: argument 'dst': expected a 16-byte aligned device pointer");
  }
  if (scaling == Fp8Scaling::kTensor && tensor_scale == nullptr) {
    throw InvalidArgument("quantize_rows_e4m3: argument 'tensor_scale' = null: tensor scaling divides by a device scale");
  }
  if (rows == 0) return;
  const auto* in = static_cast<const __nv_bfloat16*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t pitch = fp8_row_pitch(k, scaling);
  auto* tail = reinterpret_cast<float*>(out + k);  // the first row's scales
  const uint32_t tail_end = static_cast<uint32_t>(pitch);
  switch (scaling) {
    case Fp8Scaling::kTensor:
      quantize_rows_kernel<Fp8Scaling::kTensor><<<rows, kThreads, 0, stream>>>(in, src_pitch, k, tensor_scale, out, pitch,
                                                                                nullptr, 0, tail_end);
      break;
    case Fp8Scaling::kRow:
      quantize_rows_kernel<Fp8Scaling::kRow><<<rows, kThreads, 0, stream>>>(in, src_pitch, k, nullptr, out, pitch, tail,
                                                                             pitch / 4, tail_end);
      break;
    case Fp8Scaling::kBlock:
      quantize_rows_kernel<Fp8Scaling::kBlock><<<rows, kThreads, 0, stream>>>(in, src_pitch, k, nullptr, out, pitch,
                                                                               tail, pitch / 4, tail_end);
      break;
  }
  TL_CUDA_CHECK(cudaGetLastError());
}

void tensor_scale_e4m3(const void* src, uint64_t src_pitch, uint32_t rows, uint32_t k, float* scale,
                       cudaStream_t stream) {
  check_src(src, src_pitch, k, "tensor_scale_e4m3: argument 'src'");
  if (scale == nullptr) throw InvalidArgument("tensor_scale_e4m3: argument 'scale' = null: expected a device float");
  TL_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), stream));
  if (rows > 0 && k > 0) {
    amax_kernel<<<blocks_for(uint64_t(rows) * (k / 8)), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(src), src_pitch, rows, k, reinterpret_cast<unsigned int*>(scale));
    TL_CUDA_CHECK(cudaGetLastError());
  }
  amax_to_scale_kernel<<<1, 1, 0, stream>>>(scale);
  TL_CUDA_CHECK(cudaGetLastError());
}

void quantize_weight_e4m3(const void* src, uint32_t n, uint32_t k, Fp8Scaling scaling, void* dst, float* scales,
                          cudaStream_t stream) {
  if (std::string e = check_fp8_extents(k, scaling); !e.empty()) throw InvalidArgument("quantize_weight_e4m3: " + e);
  check_src(src, k, k, "quantize_weight_e4m3: argument 'src'");
  if (dst == nullptr || reinterpret_cast<uintptr_t>(dst) % 16 != 0 || scales == nullptr) {
    throw InvalidArgument("quantize_weight_e4m3: arguments 'dst', 'scales': expected a 16-byte aligned N x K e4m3 "
                          "buffer and a device buffer of fp8_b_scales(n, k, scaling) floats");
  }
  if (n == 0) return;
  const auto* in = static_cast<const __nv_bfloat16*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  switch (scaling) {
    case Fp8Scaling::kTensor:
      tensor_scale_e4m3(src, k, n, k, scales, stream);
      quantize_rows_kernel<Fp8Scaling::kTensor><<<n, kThreads, 0, stream>>>(in, k, k, scales, out, k, nullptr, 0, k);
      break;
    case Fp8Scaling::kRow:
      quantize_rows_kernel<Fp8Scaling::kRow><<<n, kThreads, 0, stream>>>(in, k, k, nullptr, out, k, scales, 1, k);
      break;
    case Fp8Scaling::kBlock:
      quantize_weight_blocks_kernel<<<dim3((n + kFp8BlockN - 1) / kFp8BlockN, k / kFp8BlockK), kThreads, 0, stream>>>(
          in, n, k, out, scales);
      break;
  }
  TL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tilelink
