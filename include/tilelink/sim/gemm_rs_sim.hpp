// Discrete-event model of GEMM+RS (row-parallel): predicts the timeline of the fused op as
// tilelink::GemmRs runs it (ops/gemm_rs/gemm_rs_fused.hpp) -- its compute order (owners
// interleaved band by band, the rank's own rows last in each round), its scatter variant, signal
// groups and the reduction in the GEMM's finishing order -- under the cost model of
// sim/timeline.hpp.
//
// Ranks run the same schedule rotated by their rank, so rank 0's schedule gives every arrival:
// what owner 0 receives from rank q is what rank 0 sends owner (P - q) mod P, at the same time.
// Compute CTAs (SMs minus the reduction CTAs) take tiles round-robin at the MMA time of a tile.
// A finished tile reaches its owner: pull -- at once (the owner reads it remotely); push -- after
// its store at one CTA's copy bandwidth, capped by the link, which the CTA waits for (the
// epilogue notifies only landed stores); copy engine -- when the rank's
// scatter stream, in order, has copied its whole group (a fixed cost plus bytes over the
// link). The owner's reduction CTAs take the block's tiles in finishing order, each once every
// sender's group holding it is complete, and read world tiles and write one at one CTA's copy
// bandwidth. Every byte rank 0 pulls from or pushes to a node peer also crosses its one NVLink
// port, in the order the model issues them (so 132 CTAs summing at once cannot read faster than
// the link). With one rank the op is the GEMM alone (the reduce-scatter is the identity).
#pragma once

#include <cstdint>

#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"
#include "tilelink/sim/timeline.hpp"

namespace tilelink::sim {

struct GemmRsProblem {
  uint32_t m = 8192;   // rows of C (rank r owns rows [r * ceil(m / world), ...), any m)
  uint32_t n = 8192;   // columns of C
  uint32_t k = 28672;  // inner dimension across all ranks (each rank has k / world)
  uint32_t element_bytes = 2;  // inputs (bf16)
  uint32_t partial_bytes = 2;  // partial tiles as pushed (bf16; the reduction accumulates in fp32)
  int world = 8;
  int nodes = 1;
  DType dtype = DType::kBf16;  // e4m3: the GEMM at CostModel::fp8_flops (the partials stay bf16)
};

// What the model runs besides the problem: the GEMM's tile, its compute order's band, and the
// op's configuration, of which the model follows the scatter, the signal granularity and
// reduce_blocks: the reduction CTAs as they run, taken as given, or 0 (the default): the op's
// automatic count for one rank per GPU (gemm_rs_policy::reduce_blocks) at the cost model's rates.
// The GEMM's SMs and swizzle do not change the prediction.
struct GemmRsPlanConfig {
  uint32_t bm = 128;
  uint32_t bn = 256;
  uint32_t band = 0;  // tile rows per band; 0 = the op's rule: up to 16, at least 4 bands per block
  // The GEMM's rate with this tile against the cost model's dense rate (CostModel::flops, cuBLAS's):
  // 1 = the same. A measured ratio (bench gemm_rs --world 1 --kernel ..., fused over cuBLAS) makes a
  // tile other than the default's comparable; each tile's MMA in the fused op takes 1 / tile_rate
  // as long. The baselines (non-overlapped, decomposed: cuBLAS chains) and the ideal stay at 1.
  double tile_rate = 1.0;
  // op.reduce_blocks 0 = automatic: the op's rule for one rank per GPU
  // (gemm_rs_policy::reduce_blocks) at the cost model's rates; op.scatter and op.reducer auto =
  // the op's rule for one rank per GPU on NVSHMEM's heap (gemm_rs_policy::path). With the epilogue reducer an own tile's sum runs on the GEMM CTA
  // that computed it, once the senders' parts are in, at one CTA's copy rate (the reduction
  // kernel's measured rate, assumed for the epilogue's 256 threads until measured).
  // op.push_notify (with the push): deferred, the CTA goes on to its next tile while the store
  // drains and the part is announced at the CTA's next epilogue (taken as one tile's MMA later);
  // immediate, the CTA waits for its store to land, then notifies.
  GemmRsConfig op;
  // What-if, NOT BUILT (docs/DESIGN-NOTES.md, "GEMM+RS where communication is as long as the GEMM"):
  // with the epilogue reducer, each own tile's sum as a unit of its own, `deferred_sum_waves` waves of
  // the GEMM's CTAs after the tile (the own partial kept like a peer's), and the sums left after the
  // last tile cut into slices over every CTA. 0: the op as built (the sum right after the tile).
  uint32_t deferred_sum_waves = 0;
};

struct GemmRsPrediction {
  double fused = 0;
  double non_overlapped = 0;  // GEMM on every SM, then reduce-scatter, then the reduction
  double decomposed = 0;      // per-owner GEMMs, each block's send overlapping the next GEMM
  double ideal = 0;           // max(T_comp, T_comm)
  double t_comp = 0;
  double t_comm = 0;
  double flop = 0;            // per rank
  uint32_t reduce_ctas = 0;   // the reduction CTAs per rank the prediction ran
  GemmRsReducer reducer = GemmRsReducer::kBlocks;  // who summed (the configuration's, or the op's rule)
  GemmRsScatter scatter = GemmRsScatter::kPull;    // how the parts reached the owner (likewise)
  std::vector<Interval> timeline;  // rank 0: compute CTAs, then reduction CTAs
};

GemmRsPrediction predict_gemm_rs(const GemmRsProblem& problem, const GemmRsPlanConfig& config,
                                 const CostModel& cost = {});

}  // namespace tilelink::sim
