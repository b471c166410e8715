// `tilelink bench mlp`: the tensor-parallel MLP against its non-overlapped chain.
#pragma once

#include <cstdint>
#include <string>

#include "bench/options.hpp"
#include "bench/report.hpp"
#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::bench {

struct MlpBenchOptions : RunOptions {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 8192;         // LLaMA-3.1-70B
  uint32_t intermediate = 28672;  // over all ranks
  MlpConfig config;
  DType dtype = DType::kBf16;  // e4m3: bench_mlp_fp8
  Fp8Scaling scaling = Fp8Scaling::kRow;
};

// Mlp::run (AG+GEMM -> activation -> GEMM+RS) against the non-overlapped chain (copy-engine
// all-gather, cuBLAS fc1, activation, cuBLAS fc2, copy-engine reduce-scatter), its parts and the
// ideal max(T_fc1, T_ag) + T_act + max(T_fc2, T_rs). mlp.cu.
Table bench_mlp(const MlpBenchOptions& options);
// The FP8 MLP (e4m3 weights, `options.scaling`; fc1 quantising the tokens on send, fc2 the
// activation) against the same block in bf16, and its non-overlapped paths. mlp_fp8.cu.
Table bench_mlp_fp8(const MlpBenchOptions& options);

}  // namespace tilelink::bench
