// The protocol fuzzer on the CPU executor: the GPU fuzzer's generator (tests/fuzz/fuzz_space.hpp,
// in its CPU-sized space) drives every protocol through the CPU suite's runners
// (protocol_runners.hpp: random delays before every primitive, bounded waits, fresh inputs and
// poisoned outputs every call, independent references).
//
// Each draw is reduced to what its protocol takes: the world, the shape, the communication tile
// (automatic ones resolved by the ops' own policies), the method, order and resource, the blocks
// per role, GEMM+RS's band (its swizzle). Knobs only a GPU kernel has (threads, data path, kernel
// names, GEMM SMs, offsets) drop out; GEMM tiles are the CPU space's tile_m or drawn; data widths
// become float widths of the same row bytes (bf16 elements / 2), so that 16-byte rows stay 16-byte
// rows. What the protocol
// cannot represent (no rows, no communication tile, a copy-engine ring, owner blocks that are not
// whole tile rows, a plan check that fails...) is a refusal, counted by its reason; the rest must
// match the reference and never deadlock. Roles' details no draw names (the consumer's tile, the
// query block, a row pitch pad) come from the same seed, after the draw.
//
// Budget: TILELINK_FUZZ_SEED (default kDefaultSeed) and TILELINK_FUZZ_DRAWS (default
// kDefaultDraws, per protocol) -- chosen so that all of *Fuzz* takes under a minute on two cores.
// A failure prints its draw, the draw's seed and the command that replays it alone
// (TILELINK_FUZZ_DRAW_SEED=...).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../fuzz/fuzz_space.hpp"
#include "protocol_runners.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"

namespace tilelink::test {
namespace {

using fuzz::Op;
using fuzz::Rng;
using fuzz::Space;

constexpr uint64_t kDefaultSeed = 0x7115E7;
constexpr uint64_t kDefaultDraws = 40;
constexpr int kCallsPerDraw = 2;  // consecutive calls, fresh inputs each

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const uint64_t x = std::strtoull(v, &end, 0);
  if (end == nullptr || *end != '\0') {
    throw InvalidArgument(std::string("environment variable ") + name + " = '" + v +
                          "': expected an unsigned integer (decimal or 0x hex)");
  }
  return x;
}

std::string hex(uint64_t x) {
  std::ostringstream os;
  os << "0x" << std::hex << x;
  return os.str();
}

// What a protocol takes of a draw: a case, or why the protocol cannot run it.
template <class Case>
struct Reduced {
  Case c{};
  std::string refusal;
};

template <class Case>
Reduced<Case> refuse(std::string why) {
  Reduced<Case> r;
  r.refusal = std::move(why);
  return r;
}

// Blocks of one role per rank on the CPU (a thread each) for an SM-count knob: the op's
// automatic count when 0, else the knob, at most `most` (past a few they add only threads).
uint32_t cpu_blocks(uint32_t knob, uint32_t automatic, uint32_t most) {
  return knob == 0 ? automatic : std::min(knob, most);
}

// The SM budget per rank of the CPU space (the ops resolve automatic knobs against it).
int cpu_budget(int world) { return static_cast<int>(Space::cpu().sms) / world; }

// The all-gather of a draw as the ops resolve it, refused where its stream or plan cannot run it:
// all_gather_stream is a full-mesh pull or push (the copy engine has no ring), and rows move as
// 16-byte vectors.
std::string all_gather_refusal(const AllGatherConfig& c, uint32_t rows_per_rank, uint32_t row_bytes) {
  if (rows_per_rank == 0) return "rows_per_rank = 0: the row-shard mapping needs a row per rank";
  if (c.comm_rows == 0) return "comm_rows = 0: a communication tile needs a row";
  if (row_bytes == 0 || row_bytes % kTileAlignment != 0) {
    return "row_bytes = " + std::to_string(row_bytes) + ": the data primitives move 16-byte vectors";
  }
  if (c.resource == CommResource::kCopyEngine && c.order == CommOrder::kRing) {
    return "copy engine with order = ring: all_gather_stream is a full mesh";
  }
  return "";
}

// A float width of the same bytes as `bf16` elements (at least 1).
uint32_t float_width(uint32_t bf16) { return std::max(1u, bf16 / 2); }

Reduced<AgCase> reduce(const fuzz::AllGatherDraw& d, Rng& extra) {
  if (std::string e = all_gather_refusal(d.args.config, d.args.rows_per_rank, d.args.row_bytes); !e.empty()) return refuse<AgCase>(e);
  AgCase c;
  c.world = d.world;
  c.rows_per_rank = d.args.rows_per_rank;
  c.comm_rows = d.args.config.comm_rows;
  c.row_bytes = d.args.row_bytes;
  c.method = d.args.config.method;
  c.order = d.args.config.order;
  c.copy_engine = d.args.config.resource == CommResource::kCopyEngine;
  const AllGatherPlan plan = c.plan();
  c.comm_blocks = cpu_blocks(d.args.config.num_blocks, std::clamp(plan.num_items(), 1u, 4u), 6);
  c.consumer_blocks = extra.range32(1, 3);
  c.bm = extra.range32(1, 2 * d.args.rows_per_rank + 1);  // one row to more than a shard
  c.own_rows = extra.range32(0, 1) == 1;                   // the shards in place, or copied in by the call
  return {c, ""};
}

Reduced<RsCase> reduce(const fuzz::ReduceScatterDraw& d, Rng&) {
  if (d.args.rows_per_rank == 0) return refuse<RsCase>("rows_per_rank = 0: the row-shard mapping needs a row per rank");
  if (d.args.config.comm_rows == 0) return refuse<RsCase>("comm_rows = 0: a communication tile needs a row");
  if (d.args.cols == 0 || d.args.cols % 4 != 0) {
    return refuse<RsCase>("cols = " + std::to_string(d.args.cols) + ": rows are reduced as 16-byte vectors");
  }
  RsCase c;
  c.world = d.world;
  c.rows_per_rank = d.args.rows_per_rank;
  c.comm_rows = d.args.config.comm_rows;
  c.cols = d.args.cols;
  c.method = d.args.config.method;
  c.blocks = cpu_blocks(d.args.config.num_blocks, std::clamp(d.args.rows_per_rank, 1u, 4u), 6);
  // ReduceScatter's slicing: about two reduction items per block, at most a chunk each.
  const uint32_t per_item = (d.args.rows_per_rank + 2 * c.blocks - 1) / (2 * c.blocks);
  c.reduce_rows = std::clamp(per_item, 1u, d.args.config.comm_rows);
  return {c, ""};
}

Reduced<AgGemmCase> reduce(const fuzz::AgGemmDraw& d, Rng& extra) {
  if (d.args.n == 0 || d.args.k == 0) return refuse<AgGemmCase>("a zero extent: n = " + std::to_string(d.args.n) + ", k = " + std::to_string(d.args.k));
  const AllGatherConfig comm = all_gather_policy::resolved(d.args.config.comm, d.args.m_per_rank, d.args.k, cpu_budget(d.world));
  if (std::string e = all_gather_refusal(comm, d.args.m_per_rank, 2 * d.args.k); !e.empty()) return refuse<AgGemmCase>(e);
  AgGemmCase c{d.world, d.args.m_per_rank, float_width(d.args.k), d.args.n, comm.comm_rows, 0, 0, comm.method, comm.order,
               comm.resource == CommResource::kCopyEngine};
  c.bm = extra.chance(50) ? Space::cpu().tile_m : extra.range32(1, 2 * d.args.m_per_rank + 1);
  c.bn = extra.range32(1, d.args.n + 1);
  c.comm_blocks = cpu_blocks(comm.num_blocks, 1, 5);
  return {c, ""};
}

struct GemmRsCase {
  GemmRsFusedPlan plan;
  uint32_t k = 0;
  uint32_t reduce_blocks = 2;
};

Reduced<GemmRsCase> reduce(const fuzz::GemmRsDraw& d, Rng& extra) {
  const uint32_t w = static_cast<uint32_t>(d.world);
  if (d.args.m == 0) return refuse<GemmRsCase>("m = 0: no rows");
  if (d.args.n == 0 || d.args.k == 0) return refuse<GemmRsCase>("a zero extent: n = " + std::to_string(d.args.n) + ", k = " + std::to_string(d.args.k));
  const uint32_t bm = Space::cpu().tile_m;
  if (static_cast<uint32_t>(d.args.config.scatter) > 3) return refuse<GemmRsCase>("scatter: not pull, push, ce or auto");
  if (static_cast<uint32_t>(d.args.config.reducer) > 2) return refuse<GemmRsCase>("reducer: not blocks, epilogue or auto");
  if (static_cast<uint32_t>(d.args.config.push_notify) > 1) return refuse<GemmRsCase>("push_notify: not deferred or immediate");
  // The path the op takes for auto knobs; the executor's ranks are alike in one address space
  // (virtual ranks: an affine heap). One rank per GPU is drawn too: its rule picks push + epilogue.
  gemm_rs_policy::PathContext x;
  x.one_rank_per_gpu = extra.chance(50);
  x.affine_heap = true;
  x.granularity = d.args.config.granularity;
  x.reduce_blocks = d.args.config.reduce_blocks;
  x.method = d.args.config.method;
  x.shape.world = w;
  x.shape.m = d.args.m;
  x.shape.n = d.args.n;
  x.shape.k = d.args.k;
  const gemm_rs_policy::Path path = gemm_rs_policy::path(d.args.config.scatter, d.args.config.reducer, x);
  if (path.scatter == GemmRsScatter::kCopyEngine && d.args.config.granularity == SignalGranularity::kTile) {
    return refuse<GemmRsCase>("scatter = ce with granularity = tile: the copy engine moves whole groups of rows");
  }
  const GemmRsReducer reducer = path.reducer;
  if (reducer == GemmRsReducer::kEpilogue && d.args.config.granularity != SignalGranularity::kTile) {
    return refuse<GemmRsCase>("reducer = epilogue with granularity row or rank: an own tile would wait for its own later tiles");
  }
  GemmRsCase c;
  c.plan.reducer = reducer;
  c.plan.set_rows(d.args.m, w);  // any M: short and empty owner blocks, partial tile rows
  c.plan.n = float_width(d.args.n);
  c.plan.bm = bm;
  c.plan.bn = extra.range32(1, c.plan.n + 1);
  c.plan.granularity = d.args.config.granularity;
  c.plan.scatter = path.scatter;
  c.plan.band = d.args.config.swizzle;  // the GEMM's rasterization band: any value, the plan clamps it
  c.plan.defer_push_notify = d.args.config.push_notify == GemmRsPushNotify::kDeferred;
  c.k = float_width(d.args.k);
  c.reduce_blocks = cpu_blocks(d.args.config.reduce_blocks, 2, 4);
  return {c, ""};
}

Reduced<MoeCase> reduce(const fuzz::MoeAgDraw& d, Rng& extra) {
  if (std::string e = moe_policy::check_shape(d.args.tokens_per_rank, d.world, d.args.experts, d.args.topk); !e.empty()) {
    return refuse<MoeCase>(e);
  }
  if (d.args.n == 0 || d.args.hidden == 0) {
    return refuse<MoeCase>("a zero extent: n = " + std::to_string(d.args.n) + ", hidden = " + std::to_string(d.args.hidden));
  }
  const AllGatherConfig comm = all_gather_policy::resolved(d.args.config.comm, d.args.tokens_per_rank, d.args.hidden, cpu_budget(d.world));
  if (std::string e = all_gather_refusal(comm, d.args.tokens_per_rank, 2 * d.args.hidden); !e.empty()) return refuse<MoeCase>(e);
  MoeCase c{d.world, d.args.tokens_per_rank, float_width(d.args.hidden), float_width(d.args.n), d.args.experts, d.args.topk, 0, comm.comm_rows,
            d.routing};
  c.bm = extra.chance(50) ? Space::cpu().tile_m : extra.range32(1, 9);
  c.method = comm.method;
  c.order = comm.order;
  c.copy_engine = comm.resource == CommResource::kCopyEngine;
  c.comm_blocks = cpu_blocks(comm.num_blocks, 1, 4);
  c.gather_blocks = cpu_blocks(d.args.config.gather_blocks, 2, 4);
  return {c, ""};
}

Reduced<MoeCase> reduce(const fuzz::MoeRsDraw& d, Rng& extra) {
  if (std::string e = moe_policy::check_shape(d.args.tokens_per_rank, d.world, d.args.experts, d.args.topk); !e.empty()) {
    return refuse<MoeCase>(e);
  }
  if (d.args.n == 0 || d.args.k == 0) {
    return refuse<MoeCase>("a zero extent: n = " + std::to_string(d.args.n) + ", k = " + std::to_string(d.args.k));
  }
  MoeCase c{d.world, d.args.tokens_per_rank, float_width(d.args.k), float_width(d.args.n), d.args.experts, d.args.topk, 0,
            moe_policy::combine_rows(d.args.config.comm_rows, d.args.topk), d.routing};
  c.bm = extra.chance(50) ? Space::cpu().tile_m : extra.range32(1, 9);
  c.combine_blocks = cpu_blocks(d.args.config.combine_blocks, 3, 4);
  c.staged = extra.chance(25);  // the put-with-signal transport's staged combine
  return {c, ""};
}

Reduced<SpCase> reduce(const fuzz::SpAttentionDraw& d, Rng& extra) {
  const uint32_t row_elems = 2 * d.args.kv_heads * d.args.head_dim;
  const AllGatherConfig comm = all_gather_policy::resolved(d.args.config.comm, d.args.seq_per_rank, row_elems, cpu_budget(d.world));
  // Head dims scale as the widths do: 64 -> 4, 128 -> 8 floats (an unknown one to its share).
  SpCase c{d.world, d.args.seq_per_rank, comm.comm_rows, 0, d.args.q_heads, d.args.kv_heads, d.args.head_dim / 16, d.args.causal,
           d.args.config.layout, comm.method, comm.order, comm.resource == CommResource::kCopyEngine};
  c.bq = extra.range32(1, std::min(d.args.seq_per_rank + 2, kSpAttentionMaxBq));
  // Padded K/V rows on the SM path only: all_gather_stream copies a tile as one contiguous block
  // (its `gathered` is packed, as every op lays it out).
  c.pitch_pad = !c.copy_engine && extra.chance(20) ? 16 * extra.range32(1, 3) : 0;
  c.local_first = d.args.config.local_first && d.world > 1;  // SpAttention's rule: one rank, one pass
  c.section_kv_heads = d.args.config.section_kv_heads;
  c.comm_blocks = cpu_blocks(comm.num_blocks, 2, 4);
  if (std::string e = check_sp_attention_plan(make_plan(c), 4); !e.empty()) return refuse<SpCase>(e);
  if (std::string e = all_gather_refusal(comm, d.args.seq_per_rank, make_plan(c).ag.row_bytes); !e.empty()) {
    return refuse<SpCase>(e);
  }
  return {c, ""};
}

std::string run(const AgCase& c, uint64_t seed) { return run_all_gather(c, seed, kCallsPerDraw); }
std::string run(const RsCase& c, uint64_t seed) { return run_reduce_scatter(c, seed, kCallsPerDraw); }
std::string run(const AgGemmCase& c, uint64_t seed) { return run_ag_gemm(c, seed, kCallsPerDraw); }
std::string run(const GemmRsCase& c, uint64_t seed) {
  return run_gemm_rs_fused(c.plan, c.k, seed, kCallsPerDraw, c.reduce_blocks);
}
std::string run_part1(const MoeCase& c, uint64_t seed) { return run_moe(c, seed, kCallsPerDraw); }
std::string run_part2(const MoeCase& c, uint64_t seed) { return run_moe_rs(c, seed, kCallsPerDraw); }
std::string run(const SpCase& c, uint64_t seed) { return run_sp_attention(c, seed, kCallsPerDraw); }

// A refusal's reason without its numbers: refusals are counted by kind.
std::string reason_kind(const std::string& reason) {
  std::string out;
  for (size_t i = 0; i < reason.size(); ++i) {
    if (reason[i] >= '0' && reason[i] <= '9') {
      if (out.empty() || out.back() != 'N') out += 'N';
    } else {
      out += reason[i];
    }
  }
  return out;
}

// Runs the fuzz loop of one protocol: TILELINK_FUZZ_DRAWS draws of `op` from TILELINK_FUZZ_SEED
// (or the one draw TILELINK_FUZZ_DRAW_SEED names), each reduced and run, or counted as refused.
template <class Draw, class RunCase>
void fuzz_protocol(Op op, const char* test, Draw (*draw)(Rng&, const Space&), RunCase&& run_case) {
  const uint64_t seed = env_u64("TILELINK_FUZZ_SEED", kDefaultSeed);
  const bool replay = std::getenv("TILELINK_FUZZ_DRAW_SEED") != nullptr;
  const uint64_t draws = replay ? 1 : env_u64("TILELINK_FUZZ_DRAWS", kDefaultDraws);
  std::map<std::string, int> refusals;
  int ran = 0, failed = 0;
  for (uint64_t i = 0; i < draws; ++i) {
    const uint64_t ds = replay ? env_u64("TILELINK_FUZZ_DRAW_SEED", 0) : fuzz::draw_seed(seed, op, i);
    Rng rng(ds);
    const Draw d = draw(rng, Space::cpu());
    const auto reduced = reduce(d, rng);
    if (!reduced.refusal.empty()) {
      ++refusals[reason_kind(reduced.refusal)];
      continue;
    }
    ++ran;
    std::string error;
    try {
      error = run_case(reduced.c, ds);
    } catch (const std::exception& e) {  // a deadlock (TimeoutError) or a primitive's argument check
      error = e.what();
    }
    if (!error.empty()) {
      ++failed;
      ADD_FAILURE() << fuzz::to_string(op) << " draw " << i << " (draw seed " << hex(ds) << "): " << error
                    << "\n  draw: " << fuzz::describe(d) << "\n  replay: TILELINK_FUZZ_DRAW_SEED=" << hex(ds)
                    << " build/tests/tilelink_cpu_tests --gtest_filter=FuzzProtocols." << test;
    }
  }
  int refused = 0;
  for (const auto& [why, n] : refusals) refused += n;
  std::cout << "[ fuzz     ] " << fuzz::to_string(op) << ": "
            << (replay ? "draw seed " + hex(env_u64("TILELINK_FUZZ_DRAW_SEED", 0)) : "seed " + hex(seed)) << ", "
            << draws << " draws: " << ran << " ran (" << failed << " failed), " << refused << " refused\n";
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [why, n] : refusals) top.emplace_back(n, why);
  std::sort(top.rbegin(), top.rend());
  for (size_t j = 0; j < top.size() && j < 5; ++j) {
    std::cout << "[ fuzz     ]   " << top[j].first << " x " << top[j].second << "\n";
  }
  // A fuzz run that refuses everything tests nothing: the default budget must run draws.
  if (draws >= 8) {
    EXPECT_GT(ran, 0) << "every draw was refused";
  }
}

TEST(FuzzProtocols, AllGather) {
  fuzz_protocol(Op::kAllGather, "AllGather", fuzz::draw_all_gather, [](const AgCase& c, uint64_t s) { return run(c, s); });
}

TEST(FuzzProtocols, ReduceScatter) {
  fuzz_protocol(Op::kReduceScatter, "ReduceScatter", fuzz::draw_reduce_scatter,
                [](const RsCase& c, uint64_t s) { return run(c, s); });
}

TEST(FuzzProtocols, AgGemm) {
  fuzz_protocol(Op::kAgGemm, "AgGemm", fuzz::draw_ag_gemm, [](const AgGemmCase& c, uint64_t s) { return run(c, s); });
}

TEST(FuzzProtocols, GemmRs) {
  fuzz_protocol(Op::kGemmRs, "GemmRs", fuzz::draw_gemm_rs, [](const GemmRsCase& c, uint64_t s) { return run(c, s); });
}

TEST(FuzzProtocols, MoeAgGroupGemm) {
  fuzz_protocol(Op::kMoeAg, "MoeAgGroupGemm", fuzz::draw_moe_ag, run_part1);
}

TEST(FuzzProtocols, MoeGemmRs) {
  fuzz_protocol(Op::kMoeRs, "MoeGemmRs", fuzz::draw_moe_rs, run_part2);
}

TEST(FuzzProtocols, SpAttention) {
  fuzz_protocol(Op::kSpAttention, "SpAttention", fuzz::draw_sp_attention,
                [](const SpCase& c, uint64_t s) { return run(c, s); });
}

// The generator itself: a draw is a function of its seed alone (replays depend on it), different
// seeds give different draws, and the uniform draw stays within its bounds.
TEST(FuzzSpace, DrawsAreAFunctionOfTheSeed) {
  for (Op op : fuzz::kAllOps) {
    const uint64_t ds = fuzz::draw_seed(1, op, 7);
    EXPECT_NE(ds, fuzz::draw_seed(1, op, 8));
    EXPECT_NE(ds, fuzz::draw_seed(2, op, 7));
  }
  Rng a(fuzz::draw_seed(5, Op::kMlp, 3)), b(fuzz::draw_seed(5, Op::kMlp, 3));
  EXPECT_EQ(fuzz::describe(fuzz::draw_mlp(a, Space::gpu())), fuzz::describe(fuzz::draw_mlp(b, Space::gpu())));
  Rng c(fuzz::draw_seed(5, Op::kMoeLayer, 3)), d(fuzz::draw_seed(5, Op::kMoeLayer, 4));
  EXPECT_NE(fuzz::describe(fuzz::draw_moe_layer(c, Space::gpu())), fuzz::describe(fuzz::draw_moe_layer(d, Space::gpu())));
  // Rng::range stays in its bounds and reaches both ends.
  Rng r(42);
  bool lo = false, hi = false;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t x = r.range(3, 9);
    ASSERT_GE(x, 3u);
    ASSERT_LE(x, 9u);
    lo |= x == 3;
    hi |= x == 9;
  }
  EXPECT_TRUE(lo && hi);
}

}  // namespace
}  // namespace tilelink::test
