// A GEMM+RS problem the GPU tests run (test_gemm_rs.cu's tune-cache test, test_trace.cu): its
// buffers and the arguments that name them.
#pragma once

#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::test {

// C = A * B^T over the ranks of `env`, reduced and scattered: the symmetric partial and receive
// buffers (M x N bf16 each, from env's heap), every rank's random A (M x K) and B (N x K) and its
// out (M / world x N), and `args` naming them with the default configuration.
struct GemmRsProblem {
  SymmetricBuffer partial, recv;
  std::vector<DeviceBuffer> a, b, out;
  GemmRsArguments args;

  GemmRsProblem(TestWorld& env, uint32_t m, uint32_t n, uint32_t k, std::mt19937_64& rng)
      : partial(env.heap.allocate(size_t(m) * n * 2)), recv(env.heap.allocate(size_t(m) * n * 2)) {
    const int world = env.world.size();
    args.partial = &partial;
    args.recv = &recv;
    args.m = m;
    args.n = n;
    args.k = k;
    for (int r = 0; r < world; ++r) {
      a.emplace_back(size_t(m) * k * 2, env.world.device(r));
      b.emplace_back(size_t(n) * k * 2, env.world.device(r));
      out.emplace_back(size_t(m / uint32_t(world)) * n * 2, env.world.device(r));
      upload(a[r].get(), random_bf16(size_t(m) * k, rng).data(), a[r].bytes());
      upload(b[r].get(), random_bf16(size_t(n) * k, rng).data(), b[r].bytes());
      args.a.push_back(a[r].get());
      args.b.push_back(b[r].get());
      args.out.push_back(out[r].get());
    }
  }
  GemmRsProblem(const GemmRsProblem&) = delete;  // args points at the buffers
  GemmRsProblem& operator=(const GemmRsProblem&) = delete;
};

}  // namespace tilelink::test
