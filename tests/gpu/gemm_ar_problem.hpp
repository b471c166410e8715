// A GEMM+AR problem the GPU tests run (test_gemm_ar.cu, test_graphs.cu): every rank's buffers and
// the arguments that name them, with fresh random inputs and poisoned outputs on demand.
#pragma once

#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"

namespace tilelink::test {

// Per rank: A (M x K), B (N x K), out (M x N) and, with the norm, residual and residual_out
// (M x N) and the norm weight (N); `args` names them with `config`.
struct GemmArProblem {
  std::vector<DeviceBuffer> a, b, out, residual, residual_out, weight;
  GemmArArguments args;
  // What the last fresh() uploaded as the residual and the norm weight (the same on every rank).
  std::vector<__nv_bfloat16> host_residual, host_weight;

  GemmArProblem(const World& world, uint32_t m, uint32_t n, uint32_t k, bool norm, const GemmArConfig& config,
                float eps) {
    args.m = m;
    args.n = n;
    args.k = k;
    args.eps = eps;
    args.config = config;
    for (int r = 0; r < world.size(); ++r) {
      const int dev = world.device(r);
      a.emplace_back(size_t(m) * k * 2, dev);
      b.emplace_back(size_t(n) * k * 2, dev);
      out.emplace_back(size_t(m) * n * 2, dev);
      args.a.push_back(a[r].get());
      args.b.push_back(b[r].get());
      args.out.push_back(out[r].get());
      if (norm) {
        residual.emplace_back(size_t(m) * n * 2, dev);
        residual_out.emplace_back(size_t(m) * n * 2, dev);
        weight.emplace_back(size_t(n) * 2, dev);
        args.residual.push_back(residual[r].get());
        args.residual_out.push_back(residual_out[r].get());
        args.norm_weight.push_back(weight[r].get());
      }
    }
  }

  // Fresh A, B (and residual, weight: the same on every rank) and poisoned outputs.
  void fresh(std::mt19937_64& rng) {
    const size_t mn = size_t(args.m) * args.n;
    host_residual = random_bf16(mn, rng);
    host_weight = random_bf16(args.n, rng);
    for (auto& x : host_weight) x = __float2bfloat16(1.0f + 0.5f * __bfloat162float(x));
    for (size_t r = 0; r < a.size(); ++r) {
      upload(a[r].get(), random_bf16(size_t(args.m) * args.k, rng).data(), a[r].bytes());
      upload(b[r].get(), random_bf16(size_t(args.n) * args.k, rng).data(), b[r].bytes());
      poison_outputs(r);
      if (!residual.empty()) {
        upload(residual[r].get(), host_residual.data(), residual[r].bytes());
        upload(weight[r].get(), host_weight.data(), weight[r].bytes());
      }
    }
  }
  // Rank r's out (and residual_out) poisoned.
  void poison_outputs(size_t r) {
    poison(out[r].get(), out[r].bytes());
    if (!residual_out.empty()) poison(residual_out[r].get(), residual_out[r].bytes());
  }
};

}  // namespace tilelink::test
