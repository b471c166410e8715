// What the MoE GPU tests (and the fuzzer, tests/fuzz/) share: the world x routing parameter grid,
// the top-k sweep of a case, and the references: rows placed by the host mapping, grouped GEMMs
// by cuBLAS expert by expert, the layer's chain with the activation on the host, and the check of
// the owners' combined rows.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "host_ref.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::test {

using WorldRouting = std::tuple<int, SyntheticRouting>;

// World 1, 2, 4, 8 x uniform, skewed, few-experts routing.
inline auto worlds_and_routings() {
  return ::testing::Combine(::testing::Values(1, 2, 4, 8),
                            ::testing::Values(SyntheticRouting::kUniform, SyntheticRouting::kSkewed,
                                              SyntheticRouting::kFewExperts));
}

inline std::string world_routing_name(const ::testing::TestParamInfo<WorldRouting>& info) {
  return "world" + std::to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
}

// run(topk, rng) for top-k 1, 2, 4, 6, 8 from one fresh seed (traced, so a failure can be
// replayed); each returns "" or what failed.
inline void expect_every_topk(const std::function<std::string(uint32_t topk, std::mt19937_64& rng)>& run) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (uint32_t topk : {1u, 2u, 4u, 6u, 8u}) EXPECT_EQ(run(topk, rng), "") << "topk " << topk;
}

// v rounded to bf16 (to nearest even), as the ops store their outputs.
inline float bf16_round(float v) { return __bfloat162float(__float2bfloat16(v)); }
// One unit in the last place of bf16 at v (8 significant bits): what a rounding may flip by when
// two fp32 sums of different order straddle a rounding point.
inline float bf16_ulp(float v) { return v == 0.f ? 0.f : std::ldexp(1.0f, std::ilogb(v) - 7); }

// Routing weights in [0.05, 1).
inline std::vector<float> random_weights(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(0.05f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// rows x n fp32: each expert's block of `a` (sorted rows x k bf16 on the device) times its slice
// of `w` (experts x n x k bf16), by cuBLAS; rows of no expert (past the mapping's) are not set.
// `simple`: each expert's product from simple_reference instead of cuBLAS (the process tests: cuBLAS
// under some MPS shares leaves tiles unwritten).
inline std::vector<float> grouped_reference(const CublasHandle& cublas, const MoeMapping& m, const void* a, const void* w,
                                            uint32_t n, uint32_t k, int device, bool simple = false) {
  const uint32_t rows = m.num_tiles() * m.bm;
  DeviceBuffer ref(size_t(rows) * n * sizeof(float) + 16, device);
  for (uint32_t e = 0; e < m.experts; ++e) {
    const uint32_t row0 = m.row_offset[e], rows_e = m.row_offset[e + 1] - row0;
    if (rows_e == 0) continue;
    const char* a_e = static_cast<const char*>(a) + size_t(row0) * k * 2;
    const char* w_e = static_cast<const char*>(w) + size_t(e) * n * k * 2;
    float* ref_e = ref.get<float>() + size_t(row0) * n;
    if (simple) {
      simple_reference(a_e, w_e, ref_e, rows_e, n, k);
    } else {
      cublas_reference(cublas.get(), a_e, w_e, ref_e, rows_e, n, k);
    }
  }
  settle();
  return download<float>(ref.get(), size_t(rows) * n);
}

// Checks every owner's out (tokens_per_rank x n bf16 on the device) against the chain on the
// rank's fp32 GEMM rows y[r]: bf16(y), weighted top-k sums rounded to bf16 per rank, the
// rank-order fp32 sum rounded to bf16. Tolerance: 1 % of the sum of the terms' magnitudes (the
// GEMMs' and activation's roundings carried through), plus one bf16 ulp of each rank's rounded
// partial and of the rounded sum (each may round the other way from the reference's), plus, given
// `slack` (per rank, moe_layer_rank_reference's), each term's weighted slack.
// With `only` >= 0, only that owner's out is read (a process world: the others are other
// processes').
inline std::string check_moe_outputs(const MoeMapping& m, const std::vector<float>& weights,
                                     const std::vector<std::vector<float>>& y, const std::vector<void*>& out,
                                     uint32_t tokens_per_rank, uint32_t n, const std::string& where, int only = -1,
                                     const std::vector<std::vector<float>>* slack = nullptr) {
  const uint32_t world = static_cast<uint32_t>(y.size()), topk = m.topk;
  for (uint32_t q = 0; q < world; ++q) {
    if (only >= 0 && q != static_cast<uint32_t>(only)) continue;
    const auto got = download<__nv_bfloat16>(out[q], size_t(tokens_per_rank) * n);
    for (uint32_t i = 0; i < tokens_per_rank; ++i) {
      const uint32_t t = q * tokens_per_rank + i;
      for (uint32_t col = 0; col < n; ++col) {
        float want = 0.f, mag = 0.f, ulps = 0.f;
        for (uint32_t r = 0; r < world; ++r) {
          float part = 0.f;
          for (uint32_t j = 0; j < topk; ++j) {
            const size_t pair = size_t(t) * topk + j;
            const size_t at = size_t(m.pair_row[pair]) * n + col;
            const float term = weights[pair] * bf16_round(y[r][at]);
            part += term;
            mag += std::fabs(term);
            if (slack != nullptr) ulps += std::fabs(weights[pair]) * (*slack)[r][at];
          }
          want += bf16_round(part);
          ulps += bf16_ulp(part);
        }
        want = bf16_round(want);
        ulps += bf16_ulp(want);
        const float g = __bfloat162float(got[size_t(i) * n + col]);
        if (!(std::fabs(g - want) <= 1e-2f * mag + ulps + 1e-3f)) {
          return where + ": owner " + std::to_string(q) + " token " + std::to_string(t) + " col " +
                 std::to_string(col) + " = " + std::to_string(g) + ", reference " + std::to_string(want) +
                 " (terms' magnitude " + std::to_string(mag) + ", rounding allowance " + std::to_string(ulps) + ")";
        }
      }
    }
  }
  return "";
}

// The expert-sorted rows mapping `m` places (m.num_tiles() * m.bm rows of `hidden` bf16): every
// pair's token row of x (tokens x hidden), zeros for padding.
inline std::vector<__nv_bfloat16> sorted_rows(const MoeMapping& m, const std::vector<__nv_bfloat16>& x,
                                              uint32_t hidden) {
  const uint32_t rows = m.num_tiles() * m.bm;
  std::vector<__nv_bfloat16> a(size_t(rows) * hidden, __float2bfloat16(0.0f));
  for (uint32_t row = 0; row < rows; ++row) {
    if (m.row_pair[row] == kPadRow) continue;
    std::copy_n(x.begin() + size_t(m.row_pair[row] / m.topk) * hidden, hidden, a.begin() + size_t(row) * hidden);
  }
  return a;
}

// One rank's MoE layer up to the combine, on the sorted rows `a` (sorted_rows): cuBLAS per expert
// with w1 (experts x n1 x hidden, n1 = 2k for SwiGLU: gate rows then up rows, else k), bf16, the
// activation in fp32 on the host, bf16, cuBLAS per expert with w2 (experts x hidden x k): the
// rows' fp32 outputs (rows x hidden), for check_moe_outputs. `scratch`: device memory (on the
// weights' device) of at least rows x max(hidden, k) bf16. `simple`: as for grouped_reference.
// Whether an fp32 value within `eps` of v may round to another bf16 than v does: v lies within eps
// of a midpoint between two bf16 values.
inline bool near_bf16_midpoint(float v, float eps) {
  return v != 0.f && 0.5f * bf16_ulp(v) - std::fabs(v - bf16_round(v)) <= eps;
}

// `slack` (optional, rows x hidden): how far each output may move because the layer's first GEMM
// sums in another order than the reference's. A gate or up value may then round to the other bf16
// -- only where the reference's fp32 value lies within eps of a rounding midpoint, eps = K u
// max|a_row| sum_i |w1_i| / 8 (u = 2^-24): a sixteenth of the two orders' worst-case difference (2 K u
// sum |a w| for recursive sums); in a simulation of sequential against blocked sums at K = 256
// (bench/experiments/moe_rounding_slack/sim.py) the orders differed by at most 0.2 % of the worst
// case, and the slack held every error with room 2x --
// and the activation scales that ulp (host_activation_sensitivity: SwiGLU turns
// one ulp of u into silu(g) ulps), h may then round the other way, and the second GEMM carries the
// difference into every column: slack = sum over k of that move x |w2[col][k]|. Where a token's
// top-k terms cancel, this exceeds 1 % of their magnitude (a 0.071 error on 6640f2e's fresh tree).
inline std::vector<float> moe_layer_rank_reference(const CublasHandle& cublas, const MoeMapping& m,
                                                   const std::vector<__nv_bfloat16>& a, const void* w1, const void* w2,
                                                   uint32_t hidden, uint32_t k, MlpActivation act,
                                                   DeviceBuffer& scratch, bool simple = false,
                                                   std::vector<float>* slack = nullptr) {
  const size_t rows = size_t(m.num_tiles()) * m.bm;
  const uint32_t n1 = (act == MlpActivation::kSwiGlu ? 2 : 1) * k;
  upload(scratch.get(), a.data(), a.size() * 2);
  const std::vector<float> y1 = grouped_reference(cublas, m, scratch.get(), w1, n1, hidden, scratch.device(), simple);
  // For the slack: each expert column's sum of |w1| and each row's largest |a| (eps above).
  std::vector<float> w1_abs, a_max;
  std::vector<uint32_t> expert_of(slack != nullptr ? rows : 0, 0);
  if (slack != nullptr) {
    const std::vector<__nv_bfloat16> w1_host = download<__nv_bfloat16>(w1, size_t(m.experts) * n1 * hidden);
    w1_abs.assign(size_t(m.experts) * n1, 0.f);
    for (size_t i = 0; i < w1_host.size(); ++i) w1_abs[i / hidden] += std::fabs(__bfloat162float(w1_host[i]));
    a_max.assign(rows, 0.f);
    for (size_t i = 0; i < size_t(rows) * hidden; ++i) a_max[i / hidden] = std::max(a_max[i / hidden], std::fabs(__bfloat162float(a[i])));
    for (uint32_t e = 0; e < m.experts; ++e) {
      for (uint32_t row = m.row_offset[e]; row < m.row_offset[e + 1]; ++row) expert_of[row] = e;
    }
  }
  const float order_bound = float(hidden) * std::ldexp(1.0f, -27);  // K u / 8
  std::vector<__nv_bfloat16> h(rows * k);
  std::vector<float> dh(slack != nullptr ? rows * k : 0);
  for (size_t row = 0; row < rows; ++row) {
    for (uint32_t col = 0; col < k; ++col) {
      const float g32 = y1[row * n1 + col];
      const float u32 = act == MlpActivation::kSwiGlu ? y1[row * n1 + k + col] : 0.f;
      const float g = bf16_round(g32);
      const float u = bf16_round(u32);
      const float v = host_activation(act, g, u);
      h[row * k + col] = __float2bfloat16(v);
      if (slack == nullptr || m.row_pair[row] == kPadRow) continue;
      const float* sum_w = w1_abs.data() + size_t(expert_of[row]) * n1;
      const float dg = near_bf16_midpoint(g32, order_bound * a_max[row] * sum_w[col]) ? bf16_ulp(g32) : 0.f;
      const float du = act == MlpActivation::kSwiGlu && near_bf16_midpoint(u32, order_bound * a_max[row] * sum_w[k + col])
                           ? bf16_ulp(u32)
                           : 0.f;
      const float moved = host_activation_sensitivity(act, g, u, dg, du);
      // h's own rounding: the op's activation (device exp / erf, or moved inputs) may land on the
      // other side of a midpoint.
      dh[row * k + col] = moved + (near_bf16_midpoint(v, moved + std::fabs(v) * std::ldexp(1.0f, -18)) ? bf16_ulp(v) : 0.f);
    }
  }
  if (slack != nullptr) {
    const std::vector<__nv_bfloat16> w2_host = download<__nv_bfloat16>(w2, size_t(m.experts) * hidden * k);
    slack->assign(rows * hidden, 0.f);
    for (size_t row = 0; row < rows; ++row) {
      if (m.row_pair[row] == kPadRow) continue;
      const float* d = dh.data() + row * k;
      bool any = false;
      for (uint32_t j = 0; j < k && !any; ++j) any = d[j] != 0.f;
      if (!any) continue;
      for (uint32_t col = 0; col < hidden; ++col) {
        const __nv_bfloat16* w = w2_host.data() + (size_t(expert_of[row]) * hidden + col) * k;
        float sum = 0.f;
        for (uint32_t j = 0; j < k; ++j) sum += d[j] * std::fabs(__bfloat162float(w[j]));
        (*slack)[row * hidden + col] = sum;
      }
    }
  }
  upload(scratch.get(), h.data(), h.size() * 2);
  return grouped_reference(cublas, m, scratch.get(), w2, hidden, k, scratch.device(), simple);
}

}  // namespace tilelink::test
