// GEMM+AR's automatic choices and the estimate they are made by (GemmAr applies them; `tilelink
// plan gemm_ar` prints the same estimates with its cost model's rates).
//
// The estimate, per call of one rank:
//  - the GEMM: (tile, K slice) units in waves over its CTAs; a wave takes the longer of one unit's
//    MMA time (a whole tile, whatever M, at kTileMmaShare of the per-SM rate: at small M the MMA,
//    not the weight's bytes, bounds a CTA)
//    and its share of the bytes over HBM (the weight once, A once, the partials written once);
//  - the all-reduce of each wave's tiles once the wave is done, on no more CTAs than its units of
//    work (tile parts): one-shot reads every peer's slices
//    ((world - 1) x splits x the wave's share of M x N bf16), two-shot a 1/world share of them and
//    then the owners' sums ((world - 1) / world); each at the lesser of the link and the reduction
//    CTAs' copy rate, after one notify latency per exchange; at world 1 only the slices' sum; the
//    reduce-scatter (`scatter`) is one-shot over the rank's block of rows alone (its tile rows'
//    tiles as units of work);
//  - fused: each wave's reduction under the next wave; non-overlapped: GEMM on the whole budget,
//    then the all-reduce on the whole budget.
// The rates are an H200's (core/h200_rates.hpp) and, for peers, NVLink's: a prediction, checked
// against the measurements in docs/PERF.md.
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/all_reduce.hpp"
#include "tilelink/core/h200_rates.hpp"

namespace tilelink {

enum class GemmArSchedule : uint32_t {
  kFused = 0,          // reduction CTAs next to the GEMM, per tile as it finishes
  kNonOverlapped = 1,  // the GEMM (every SM of the budget), then the all-reduce on the same stream
  kAuto = 2,           // non-overlapped, the estimate's fastest method and slices (the fused schedule
                       // measured slower everywhere so far: docs/PERF.md, sixth session)
};
const char* to_string(GemmArSchedule s);

// How the all-reduce reaches the peers (gemm_ar_protocol.hpp).
enum class GemmArPath : uint32_t {
  kAuto = 0,        // sm, or copy_engine where the world's transport is put_signal
  kSm = 1,          // the reduction CTAs load the peers' partials (and two-shot sums) themselves
  kCopyEngine = 2,  // the ranks' streams put the partials (and sums) into the peers' staging; the
                    // kernels read only their own memory: the path under put_signal
};
const char* to_string(GemmArPath p);

// Where a rank's K slices are summed (more than one slice only).
enum class GemmArSliceSum : uint32_t {
  kAuto = 0,       // gemm (measured on an H100 at world 1, M 1-128: the op is then within -1.3 to +0.8
                   // us of its own GEMM, where the reduction's pass added 4.9-8.5 us; docs/PERF.md,
                   // twenty-sixth session)
  kReduction = 1,  // each slice a bf16 partial of its own; the reduction sums them with the ranks'
  kGemm = 2,       // the GEMM: each tile's last slice adds the earlier slices' fp32 accumulators, in
                   // slice order, and writes one partial per rank (one rounding; at world 1 with no
                   // norm, `out` itself: no reduction runs)
};
const char* to_string(GemmArSliceSum s);

struct GemmArRates {
  double flops = h200::kBf16GemmFlops;  // of the whole GPU
  int sms = h200::kSms;
  double hbm_bandwidth = h200::kHbmBandwidth;
  double link_bandwidth = h200::kNvlinkBandwidth;  // into one rank from its peers
  double network_bandwidth = 50e9;                 // into one rank from other nodes
  double remote_fraction = 0;                      // of the peers, those on other nodes
  double cta_bandwidth = h200::kCtaCopyBandwidth;
  double notify_latency = h200::kNotifyLatency;
  // The copy-engine path (GemmArPath::kCopyEngine): the rank's stream puts each tile row's slices
  // to the peers one put after another, each at this fixed cost and the copy engine's rate (at most
  // the link's); the reduction kernels then read only local memory.
  bool copy_engine = false;
  double ce_bandwidth = h200::kCeBandwidth;
  double ce_put_overhead = h200::kCeChunkOverhead;
};

// One rank's problem: the world, its SM budget, the output M x N, its K, the norm epilogue, and
// whether the sums are a reduce-scatter (each rank its block of ceil(M / world) rows: GemmRs's
// small-M engine) rather than an all-reduce.
struct GemmArShape {
  int world = 1;
  int sm_budget = h200::kSms;
  uint32_t m = 0, n = 0, k = 0;
  bool norm = false;
  bool scatter = false;
};

// A configuration in full: what the op runs.
struct GemmArChoice {
  GemmArSchedule schedule = GemmArSchedule::kFused;
  ArMethod method = ArMethod::kOneShot;
  uint32_t splits = 1;          // the GEMM's K slices
  bool slices_in_gemm = false;  // summed in the GEMM (GemmArSliceSum::kGemm, splits > 1)
  uint32_t reduce_blocks = 0;
  uint32_t parts = 1;  // column parts per tile: the reduction's unit of work
  int gemm_sms = 0;
  double estimate = 0;  // seconds per call, the estimate's
  std::string why;

  // The partials per rank the reduction reads.
  uint32_t partials() const { return slices_in_gemm ? 1 : splits; }
};

// The op's knobs (0 / auto = the estimate's choice).
struct GemmArConfig;

namespace gemm_ar_policy {

struct Tile {
  uint32_t m = 0, n = 0;
};
// The output tile of the GEMM the op runs at `m` rows: 64 x 128 (ping-pong) up to 64 rows, else
// 128 x 128 (cooperative).
Tile gemm_tile(uint32_t m);
// The share of the cost model's per-SM GEMM throughput these tiles' MMAs reach at small M
// (measured on the H200: a 128 x 128 tile at M <= 128 ran at 2.7 TFLOP/s per SM, 0.45 of
// 790 / 132; docs/PERF.md, sixth session).
inline constexpr double kTileMmaShare = 0.45;
// What the reduction kernel adds beyond its copies: its launch after the GEMM, its blocks' waits
// and the exit barrier (measured on the H200 at world 1: the all-reduce of 32 KiB after the GEMM
// added 7.4 us).
inline constexpr double kReduceKernelTime = 7e-6;
// The same on the non-overlapped schedule's load/store path, where the reduction is launched early
// behind the GEMM on its stream (LaunchOrder::kEarly): its launch overlaps the GEMM's last wave.
// Measured on an H100 at world 1 (docs/PERF.md, eighteenth session): the op over its own GEMM 3.7
// and 2.2 us at M = 1 and 8 (5.6 and 5.7 us launched after it).
inline constexpr double kEarlyReduceKernelTime = 3e-6;

// Whether a reduction kernel runs at all: peers to sum, the norm, or partials of K slices (else the
// GEMM writes the output itself).
inline bool reduces(const GemmArShape& s, uint32_t partials) { return s.world > 1 || s.norm || partials > 1; }
// Reduction CTAs when the all-reduce runs alone after the GEMM: one per unit of work (a tile part
// of at least 16 of the tile's `tile_n` columns) of the `reduced_tiles` it sums, at most `budget`.
// At decode's sizes a unit is a few dependent loads' latency, not bandwidth (measured on the H200:
// one CTA per 32 KiB took 62 us for what 132 CTAs did in 8).
uint32_t blocks_alone(uint32_t reduced_tiles, uint32_t tile_n, int budget);

// Seconds per call of `c` on `s` at `rates`.
double estimate(const GemmArShape& s, const GemmArChoice& c, const GemmArRates& rates = {});
// The GEMM alone on `ctas` CTAs with `splits` slices (the chain's first half with splits 1),
// `summed` in the GEMM (each tile's earlier slices' fp32 accumulators written and read back once).
double gemm_time(const GemmArShape& s, uint32_t splits, int ctas, const GemmArRates& rates = {}, bool summed = false);
// The all-reduce alone of complete partials (`splits` per rank) with `ctas` CTAs, each tile in
// `parts` units of work (no more CTAs than units are busy).
double all_reduce_time(const GemmArShape& s, ArMethod method, uint32_t splits, uint32_t ctas, uint32_t parts,
                       const GemmArRates& rates = {});
// Column parts per tile for `ctas` reduction CTAs over `tiles` tiles of `tile_n` columns: a power
// of two, at most tile_n / 16 (16 columns a part at least).
uint32_t parts_for(uint32_t ctas, uint32_t tiles, uint32_t tile_n);

}  // namespace gemm_ar_policy
}  // namespace tilelink
