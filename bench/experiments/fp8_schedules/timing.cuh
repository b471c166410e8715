// The FP8 schedule experiment (README.md here): one configuration of Sm90Fp8TnGemm (CUTLASS's
// persistent scheduler, not the ops' row order), timed with CUDA events.
#pragma once
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cuda_runtime.h>
#include <cstdio>
#include "tilelink/ops/common/fp8.hpp"
#include "ops/common/sm90_fp8_tn_gemm.cuh"

struct ExpProblem {
  uint32_t m, n, k;
  const void* a; uint64_t lda; const float* a_scale; const void* b; const float* b_scale; void* d;
  int iters;
};

template <class Types>
double time_config(const char* name, const ExpProblem& p) {
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<typename Types::Kernel>;
  typename Types::Kernel::Arguments args{};
  Types::set_problem(args, p.m, p.n, p.k, p.a, p.lda, p.a_scale, p.b, p.b_scale, p.d, nullptr, 1);
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  args.hw_info.device_id = 0; args.hw_info.sm_count = sms;
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) { printf("%s: cannot implement\n", name); return -1; }
  size_t ws = Gemm::get_workspace_size(args); void* w = nullptr; if (ws) cudaMalloc(&w, ws);
  if (gemm.initialize(args, w) != cutlass::Status::kSuccess) { printf("%s: init failed\n", name); return -1; }
  for (int i = 0; i < 3; ++i) gemm.run();
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < p.iters; ++i) gemm.run();
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms = 0; cudaEventElapsedTime(&ms, e0, e1);
  cudaError_t st = cudaGetLastError();
  double us = 1000.0 * ms / p.iters;
  printf("%-34s %9.1f us  %6.0f TFLOP/s  %s\n", name, us, 2.0 * p.m * p.n * double(p.k) / us / 1e6, cudaGetErrorString(st));
  if (w) cudaFree(w);
  return us;
}
using namespace tilelink; using namespace tilelink::detail;
using namespace cute;
