// GPU reference of attention forward for the SP attention tests: plain two-pass softmax attention
// in fp32 scores and double accumulators, one CUDA block per (query, q head) pair, over a whole
// sequence given in position order. Nothing of the op is shared: no CuTe, no tensor cores, no
// sharding, chunking or online rescaling.
//
//   q_tokens  tokens x q_heads x head_dim bf16: the query rows to evaluate (any subset of the
//             sequence, in any order; a Query names its row here and its position separately)
//   kv_seq    seq_len rows in position order, each [K (kv_heads x head_dim) | V (kv_heads x
//             head_dim)] bf16 (the op's K/V row format, but sorted by position)
//   o         one row of head_dim floats per Query; lse one float per Query (natural log)
//
// score_j = (q . k_j) / sqrt(head_dim) (fp32, exact products of bf16 values); under the causal mask
// the query at position p sees the keys at positions 0..p; GQA: q head h reads kv head
// h / (q_heads / kv_heads).
//
// Pass 1: every thread takes a strided share of the keys and keeps the largest score; a block
// reduction gives the row max m. Pass 2 walks the keys in tiles of kRefThreads: each thread
// recomputes one score and writes p = exp(s - m) to shared memory (and adds it to its share of
// l, in double); then thread e < head_dim adds sum_j p_j v_j[e] to its double accumulator. No
// score array is kept, so any sequence length works (128k tokens and beyond).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/testing/attention_reference.hpp"

#include "tilelink/core/error.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink::test::attention_ref {

constexpr int kRefThreads = 128;
constexpr uint32_t kRefMaxHeadDim = 128;  // thread e owns output column e in pass 2

// Token position of local row `row` of `rank` in a sequence sharded by `layout` over `world` ranks
// of `spr` tokens, written from the layout's definition (sp_attention_protocol.hpp), not from
// SpAttentionPlan: the op's plan must agree with it.
inline uint32_t token_position(SeqLayout layout, uint32_t world, uint32_t spr, uint32_t rank, uint32_t row) {
  if (layout == SeqLayout::kContiguous) return rank * spr + row;
  const uint32_t half = spr / 2;
  const uint32_t piece = row < half ? rank : 2 * world - 1 - rank;
  return piece * half + row % half;
}

struct Query {
  uint32_t token;     // row of q_tokens
  uint32_t position;  // its position in the sequence (the causal limit)
  uint32_t head;      // q head
};

struct Params {
  const __nv_bfloat16* q;
  const __nv_bfloat16* kv;
  const Query* queries;
  float* o;
  float* lse;
  AttentionShape shape;
  float scale;
};

template <int kThreads>
__device__ inline float ref_block_max(float x, float* red) {
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kThreads / 32; ++w) r = fmaxf(r, red[w]);
  __syncthreads();
  return r;
}

template <int kThreads>
__device__ inline double ref_block_sum(double x, double* red) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  double r = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) r += red[w];
  __syncthreads();
  return r;
}

// One block per Query (grid = number of queries). A template, so that the header may be included
// by several translation units.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) attention_reference_kernel(const Params p) {
  static_assert(kThreads % 32 == 0 && kThreads >= int(kRefMaxHeadDim), "a thread per output column");
  __shared__ float q_s[kRefMaxHeadDim];
  __shared__ float p_s[kThreads];
  __shared__ float red_f[kThreads / 32];
  __shared__ double red_d[kThreads / 32];

  const Query qu = p.queries[blockIdx.x];
  const AttentionShape& s = p.shape;
  const uint32_t d = s.head_dim;
  const uint32_t kv_h = qu.head / (s.q_heads / s.kv_heads);
  const uint64_t row_elems = uint64_t(2) * s.kv_heads * d;
  const __nv_bfloat16* k0 = p.kv + uint64_t(kv_h) * d;
  const __nv_bfloat16* v0 = p.kv + uint64_t(s.kv_heads + kv_h) * d;
  const uint32_t keys = s.causal ? qu.position + 1 : s.seq;

  const __nv_bfloat16* q_row = p.q + (uint64_t(qu.token) * s.q_heads + qu.head) * d;
  for (uint32_t e = threadIdx.x; e < d; e += kThreads) q_s[e] = __bfloat162float(q_row[e]);
  __syncthreads();

  // Same instruction sequence in both passes: pass 2 sees exactly the scores pass 1 maximised.
  auto score = [&](uint32_t j) -> float {
    const uint4* k = reinterpret_cast<const uint4*>(k0 + uint64_t(j) * row_elems);
    float acc = 0.f;
    for (uint32_t c = 0; c < d / 8; ++c) {
      const uint4 raw = k[c];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
      for (uint32_t t = 0; t < 4; ++t) {
        const float2 f = __bfloat1622float2(h[t]);
        acc = fmaf(q_s[c * 8 + 2 * t], f.x, acc);
        acc = fmaf(q_s[c * 8 + 2 * t + 1], f.y, acc);
      }
    }
    return acc * p.scale;
  };

  // Pass 1: the row max.
  float m = -INFINITY;
  for (uint32_t j = threadIdx.x; j < keys; j += kThreads) m = fmaxf(m, score(j));
  m = ref_block_max<kThreads>(m, red_f);

  // Pass 2: l = sum exp(s - m), o = sum exp(s - m) v.
  double l = 0.0;
  double acc = 0.0;
  for (uint32_t t0 = 0; t0 < keys; t0 += kThreads) {
    const uint32_t j = t0 + threadIdx.x;
    float pj = 0.f;
    if (j < keys) {
      pj = expf(score(j) - m);
      l += pj;
    }
    p_s[threadIdx.x] = pj;
    __syncthreads();
    if (threadIdx.x < d) {
      const uint32_t n = min(uint32_t(kThreads), keys - t0);
      const __nv_bfloat16* v = v0 + uint64_t(t0) * row_elems + threadIdx.x;
      for (uint32_t jj = 0; jj < n; ++jj) {
        acc += double(p_s[jj]) * double(__bfloat162float(v[uint64_t(jj) * row_elems]));
      }
    }
    __syncthreads();
  }
  l = ref_block_sum<kThreads>(l, red_d);
  if (threadIdx.x < d) p.o[uint64_t(blockIdx.x) * d + threadIdx.x] = float(acc / l);
  if (threadIdx.x == 0) p.lse[blockIdx.x] = float(double(m) + log(l));
}

// Runs the reference on `device` (synchronously; the device should be idle of the caller's work
// that writes nothing it reads: everything is copied from the host here). o gets
// queries.size() x head_dim floats, lse queries.size() floats.
inline void reference_attention(int device, const AttentionShape& s, const std::vector<__nv_bfloat16>& q_tokens,
                                const std::vector<__nv_bfloat16>& kv_seq, const std::vector<Query>& queries,
                                std::vector<float>& o, std::vector<float>& lse) {
  const std::string where = "attention_ref::reference_attention: ";
  if (s.head_dim == 0 || s.head_dim > kRefMaxHeadDim || s.head_dim % 8 != 0) {
    throw InvalidArgument(where + "head_dim = " + std::to_string(s.head_dim) + ": expected a multiple of 8 up to " +
                          std::to_string(kRefMaxHeadDim));
  }
  if (s.kv_heads == 0 || s.q_heads == 0 || s.q_heads % s.kv_heads != 0) {
    throw InvalidArgument(where + "q_heads = " + std::to_string(s.q_heads) +
                          ": expected a positive multiple of kv_heads (" + std::to_string(s.kv_heads) + ")");
  }
  const uint64_t token_elems = uint64_t(s.q_heads) * s.head_dim;
  const uint64_t row_elems = uint64_t(2) * s.kv_heads * s.head_dim;
  if (q_tokens.size() % token_elems != 0) {
    throw InvalidArgument(where + "q_tokens has " + std::to_string(q_tokens.size()) +
                          " elements: expected a multiple of q_heads * head_dim");
  }
  if (kv_seq.size() != uint64_t(s.seq) * row_elems) {
    throw InvalidArgument(where + "kv_seq has " + std::to_string(kv_seq.size()) + " elements: expected seq_len (" +
                          std::to_string(s.seq) + ") x 2 x kv_heads x head_dim");
  }
  const uint64_t tokens = q_tokens.size() / token_elems;
  for (const Query& q : queries) {
    if (q.token >= tokens || q.position >= s.seq || q.head >= s.q_heads) {
      throw InvalidArgument(where + "query (token " + std::to_string(q.token) + ", position " +
                            std::to_string(q.position) + ", head " + std::to_string(q.head) + ") out of range");
    }
  }
  o.assign(queries.size() * s.head_dim, 0.f);
  lse.assign(queries.size(), 0.f);
  if (queries.empty()) return;

  int previous = 0;
  TL_CUDA_CHECK(cudaGetDevice(&previous));
  {
    DeviceBuffer d_q(q_tokens.size() * sizeof(__nv_bfloat16), device);
    DeviceBuffer d_kv(kv_seq.size() * sizeof(__nv_bfloat16), device);
    DeviceBuffer d_queries(queries.size() * sizeof(Query), device);
    DeviceBuffer d_o(o.size() * sizeof(float), device);
    DeviceBuffer d_lse(lse.size() * sizeof(float), device);
    TL_CUDA_CHECK(cudaSetDevice(device));
    TL_CUDA_CHECK(cudaMemcpy(d_q.get(), q_tokens.data(), d_q.bytes(), cudaMemcpyHostToDevice));
    TL_CUDA_CHECK(cudaMemcpy(d_kv.get(), kv_seq.data(), d_kv.bytes(), cudaMemcpyHostToDevice));
    TL_CUDA_CHECK(cudaMemcpy(d_queries.get(), queries.data(), d_queries.bytes(), cudaMemcpyHostToDevice));
    Params p;
    p.q = d_q.get<const __nv_bfloat16>();
    p.kv = d_kv.get<const __nv_bfloat16>();
    p.queries = d_queries.get<const Query>();
    p.o = d_o.get<float>();
    p.lse = d_lse.get<float>();
    p.shape = s;
    p.scale = static_cast<float>(1.0 / std::sqrt(double(s.head_dim)));
    attention_reference_kernel<kRefThreads><<<static_cast<unsigned>(queries.size()), kRefThreads>>>(p);
    TL_CUDA_CHECK(cudaGetLastError());
    TL_CUDA_CHECK(cudaDeviceSynchronize());
    TL_CUDA_CHECK(cudaMemcpy(o.data(), d_o.get(), d_o.bytes(), cudaMemcpyDeviceToHost));
    TL_CUDA_CHECK(cudaMemcpy(lse.data(), d_lse.get(), d_lse.bytes(), cudaMemcpyDeviceToHost));
  }
  TL_CUDA_CHECK(cudaSetDevice(previous));
}

}  // namespace tilelink::test::attention_ref
