// GEMM+AR's estimate and automatic choices (ops/gemm_ar/gemm_ar_policy.hpp).
#include "tilelink/ops/gemm_ar/gemm_ar_policy.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/gemm_ar/sm90_gemm_ar_kernel.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar_protocol.hpp"

namespace tilelink {

const char* to_string(GemmArPath p) {
  switch (p) {
    case GemmArPath::kSm: return "sm";
    case GemmArPath::kCopyEngine: return "copy_engine";
    case GemmArPath::kAuto: break;
  }
  return "auto";
}

const char* to_string(GemmArSchedule s) {
  switch (s) {
    case GemmArSchedule::kFused: return "fused";
    case GemmArSchedule::kNonOverlapped: return "non_overlapped";
    case GemmArSchedule::kAuto: break;
  }
  return "auto";
}

const char* to_string(GemmArSliceSum s) {
  switch (s) {
    case GemmArSliceSum::kReduction: return "reduction";
    case GemmArSliceSum::kGemm: return "gemm";
    case GemmArSliceSum::kAuto: break;
  }
  return "auto";
}

namespace gemm_ar_policy {
namespace {

uint32_t tiles_of(const GemmArShape& s) {
  const Tile t = gemm_tile(s.m);
  return ((s.m + t.m - 1) / t.m) * ((s.n + t.n - 1) / t.n);
}

// The reduce-scatter's share of the output a rank sums (its block of ceil(M / world) rows), and
// the tiles the busiest rank sums: those of the tile rows its block meets (GemmArPlan::owned).
double block_share(const GemmArShape& s) {
  return s.scatter ? double((s.m + s.world - 1) / s.world) / s.m : 1.0;
}
uint32_t block_tiles(const GemmArShape& s) {
  if (!s.scatter) return tiles_of(s);
  const Tile t = gemm_tile(s.m);
  GemmArPlan plan;
  plan.world = static_cast<uint32_t>(s.world);
  plan.m = s.m;
  plan.n = s.n;
  plan.bm = t.m;
  plan.bn = t.n;
  plan.scatter = true;
  uint32_t most = 0;
  for (uint32_t r = 0; r < plan.world; ++r) most = std::max(most, plan.num_reduced(r));
  return most;
}

// The GEMM's waves' end times (seconds from its start); `summed`: the slices summed in the GEMM
// (one bf16 partial; each tile's earlier slices' fp32 slots written and read back).
std::vector<double> wave_ends(const GemmArShape& s, uint32_t splits, int ctas, const GemmArRates& r, bool summed) {
  const Tile t = gemm_tile(s.m);
  const uint64_t units = uint64_t(tiles_of(s)) * splits;
  const uint64_t c = uint64_t(std::max(ctas, 1));
  const double k_slice = double(s.k) / splits;
  const double unit_mma = 2.0 * t.m * t.n * k_slice / (kTileMmaShare * r.flops / r.sms);
  const double tile_elems = double(tiles_of(s)) * t.m * t.n;
  const double bytes = (double(s.n) + s.m) * s.k * 2.0 +
                       (summed ? double(s.m) * s.n * 2.0 + tile_elems * 4.0 * 2.0 * (splits - 1)
                               : double(s.m) * s.n * 2.0 * splits);
  std::vector<double> ends;
  double at = 0;
  for (uint64_t done = 0; done < units; done += c) {
    const double in_wave = double(std::min(c, units - done));
    at += std::max(unit_mma, bytes * in_wave / double(units) / r.hbm_bandwidth);
    ends.push_back(at);
  }
  return ends;
}

// Seconds to bring `bytes` into the rank from its peers with `ctas` CTAs.
double pull(double bytes, uint32_t ctas, const GemmArRates& r) {
  if (bytes <= 0) return 0;
  const double rate = ctas * r.cta_bandwidth;
  const double local = bytes * (1 - r.remote_fraction) / std::min(rate, r.link_bandwidth);
  const double remote = bytes * r.remote_fraction / std::min(rate, r.network_bandwidth);
  return std::max(local, remote);
}

struct ArParts {
  double reduce = 0, gather = 0;
};

// The copy-engine path's stream: `puts` puts of `bytes` in all to the peers, one after another,
// each peer's share over its link (the node's or the network).
double stream_puts(double puts, double bytes, const GemmArRates& r) {
  const double node = std::min(r.ce_bandwidth, r.link_bandwidth), far = std::min(r.ce_bandwidth, r.network_bandwidth);
  return puts * r.ce_put_overhead + bytes * ((1 - r.remote_fraction) / node + r.remote_fraction / far);
}
// The kernels' reads and writes of local memory at `ctas` CTAs' rate.
double local(double bytes, uint32_t ctas, const GemmArRates& r) { return bytes / (ctas * r.cta_bandwidth); }

// The all-reduce of `fraction` of the output's tiles: the CTAs busy are at most its units of work
// (tiles reduced, or fetched, times parts).
ArParts all_reduce(const GemmArShape& s, ArMethod method, uint32_t splits, uint32_t ctas, uint32_t parts,
                   double fraction, const GemmArRates& r) {
  // The rank's rows: all of them, or its block's (the reduce-scatter, summed as one-shot sums).
  const double bytes = double(s.m) * s.n * 2.0 * fraction * block_share(s);
  const double w = s.world;
  const double tiles = std::max(1.0, block_tiles(s) * fraction);
  if (s.scatter) method = ArMethod::kOneShot;
  auto busy = [&](double units) { return static_cast<uint32_t>(std::max(1.0, std::min<double>(ctas, units * parts))); };
  ArParts p;
  if (s.world == 1) {  // the slices' local sum, read and written at the CTAs' rate
    if (splits > 1 || s.norm) p.reduce = bytes * (splits + 1) / (busy(tiles) * r.cta_bandwidth);
    return p;
  }
  if (r.copy_engine) {
    // Per tile row: one put of its slices to each peer (one-shot) or to the row's owner (two-shot),
    // the owners' sums back to every peer, the kernels' reads local (`recv`, `reduced`).
    const uint32_t tile_m = gemm_tile(s.m).m;
    const double rows = std::max(1.0, std::ceil(double((s.m + tile_m - 1) / tile_m) * fraction));
    if (method == ArMethod::kOneShot) {
      // Tile rows put to each peer: every one, or with the reduce-scatter those of its block.
      const double n_tiles = double((s.n + gemm_tile(s.m).n - 1) / gemm_tile(s.m).n);
      const double per_peer = s.scatter ? std::max(1.0, tiles / n_tiles) : rows;
      p.reduce = stream_puts(per_peer * (w - 1), bytes * splits * (w - 1), r) + r.notify_latency +
                 local(bytes * (splits * w + 1), busy(tiles), r);
    } else {
      // The busiest rank: it owns ceil(rows / w) tile rows (fewer tile rows than ranks leave some
      // ranks none), puts the rest to their owners, then its sums to every peer.
      const double owned = std::ceil(rows / w), pushed = rows - std::floor(rows / w);
      p.reduce = stream_puts(pushed, bytes * splits * pushed / rows, r) + r.notify_latency +
                 local(bytes * (splits * w + 1) * owned / rows, busy(tiles * owned / rows), r);
      p.gather = stream_puts(owned * (w - 1), bytes * (w - 1) * owned / rows, r) + r.notify_latency +
                 local(bytes * 2, busy(tiles), r);
    }
    return p;
  }
  // Each rank reads its own slices locally and the peers' over the link.
  if (method == ArMethod::kOneShot) {
    p.reduce = r.notify_latency + pull(bytes * splits * (w - 1), busy(tiles), r);
  } else {
    p.reduce = r.notify_latency + pull(bytes * splits * (w - 1) / w, busy(tiles / w), r);
    p.gather = r.notify_latency + pull(bytes * (w - 1) / w, busy(tiles * (w - 1) / w), r);
  }
  return p;
}

}  // namespace

Tile gemm_tile(uint32_t m) {
  const auto& kernel = detail::sm90_gemm_ar_config(m);
  return {kernel.tile_m, kernel.tile_n};
}

double gemm_time(const GemmArShape& s, uint32_t splits, int ctas, const GemmArRates& r, bool summed) {
  return wave_ends(s, splits, ctas, r, summed && splits > 1).back();
}

double all_reduce_time(const GemmArShape& s, ArMethod method, uint32_t splits, uint32_t ctas, uint32_t parts,
                       const GemmArRates& r) {
  const ArParts p = all_reduce(s, method, splits, ctas, parts, 1.0, r);
  return p.reduce + p.gather;
}

uint32_t blocks_alone(uint32_t reduced_tiles, uint32_t tile_n, int budget) {
  return std::clamp(std::max(reduced_tiles, 1u) * std::max(tile_n / 16, 1u), 1u,
                    static_cast<uint32_t>(std::max(budget, 1)));
}

uint32_t parts_for(uint32_t ctas, uint32_t tiles, uint32_t tile_n) {
  const uint32_t most = std::max(1u, tile_n / 16);
  uint32_t parts = 1;
  while (parts * 2 <= most && uint64_t(parts) * 2 * tiles <= ctas) parts *= 2;
  return parts;
}

double estimate(const GemmArShape& s, const GemmArChoice& c, const GemmArRates& r) {
  const bool reduction = reduces(s, c.partials());
  if (c.schedule == GemmArSchedule::kNonOverlapped) {
    const double launch = r.copy_engine ? kReduceKernelTime : kEarlyReduceKernelTime;  // GemmAr::run
    return gemm_time(s, c.splits, c.gemm_sms, r, c.slices_in_gemm) +
           (reduction ? launch + all_reduce_time(s, c.method, c.partials(), c.reduce_blocks, c.parts, r) : 0.0);
  }
  const std::vector<double> ends = wave_ends(s, c.splits, c.gemm_sms, r, c.slices_in_gemm);
  if (!reduction) return ends.back();
  double reduced = 0, gathered = 0;
  for (double end : ends) {
    const ArParts p = all_reduce(s, c.method, c.partials(), c.reduce_blocks, c.parts, 1.0 / ends.size(), r);
    reduced = std::max(reduced, end) + p.reduce;
    gathered = std::max(gathered, reduced) + p.gather;
  }
  return kReduceKernelTime + std::max({ends.back(), reduced, gathered});
}

}  // namespace gemm_ar_policy

namespace {

// K slices at most, and at least this many columns each (shorter slices spend more on the
// pipeline's fill than they gain in CTAs).
constexpr uint32_t kMaxSplits = 16;
constexpr uint32_t kMinSliceK = 512;

// The configuration for one schedule and method: the knobs as configured, the others by rule --
//  - K slices: the most (tile, slice) units that fit in one wave of the GEMM's room (a CTA left
//    for the reduction next to a fused GEMM);
//  - reduction CTAs: one per tile it reduces; fused, at most 1/8 of the budget and no more than
//    the GEMM's single wave leaves; non-overlapped, at most the budget;
//  - GEMM CTAs: the budget less the reduction's when both run at once.
GemmArChoice complete(const GemmArShape& s, const GemmArConfig& c, GemmArSchedule schedule, ArMethod method,
                      bool one_slice) {
  GemmArChoice ch;
  ch.schedule = schedule;
  ch.method = method;
  const int budget = s.sm_budget;
  const uint32_t tiles = gemm_ar_policy::tiles_of(s);
  const uint32_t w = static_cast<uint32_t>(s.world);
  const bool fused = schedule == GemmArSchedule::kFused;
  const uint32_t room = static_cast<uint32_t>(std::max(1, fused ? budget - 1 : budget));
  if (c.splits != 0 || one_slice) {
    ch.splits = one_slice ? 1 : c.splits;
  } else {
    uint32_t n = std::min(kMaxSplits, std::max(1u, room / std::max(tiles, 1u)));
    while (n > 1 && (s.k % (8 * n) != 0 || s.k / n < kMinSliceK)) --n;
    ch.splits = n;
  }
  ch.slices_in_gemm = c.slice_sum != GemmArSliceSum::kReduction && ch.splits > 1;
  const bool reduction = gemm_ar_policy::reduces(s, ch.partials());
  const uint32_t reduced = s.scatter                     ? gemm_ar_policy::block_tiles(s)
                           : method == ArMethod::kOneShot ? tiles
                                                          : (tiles + w - 1) / w;
  const uint64_t units = uint64_t(tiles) * ch.splits;
  if (c.reduce_blocks != 0) {
    ch.reduce_blocks = c.reduce_blocks;
  } else if (!fused) {
    ch.reduce_blocks = gemm_ar_policy::blocks_alone(reduced, gemm_ar_policy::gemm_tile(s.m).n, budget);
  } else {
    ch.reduce_blocks = std::clamp(reduced, 1u, static_cast<uint32_t>(std::max(1, budget / 8)));
    if (units < uint64_t(budget)) {
      ch.reduce_blocks = std::min(ch.reduce_blocks, static_cast<uint32_t>(uint64_t(budget) - units));
    }
  }
  if (!reduction) ch.reduce_blocks = 0;  // one rank, one partial, no norm: the GEMM writes the output
  const int left = fused && reduction ? budget - static_cast<int>(ch.reduce_blocks) : budget;
  ch.gemm_sms = c.gemm_sms != 0 ? std::min(left, static_cast<int>(c.gemm_sms)) : left;
  ch.parts = gemm_ar_policy::parts_for(std::max(ch.reduce_blocks, 1u), std::max(reduced, 1u),
                                       gemm_ar_policy::gemm_tile(s.m).n);
  return ch;
}

}  // namespace

GemmArChoice gemm_ar_choice(const GemmArShape& s, const GemmArConfig& c, const GemmArRates& rates) {
  std::vector<GemmArSchedule> schedules;
  if (c.schedule == GemmArSchedule::kAuto) {
    // The fused schedule measured slower than the non-overlapped one at every shape timed so far
    // (H200, virtual ranks and world 1, M 1 to 512: docs/PERF.md, sixth session), against its
    // estimate; until the trace says why, auto takes the non-overlapped schedule.
    schedules = {GemmArSchedule::kNonOverlapped};
  } else {
    schedules = {c.schedule};
  }
  std::vector<ArMethod> methods;
  if (c.method == AllReduceMethod::kOneShot || s.scatter) {  // the reduce-scatter's protocol is one-shot's
    methods = {ArMethod::kOneShot};
  } else if (c.method == AllReduceMethod::kTwoShot) {
    methods = {ArMethod::kTwoShot};
  } else {
    methods = {ArMethod::kOneShot, ArMethod::kTwoShot};
  }
  // Automatic slices: the rule's count, and one slice (a plain GEMM: fewer partial bytes to reduce).
  std::vector<bool> one_slice = {false};
  if (c.splits == 0) one_slice.push_back(true);
  GemmArChoice best;
  bool have = false;
  size_t candidates = 0;
  for (GemmArSchedule schedule : schedules) {
    for (ArMethod method : methods) {
      for (bool one : one_slice) {
        GemmArChoice ch = complete(s, c, schedule, method, one);
        if (ch.gemm_sms < 1) continue;
        ch.estimate = gemm_ar_policy::estimate(s, ch, rates);
        ++candidates;
        if (!have || ch.estimate < best.estimate) best = ch;  // ties: the first (fused, one-shot, the rule)
        have = true;
      }
    }
  }
  if (!have) best = complete(s, c, schedules.front(), methods.front(), false);  // can_implement names the problem
  const bool chosen = candidates > 1;
  best.why = to_string(best.schedule) + std::string(", ") + (s.scatter ? "reduce-scatter" : to_string(best.method)) + ", " +
             std::to_string(best.splits) + " K slice(s)" + (best.slices_in_gemm ? " summed in the GEMM" : "") + " x " +
             std::to_string(gemm_ar_policy::tiles_of(s)) +
             " tiles on " + std::to_string(best.gemm_sms) + " GEMM CTAs, " + std::to_string(best.reduce_blocks) +
             " reduction CTAs; estimate " + std::to_string(best.estimate * 1e6).substr(0, 6) + " us" +
             (chosen ? " (the fastest estimate of " + std::to_string(candidates) +
                           " schedule x method x slices candidates)"
                     : "");
  return best;
}

}  // namespace tilelink
