// TileLink benchmarks (library tilelink_bench, driven by the `tilelink` tool). Every benchmark
// runs on make_bench_world's ranks (virtual ranks of device 0, or one rank per GPU with
// TILELINK_RANKS=gpus: bench/world_choice.hpp), checks its result once against an independent
// reference (and throws Error if it differs), then times with CUDA events: median of repeated
// calls after warm-up, on fresh random data.
#pragma once

#include <cstdint>
#include <ostream>
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
#include "tilelink/tune/moe_tune.hpp"
#include "tilelink/tune/sp_attention_tune.hpp"

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

struct AllGatherBenchOptions {
  int world = 2;
  uint32_t rows_per_rank = 1024;
  uint32_t row_bytes = 16384;
  AllGatherConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
};

struct ReduceScatterBenchOptions {
  int world = 2;
  uint32_t rows_per_rank = 1024;
  uint32_t cols = 8192;  // fp32 columns
  ReduceScatterConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
};

// Times AllGather::run / ReduceScatter::run across all ranks (slowest rank per call) and the
// same bytes moved by cudaMemcpyAsync D2D. collectives.cu.
Table bench_all_gather(const AllGatherBenchOptions& options);
Table bench_reduce_scatter(const ReduceScatterBenchOptions& options);

// ---- overlapped ops (`tilelink bench ag_gemm`) ------------------------------------------------------

struct AgGemmBenchOptions {
  int world = 8;
  uint32_t m = 8192;   // rows of A and C (all ranks)
  uint32_t n = 28672;  // columns of C over all ranks: each rank computes n / world
  uint32_t k = 8192;
  AgGemmConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
};

// AgGemm::run against cuBLAS, the all-gather alone, their ideal overlap, the non-overlapped and
// decomposed baselines, and the fused kernel without waits. ag_gemm.cu.
Table bench_ag_gemm(const AgGemmBenchOptions& options);

struct GemmRsBenchOptions {
  int world = 8;
  uint32_t m = 8192;   // rows of the output over all ranks: each rank gets m / world
  uint32_t n = 8192;
  uint32_t k = 28672;  // inner dimension over all ranks: each rank holds k / world
  GemmRsConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
};

// GemmRs::run against cuBLAS, the copy-engine reduce-scatter alone, their ideal overlap, the
// non-overlapped and decomposed baselines. gemm_rs.cu.
Table bench_gemm_rs(const GemmRsBenchOptions& options);

struct MlpBenchOptions {
  int world = 8;
  uint32_t m = 8192;              // tokens over all ranks
  uint32_t hidden = 8192;         // LLaMA-3.1-70B
  uint32_t intermediate = 28672;  // over all ranks
  MlpConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
};

// Mlp::run (AG+GEMM -> activation -> GEMM+RS) against the non-overlapped chain (copy-engine
// all-gather, cuBLAS fc1, activation, cuBLAS fc2, copy-engine reduce-scatter), its parts and the
// ideal max(T_fc1, T_ag) + T_act + max(T_fc2, T_rs). mlp.cu.
Table bench_mlp(const MlpBenchOptions& options);

struct MoeBenchOptions {
  int world = 8;
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
  TimingOptions timing;
  uint64_t seed = 1;
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

struct SpAttentionBenchOptions {
  int world = 8;
  uint32_t seq = 32768;  // tokens over all ranks
  uint32_t q_heads = 32, kv_heads = 8, head_dim = 128;
  bool causal = true;
  SpAttentionConfig config;
  TimingOptions timing;
  uint64_t seed = 1;
  std::string dump;  // a directory: write inputs and fused outputs for bench/sdpa_check.py
};
// SpAttention::run against the kernel alone, the all-gather alone, their ideal overlap, the
// non-overlapped and ring-attention baselines. sp_attention.cu.
Table bench_sp_attention(const SpAttentionBenchOptions& options);
struct TuneOptions {
  int world = 8;
  uint32_t m = 8192, n = 28672, k = 8192;  // as AgGemmBenchOptions
  size_t top = 6;                          // communication variants timed (best predicted)
  TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;  // tune cache file to update ("" = none)
};

// `tilelink tune ag_gemm`: the two-stage search (tune/ag_gemm_tune.hpp), one progress line per
// configuration on `progress`; returns the tuned configuration against the automatic one. tune.cu.
Table tune_ag_gemm(const TuneOptions& options, std::ostream& progress);
struct GemmRsTuneOptions {
  int world = 8;
  uint32_t m = 8192, n = 8192, k = 28672;  // as GemmRsBenchOptions
  size_t top = 6;                          // communication variants timed (best predicted)
  TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;  // tune cache file to update ("" = none)
};
// `tilelink tune gemm_rs`: the two-stage search (tune/gemm_rs_tune.hpp), as tune_ag_gemm. tune.cu.
Table tune_gemm_rs(const GemmRsTuneOptions& options, std::ostream& progress);
struct MlpTuneOptions {
  int world = 8;
  uint32_t m = 8192, hidden = 8192, intermediate = 28672;  // as MlpBenchOptions
  MlpActivation activation = MlpActivation::kSwiGlu;
  size_t top = 6;
  TimingOptions timing{2, 5};
  uint64_t seed = 1;
  std::string cache;
};
// `tilelink tune mlp`: tune_ag_gemm on fc1's shape (M, 2I or I, H) and tune_gemm_rs on fc2's
// (M, H, I), both into the cache, where an all-automatic Mlp's AgGemm and GemmRs find them; one
// table with both ops' rows. tune.cu.
Table tune_mlp(const MlpTuneOptions& options, std::ostream& progress);

struct MoeTuneOptions {
  MoeBenchOptions op;  // the layer's shape, routing, activation and seed (its configs are not read)
  size_t top = 6;      // communication variants timed (best predicted)
  std::string cache;   // tune cache file to update ("" = none)
};
// `tilelink tune moe`: the three-stage search of tune/moe_tune.hpp over the MoE layer (kernels,
// then orders, then the communication the plan model ranks best), timed as bench times the fused
// layer; the winner against the automatic configuration, its output checked against the
// automatic one's, stored in the cache. tune.cu.
Table tune_moe(const MoeTuneOptions& options, std::ostream& progress);
// The search's view of a bench MoE problem on ranks of `sm_budget` SMs, with the routing
// MoeLayerSetup draws from the options' seed (pure: `tune moe --dry-run` needs no GPU). tune.cu.
MoeTuneShape moe_tune_shape(const MoeBenchOptions& options, int sm_budget);
struct SpAttentionTuneOptions {
  SpAttentionBenchOptions op;  // shape, mask, layout, seed (the other config knobs are not read)
  size_t top = 6;
  std::string cache;
};
// `tilelink tune sp_attention`: the two-stage search of tune/sp_attention_tune.hpp (L2 sections,
// then all-gather x local pass first ranked by the plan model), as tune_moe. tune.cu.
Table tune_sp_attention(const SpAttentionTuneOptions& options, std::ostream& progress);
// The search's view of a bench SP attention problem on ranks of `sm_budget` SMs. tune.cu.
SpAttentionTuneShape sp_attention_tune_shape(const SpAttentionBenchOptions& options, int sm_budget);

struct TraceOptions {
  int world = 8;
  uint32_t m = 8192, n = 28672, k = 8192;  // as AgGemmBenchOptions
  AgGemmConfig config;
  uint32_t capacity = 1u << 20;  // records per rank
  TimingOptions timing{3, 10};   // for the overhead: traced and untraced calls, interleaved
  uint64_t seed = 1;
};

// `tilelink trace ag_gemm`: one traced call's device timeline (every rank's records), the
// untraced and traced times of the op (the recording overhead), and the check that every GEMM
// tile's wait ended before its loads began. trace.cu.
struct TraceResult {
  std::vector<TraceRecord> records;  // every part's, in part order
  // An op of several parts (trace mlp: fc1, fc2): each part's name and how many of `records` are
  // its, in order; empty for an op of one part.
  std::vector<std::pair<std::string, size_t>> parts;
  uint64_t dropped = 0;
  Stats untraced, traced;
  uint64_t tiles = 0;       // what the op's check paired (ag_gemm: GEMM tiles with a wait and a load)
  uint64_t violations = 0;  // of those, the ones out of order (ag_gemm: loads that began before the wait ended)
  std::string checked;      // the check in words, completed by "<tiles - violations> of <tiles>"
  std::string config;       // the op's configuration, in words
};
TraceResult trace_ag_gemm(const TraceOptions& options);
struct SpAttentionTraceOptions {
  SpAttentionBenchOptions op;
  uint32_t capacity = 1u << 20;  // records per rank
};
// `tilelink trace sp_attention`: one traced fused call (per work item, each K/V chunk's wait and
// loads, and the store of O), the recording overhead, and the check that every chunk's loads
// began after its wait ended (TraceResult::tiles counts the chunk reads). trace.cu.
TraceResult trace_sp_attention(const SpAttentionTraceOptions& options);
struct GemmRsTraceOptions {
  GemmRsBenchOptions op;
  uint32_t capacity = 1u << 20;  // records per rank
};
// `tilelink trace gemm_rs`: one traced call (every GEMM tile's epilogue and notify; the
// reduction blocks' waits and per-tile reductions), the recording overhead, and the check that
// every owner's reduction of a tile began after each sender's notify of it had begun
// (TraceResult::tiles counts the (tile, sender) pairs; the times are compared only on one GPU,
// whose ranks share a clock). trace.cu.
TraceResult trace_gemm_rs(const GemmRsTraceOptions& options);
struct MlpTraceOptions {
  MlpBenchOptions op;
  uint32_t capacity = 1u << 20;  // records per rank and part
};
// `tilelink trace mlp`: one traced call, fc1 (AG+GEMM) and fc2 (GEMM+RS) in two parts, with
// both ops' checks (TraceResult::tiles and violations count both). trace.cu.
TraceResult trace_mlp(const MlpTraceOptions& options);
struct MoeTraceOptions {
  MoeBenchOptions op;
  uint32_t capacity = 1u << 20;  // records per rank and part
};
// `tilelink trace moe`: one traced MoeLayer call, part 1 (all-gather, gather, grouped GEMM) and
// part 2 (grouped GEMM, top-k combine + reduce-scatter) in two parts, with the check that every
// part-1 GEMM tile's loads began after its wait ended. trace.cu.
TraceResult trace_moe(const MoeTraceOptions& options);

}  // namespace tilelink::bench
