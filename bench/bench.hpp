// TileLink benchmarks (library tilelink_bench, driven by the `tilelink` tool). Every benchmark
// runs on make_bench_world's ranks (virtual ranks of device 0, or one rank per GPU with
// TILELINK_RANKS=gpus: bench/world_choice.hpp), checks its result once against an independent
// reference (and throws Error if it differs), then times with CUDA events: median of repeated
// calls after warm-up, on fresh random data.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/mlp/mlp.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::bench {

// ---- micro-benchmarks of the primitives (`tilelink bench primitives`) ------------------------------

struct PrimitiveOptions {
  int world = 2;       // ranks; the micro-benchmarks use ranks 0 and 1
  bool quick = false;  // fewer repetitions and smaller transfers: a smoke run
  uint64_t seed = 1;
};

// Notify -> wait round trip between two ranks, one CTA each, 10^4 round trips per launch, for
// push-style (peer_tile_notify -> consumer_tile_wait) and poll-style (producer_tile_notify ->
// peer_tile_wait) signalling in set and add mode. signal_latency.cu.
Table bench_signal_latency(const PrimitiveOptions& options);

// tile_push_data / tile_pull_data of one large buffer from rank 0 to rank 1 by k CTAs, ld/st and
// bulk (TMA) paths, against cudaMemcpyAsync D2D of the same bytes. sm_bandwidth.cu.
Table bench_sm_bandwidth(const PrimitiveOptions& options);

// Copy-engine bandwidth by chunk size: rank_copy_data of each chunk, then rank_notify, as in a
// chunked all-gather. ce_chunks.cu.
Table bench_ce_chunks(const PrimitiveOptions& options);

// ---- collectives (`tilelink bench all_gather|reduce_scatter`) --------------------------------------

struct TimingOptions {
  int warmup = 5;
  int iters = 20;
};

// What every benchmark's options hold besides its problem and configuration: the ranks (as
// make_bench_world places them), the timing, and the seed of the random inputs.
struct RunOptions {
  int world = 8;
  TimingOptions timing;
  uint64_t seed = 1;
};

struct AllGatherBenchOptions : RunOptions {
  AllGatherBenchOptions() { world = 2; }
  uint32_t rows_per_rank = 1024;
  uint32_t row_bytes = 16384;
  AllGatherConfig config;
};

struct ReduceScatterBenchOptions : RunOptions {
  ReduceScatterBenchOptions() { world = 2; }
  uint32_t rows_per_rank = 1024;
  uint32_t cols = 8192;  // fp32 columns
  ReduceScatterConfig config;
};

// Times AllGather::run / ReduceScatter::run across all ranks (slowest rank per call) and the
// same bytes moved by cudaMemcpyAsync D2D. collectives.cu.
Table bench_all_gather(const AllGatherBenchOptions& options);
Table bench_reduce_scatter(const ReduceScatterBenchOptions& options);

// ---- overlapped ops (`tilelink bench ag_gemm`) ------------------------------------------------------

struct AgGemmBenchOptions : RunOptions {
  uint32_t m = 8192;   // rows of A and C (all ranks)
  uint32_t n = 28672;  // columns of C over all ranks: each rank computes n / world
  uint32_t k = 8192;
  AgGemmConfig config;
};

// AgGemm::run against cuBLAS, the all-gather alone, their ideal overlap, the non-overlapped and
// decomposed baselines, and the fused kernel without waits. ag_gemm.cu.
Table bench_ag_gemm(const AgGemmBenchOptions& options);

struct GemmRsBenchOptions : RunOptions {
  uint32_t m = 8192;   // rows of the output over all ranks: each rank gets m / world
  uint32_t n = 8192;
  uint32_t k = 28672;  // inner dimension over all ranks: each rank holds k / world
  GemmRsConfig config;
};

// GemmRs::run against cuBLAS, the copy-engine reduce-scatter alone, their ideal overlap, the
// non-overlapped and decomposed baselines. gemm_rs.cu.
Table bench_gemm_rs(const GemmRsBenchOptions& options);

struct MlpBenchOptions : RunOptions {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 8192;         // LLaMA-3.1-70B
  uint32_t intermediate = 28672;  // over all ranks
  MlpConfig config;
};

// Mlp::run (AG+GEMM -> activation -> GEMM+RS) against the non-overlapped chain (copy-engine
// all-gather, cuBLAS fc1, activation, cuBLAS fc2, copy-engine reduce-scatter), its parts and the
// ideal max(T_fc1, T_ag) + T_act + max(T_fc2, T_rs). mlp.cu.
Table bench_mlp(const MlpBenchOptions& options);

struct MoeBenchOptions : RunOptions {
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 4096;         // Mixtral-8x7B
  uint32_t intermediate = 14336;  // each expert's, over all ranks
  uint32_t experts = 8;
  uint32_t topk = 2;
  SyntheticRouting routing = SyntheticRouting::kUniform;
  MoeAgGroupGemmConfig config;   // part 1 (and bench moe_ag)
  MoeGemmRsConfig part2;         // bench moe: part 2
  MlpActivation activation = MlpActivation::kSwiGlu;  // bench moe
  bool use_tune_cache = true;  // bench moe: MoeLayerConfig::use_tune_cache
};

// MoeAgGroupGemm::run (all-gather + gather + grouped GEMM) against the non-overlapped chain
// (copy-engine all-gather, row gather, a cuBLAS GEMM per expert), its parts, a dense cuBLAS GEMM
// of the same FLOPs and the ideal max(T_gemm, T_ag). moe.cu.
Table bench_moe_ag(const MoeBenchOptions& options);

// MoeLayer::run (part 1 -> activation -> part 2) against the non-overlapped chain (copy-engine
// all-gather, row gather, cuBLAS per expert, activation, cuBLAS per expert, top-k combine,
// copy-engine reduce-scatter), its parts and the ideal max(T_gemm1, T_ag) + T_act + max(T_gemm2,
// T_rs). moe_layer.cu.
Table bench_moe_layer(const MoeBenchOptions& options);

struct SpAttentionBenchOptions : RunOptions {
  uint32_t seq = 32768;  // tokens over all ranks
  uint32_t q_heads = 32, kv_heads = 8, head_dim = 128;
  bool causal = true;
  SpAttentionConfig config;
  std::string dump;  // a directory: write inputs and fused outputs for bench/sdpa_check.py
};
// SpAttention::run against the kernel alone, the all-gather alone, their ideal overlap, the
// non-overlapped and ring-attention baselines. sp_attention.cu.
Table bench_sp_attention(const SpAttentionBenchOptions& options);

}  // namespace tilelink::bench
