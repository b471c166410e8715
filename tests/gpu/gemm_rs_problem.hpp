// A GEMM+RS problem the GPU tests run (test_gemm_rs.cu's tune-cache test, test_trace.cu): its
// buffers and the arguments that name them.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::test {

// C = A * B^T over the ranks of `env`, reduced and scattered: the symmetric partial and receive
// buffers (GemmRs::buffer_rows x N bf16 each, from env's heap), every rank's random A (M x K) and
// B (N x K) and its out (room for ceil(M / world) rows x N, the most any owner gets), and `args`
// naming them with the default configuration.
struct GemmRsProblem {
  SymmetricBuffer partial, recv;
  std::vector<DeviceBuffer> a, b, out;
  GemmRsArguments args;

  GemmRsProblem(TestWorld& env, uint32_t m, uint32_t n, uint32_t k, std::mt19937_64& rng)
      : partial(env.heap.allocate(GemmRs::buffer_rows(m, env.world.size()) * n * 2)),
        recv(env.heap.allocate(GemmRs::buffer_rows(m, env.world.size()) * n * 2)) {
    const int world = env.world.size();
    args.partial = &partial;
    args.recv = &recv;
    args.m = m;
    args.n = n;
    args.k = k;
    for (int r = 0; r < world; ++r) {
      a.emplace_back(size_t(m) * k * 2, env.world.device(r));
      b.emplace_back(size_t(n) * k * 2, env.world.device(r));
      out.emplace_back(GemmRs::buffer_rows(m, world) / uint32_t(world) * n * 2, env.world.device(r));
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

// Expects every owner's output (out[q]: its GemmRs::rows_of rows x N bf16) to be the sum over
// ranks, in rank order in fp32, of each rank's bf16 partial A_r B_r^T by cuBLAS (`ref[r]`, M x N
// bf16, scratch), within a bf16 rounding per partial and of the sum, and the rest of out[q] to
// hold the 0xFF poison still. Returns each owner's output bits.
inline std::vector<std::vector<uint16_t>> expect_rank_order_sum(cublasHandle_t cublas, const World& world,
                                                                const std::vector<DeviceBuffer>& a,
                                                                const std::vector<DeviceBuffer>& b,
                                                                const std::vector<DeviceBuffer>& out,
                                                                std::vector<DeviceBuffer>& ref, uint32_t m,
                                                                uint32_t n, uint32_t k) {
  const int world_size = world.size();
  const uint32_t pitch = uint32_t(GemmRs::buffer_rows(m, world_size) / uint32_t(world_size));  // owner q: rows from q * pitch
  std::vector<std::vector<__nv_bfloat16>> partials(world_size);
  for (int r = 0; r < world_size; ++r) {
    cublas_reference_bf16(cublas, a[r].get(), b[r].get(), ref[r].get(), m, n, k);
    partials[r] = download<__nv_bfloat16>(ref[r].get(), size_t(m) * n);
  }
  std::vector<std::vector<uint16_t>> bits(world_size);
  for (int q = 0; q < world_size; ++q) {
    const size_t out_elems = size_t(GemmRs::rows_of(m, world_size, q)) * n;
    // The whole buffer: past the owner's rows it must still hold the poison (0xFF bytes).
    const auto whole = download<__nv_bfloat16>(out[q].get(), out[q].bytes() / 2);
    const std::vector<__nv_bfloat16> got(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(out_elems));
    size_t untouched = 0;
    for (size_t i = out_elems; i < whole.size(); ++i) {
      uint16_t v;
      std::memcpy(&v, &whole[i], 2);
      untouched += v == 0xFFFF;
    }
    EXPECT_EQ(untouched, whole.size() - out_elems) << "owner " << q << ": written past its " << out_elems / n << " rows";
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < out_elems; ++i) {
      const size_t at = size_t(q) * pitch * n + i;
      float want = 0.f, magnitude = 0.f;
      for (int s = 0; s < world_size; ++s) {
        want += __bfloat162float(partials[s][at]);
        magnitude += std::fabs(__bfloat162float(partials[s][at]));
      }
      const float tol = 2e-2f * magnitude + 1e-2f;
      if (!(std::fabs(__bfloat162float(got[i]) - want) <= tol) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "owner " << q << ": first bad element row " << first / n << " col " << first % n;
    bits[q].resize(out_elems);
    std::memcpy(bits[q].data(), got.data(), out_elems * 2);
  }
  return bits;
}

}  // namespace tilelink::test
