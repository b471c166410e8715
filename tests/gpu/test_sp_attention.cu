// SP attention (SpAttention) on virtual ranks (world 1, 2, 4, 8) against an independent GPU
// reference (attention_ref.cuh: two-pass softmax, fp32 scores, double accumulators) over the whole
// sequence in position order, built on the host from every rank's own K/V rows.
//
// Before every call each rank gets fresh random Q and own K/V rows, every other row of its
// gathered K/V buffer is set to bf16 NaN (0xFFFF: a key tile read before its chunk arrived turns
// O and LSE into NaN), and O and LSE are poisoned (kPoison bytes: a row never written shows).
// Every output element must be finite and written; the checked rows (all of them, or for the long
// sequences a sample per rank that includes the shard's first and last rows) must match the
// reference. Run modes: the fused call (run), the non-overlapped baseline (the op's all-gather,
// the compute stream ordered after the comm stream, then run_attention_only) and the ring
// baseline (run_ring).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "attention_ref.cuh"
#include "gpu_test_util.hpp"

namespace tilelink::test::sp_attention {

enum class Mode { kFused, kNonOverlapped, kRing };

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kFused:
      return "fused";
    case Mode::kNonOverlapped:
      return "non-overlapped";
    case Mode::kRing:
      return "ring";
  }
  return "?";
}

struct Case {
  std::string name;
  int world = 1;
  uint32_t spr = 300;  // seq_per_rank
  uint32_t q_heads = 4;
  uint32_t kv_heads = 2;
  uint32_t head_dim = 128;
  bool causal = false;
  SeqLayout layout = SeqLayout::kContiguous;
  CommResource resource = CommResource::kCopyEngine;
  uint32_t comm_rows = 0;  // 0: the op's automatic choice
  size_t kv_offset = 0;
  std::vector<Mode> calls{Mode::kFused, Mode::kFused};  // one call each, fresh inputs every time
  uint32_t sample_rows = 0;                             // 0: check every row; else rows per rank
  bool local_first = false;                             // SpAttentionConfig::local_first
  uint32_t section_kv_heads = 0;                        // SpAttentionConfig::section_kv_heads
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "world " << c.world << ", seq/rank " << c.spr << ", heads " << c.q_heads << "/" << c.kv_heads << ", d "
    << c.head_dim << (c.causal ? ", causal" : ", full")
    << (c.layout == SeqLayout::kZigZag ? ", zig-zag" : ", contiguous")
    << (c.resource == CommResource::kSm ? ", sm" : ", copy engine") << ", comm_rows " << c.comm_rows << ", kv_offset "
    << c.kv_offset << (c.local_first ? ", local pass first" : "")
    << (c.section_kv_heads ? ", sections of " + std::to_string(c.section_kv_heads) + " kv heads" : "");
  return s.str();
}

// gtest prints a case by its name and description.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " (" << describe(c) << ")"; }

// Uniform bf16 values in [-range, range).
void fill_uniform(std::vector<__nv_bfloat16>& v, float range, uint64_t seed) {
  Rng rng(seed);
  for (size_t i = 0; i < v.size(); i += 2) {
    const uint64_t x = rng.next();
    const float a = float(uint32_t(x) >> 8) * (1.0f / float(1 << 23)) - 1.0f;
    const float b = float(uint32_t(x >> 32) >> 8) * (1.0f / float(1 << 23)) - 1.0f;
    v[i] = __float2bfloat16(a * range);
    if (i + 1 < v.size()) v[i + 1] = __float2bfloat16(b * range);
  }
}

// cudaMemset on the memory's own device (as poison() does).
void fill_bytes(void* p, int value, size_t bytes) {
  cudaPointerAttributes attributes{};
  TL_CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
  int current = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  TL_CUDA_CHECK(cudaSetDevice(attributes.type == cudaMemoryTypeDevice ? attributes.device : current));
  TL_CUDA_CHECK(cudaMemset(p, value, bytes));
  TL_CUDA_CHECK(cudaSetDevice(current));
}

uint16_t bits_of(__nv_bfloat16 x) {
  uint16_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
// A value with enough digits to compare a bf16 result with the reference.
std::string fmt(double x) {
  std::ostringstream s;
  s << std::setprecision(7) << x;
  return s.str();
}

constexpr uint16_t kPoisonBf16 = uint16_t(kPoison) * 0x0101u;
constexpr uint32_t kPoisonF32 = uint32_t(kPoison) * 0x01010101u;

// One case's world, buffers, op and host copies of the inputs. Never moved (TestWorld).
struct Fixture {
  Case c;
  uint32_t seq_len, row_elems;
  size_t row_bytes, kv_bytes, q_elems, lse_elems;
  TestWorld env;
  SymmetricBuffer kv;
  std::vector<DeviceBuffer> q, o, lse;
  SpAttentionArguments args;
  std::unique_ptr<SpAttention> op;
  std::vector<std::vector<__nv_bfloat16>> q_host, kv_host;  // per rank: Q, own K/V rows

  explicit Fixture(const Case& cs)
      : c(cs),
        seq_len(uint32_t(cs.world) * cs.spr),
        row_elems(2 * cs.kv_heads * cs.head_dim),
        row_bytes(size_t(row_elems) * 2),
        kv_bytes(cs.kv_offset + size_t(seq_len) * row_bytes),
        q_elems(size_t(cs.spr) * cs.q_heads * cs.head_dim),
        lse_elems(size_t(cs.spr) * cs.q_heads),
        env(cs.world, kv_bytes + (2u << 20), 4096),
        kv(env.heap.allocate(kv_bytes)) {
    const World& world = env.world;
    for (int r = 0; r < c.world; ++r) {
      q.emplace_back(q_elems * 2, world.device(r));
      o.emplace_back(q_elems * 2, world.device(r));
      lse.emplace_back(lse_elems * sizeof(float), world.device(r));
      args.q.push_back(q[r].get());
      args.o.push_back(o[r].get());
      args.lse.push_back(lse[r].get<float>());
    }
    args.kv = &kv;
    args.kv_offset = c.kv_offset;
    args.seq_per_rank = c.spr;
    args.q_heads = c.q_heads;
    args.kv_heads = c.kv_heads;
    args.head_dim = c.head_dim;
    args.causal = c.causal;
    args.config.layout = c.layout;
    args.config.comm.resource = c.resource;  // the other comm fields keep their defaults
    args.config.comm.comm_rows = c.comm_rows;
    args.config.local_first = c.local_first;
    args.config.section_kv_heads = c.section_kv_heads;
    EXPECT_EQ(SpAttention::can_implement(world, env.heap, args), "");
    op = std::make_unique<SpAttention>(world, env.heap, env.signals, args, "sp_attention_test");
    q_host.assign(size_t(c.world), std::vector<__nv_bfloat16>(q_elems));
    kv_host.assign(size_t(c.world), std::vector<__nv_bfloat16>(size_t(c.spr) * row_elems));
  }

  uint32_t position(uint32_t rank, uint32_t row) const {
    return attention_ref::token_position(c.layout, uint32_t(c.world), c.spr, rank, row);
  }

  // Fresh random Q and K/V (host copies only). Q in [-q_range, q_range), K and V in [-1, 1).
  void new_inputs(uint64_t seed, uint64_t call, float q_range) {
    for (int r = 0; r < c.world; ++r) {
      fill_uniform(q_host[r], q_range, seed ^ seed_of(1, uint64_t(r), call));
      fill_uniform(kv_host[r], 1.0f, seed ^ seed_of(2, uint64_t(r), call));
    }
  }

  // Before a call: every rank's gathered K/V all NaN but its own rows, Q uploaded, O and LSE
  // poisoned. Nothing of the op may be in flight.
  void prepare() {
    settle();
    for (int r = 0; r < c.world; ++r) {
      char* g = kv.as<char>(r);
      fill_bytes(g, 0xFF, kv_bytes);  // bf16 0xFFFF is NaN
      upload(g + c.kv_offset + size_t(r) * c.spr * row_bytes, kv_host[r].data(), size_t(c.spr) * row_bytes);
      upload(q[r].get(), q_host[r].data(), q_elems * 2);
      poison(o[r].get(), o[r].bytes());
      poison(lse[r].get(), lse[r].bytes());
    }
    settle();
  }

  void run(Mode m) {
    const World& world = env.world;
    switch (m) {
      case Mode::kFused:
        op->run();
        break;
      case Mode::kNonOverlapped:
        // AllGather::run leaves the gather on the comm streams: order each compute stream after
        // its comm stream (as the fused call does at its end) before the attention alone.
        op->all_gather().run();
        for (int r = 0; r < world.size(); ++r) world.compute_after_comm(r);
        op->run_attention_only();
        break;
      case Mode::kRing:
        op->run_ring();
        break;
    }
    world.synchronize();
  }

  std::vector<uint8_t> o_bytes(int r) const { return download<uint8_t>(o[r].get(), o[r].bytes()); }
  std::vector<uint8_t> lse_bytes(int r) const { return download<uint8_t>(lse[r].get(), lse[r].bytes()); }
};

// The rows of one rank to check: all, or `sample` distinct rows that include the shard's first
// and last rows, the zig-zag pieces' edges and the first query block's edge.
std::vector<uint32_t> rows_to_check(const Case& c, std::mt19937_64& rng) {
  std::vector<uint32_t> rows;
  if (c.sample_rows == 0 || c.sample_rows >= c.spr) {
    for (uint32_t i = 0; i < c.spr; ++i) rows.push_back(i);
    return rows;
  }
  std::set<uint32_t> chosen{0, c.spr - 1};
  if (c.layout == SeqLayout::kZigZag) chosen.insert({c.spr / 2 - 1, c.spr / 2});
  if (c.spr > 128) chosen.insert({127, 128});
  std::uniform_int_distribution<uint32_t> pick(0, c.spr - 1);
  while (chosen.size() < c.sample_rows) chosen.insert(pick(rng));
  return std::vector<uint32_t>(chosen.begin(), chosen.end());
}

// Checks every rank's O and LSE after a call: every element finite and written, and the checked
// rows against the reference.
//
// Tolerances. Q, K and V are exact bf16 values in both; the reference is fp32 scores (products of
// bf16 values are exact in fp32) with double sums. The op rounds P = exp(s - m) to bf16 before
// P V (relative 2^-9), sums l in fp32, and rounds O to bf16 (relative 2^-9); the ring also rounds
// each step's partial O to bf16 before its LSE merge. So an element of O is off by at most a few
// 2^-9 of max |v| = 1 where few keys dominate, and far less elsewhere: per element
// |ours - ref| <= 2e-2 + 2e-2 |ref|. LSE = m + log(l) in fp32 is off by the fp32 rounding of l
// over up to 128k terms (~1e-5): |ours - ref| <= 1e-3 + 1e-3 |ref|. Because a softmax over
// hundreds of nearly equal scores makes |O| small (~0.6 / sqrt(keys)), the per-element bound
// alone is loose for long rows; the aggregate relative error sqrt(sum (ours - ref)^2 / sum ref^2)
// over the checked elements must also stay below 1e-2 (bf16 rounding gives ~2e-3; a dropped,
// doubled or misplaced chunk, a wrong head or an unrescaled accumulator gives > 1e-1).
void check_outputs(Fixture& f, std::mt19937_64& rng, const std::string& what) {
  const Case& c = f.c;
  const uint32_t H = c.q_heads, d = c.head_dim, spr = c.spr;

  // The whole sequence's K/V rows in position order, from the host copies of the own rows.
  std::vector<__nv_bfloat16> kv_seq(size_t(f.seq_len) * f.row_elems);
  for (int r = 0; r < c.world; ++r) {
    for (uint32_t i = 0; i < spr; ++i) {
      std::memcpy(kv_seq.data() + size_t(f.position(uint32_t(r), i)) * f.row_elems,
                  f.kv_host[r].data() + size_t(i) * f.row_elems, f.row_bytes);
    }
  }
  // The checked (rank, row) pairs, all q heads of each: their Q rows and reference queries.
  struct Checked {
    int rank;
    uint32_t row;
  };
  std::vector<Checked> checked;
  std::vector<__nv_bfloat16> q_tokens;
  std::vector<attention_ref::Query> queries;
  for (int r = 0; r < c.world; ++r) {
    for (uint32_t i : rows_to_check(c, rng)) {
      const uint32_t token = uint32_t(checked.size());
      checked.push_back({r, i});
      const __nv_bfloat16* row = f.q_host[r].data() + size_t(i) * H * d;
      q_tokens.insert(q_tokens.end(), row, row + size_t(H) * d);
      for (uint32_t h = 0; h < H; ++h) queries.push_back({token, f.position(uint32_t(r), i), h});
    }
  }
  attention_ref::Shape shape;
  shape.seq_len = f.seq_len;
  shape.q_heads = H;
  shape.kv_heads = c.kv_heads;
  shape.head_dim = d;
  shape.causal = c.causal;
  std::vector<float> o_ref, lse_ref;
  attention_ref::reference_attention(f.env.world.device(0), shape, q_tokens, kv_seq, queries, o_ref, lse_ref);

  double err2 = 0, ref2 = 0;
  size_t next_checked = 0;
  for (int r = 0; r < c.world; ++r) {
    SCOPED_TRACE(what + ", rank " + std::to_string(r));
    const auto o = download<__nv_bfloat16>(f.o[r].get(), f.q_elems);
    const auto lse = download<float>(f.lse[r].get(), f.lse_elems);

    // Every element of the shard: finite and written.
    size_t bad_o = 0, first_o = 0, bad_lse = 0, first_lse = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      const uint16_t b = bits_of(o[i]);
      if ((b & 0x7F80u) == 0x7F80u || b == kPoisonBf16) {
        if (bad_o++ == 0) first_o = i;
      }
    }
    for (size_t i = 0; i < lse.size(); ++i) {
      if (!std::isfinite(lse[i]) || bits_of(lse[i]) == kPoisonF32) {
        if (bad_lse++ == 0) first_lse = i;
      }
    }
    EXPECT_EQ(bad_o, 0u) << bad_o << " of " << o.size() << " O elements not finite or never written; first: row "
                         << first_o / (size_t(H) * d) << " head " << first_o / d % H << " col " << first_o % d << " = "
                         << __bfloat162float(o[first_o]) << (bits_of(o[first_o]) == kPoisonBf16 ? " (poison)" : "");
    EXPECT_EQ(bad_lse, 0u) << bad_lse << " of " << lse.size() << " LSE values not finite or never written; first: head "
                           << first_lse / spr << " row " << first_lse % spr << " = " << lse[first_lse]
                           << (bits_of(lse[first_lse]) == kPoisonF32 ? " (poison)" : "");

    // The checked rows against the reference.
    size_t o_bad = 0, lse_bad = 0, o_count = 0, lse_count = 0;
    std::string o_first, lse_first;
    double o_max_err = 0, lse_max_err = 0;
    for (; next_checked < checked.size() && checked[next_checked].rank == r; ++next_checked) {
      const uint32_t row = checked[next_checked].row;
      for (uint32_t h = 0; h < H; ++h) {
        const size_t qi = next_checked * H + h;
        for (uint32_t e = 0; e < d; ++e) {
          const double got = __bfloat162float(o[(size_t(row) * H + h) * d + e]);
          const double want = o_ref[qi * d + e];
          const double err = std::fabs(got - want);
          ++o_count;
          err2 += (got - want) * (got - want);
          ref2 += want * want;
          if (err > o_max_err || std::isnan(err)) o_max_err = std::isnan(err) ? INFINITY : err;
          if (!(err <= 2e-2 + 2e-2 * std::fabs(want)) && o_bad++ == 0) {
            o_first = "row " + std::to_string(row) + " (position " + std::to_string(f.position(uint32_t(r), row)) +
                      ") head " + std::to_string(h) + " col " + std::to_string(e) + ": got " + fmt(got) +
                      ", reference " + fmt(want);
          }
        }
        const double got = lse[size_t(h) * spr + row];
        const double want = lse_ref[qi];
        const double err = std::fabs(got - want);
        ++lse_count;
        if (err > lse_max_err || std::isnan(err)) lse_max_err = std::isnan(err) ? INFINITY : err;
        if (!(err <= 1e-3 + 1e-3 * std::fabs(want)) && lse_bad++ == 0) {
          lse_first = "row " + std::to_string(row) + " (position " + std::to_string(f.position(uint32_t(r), row)) +
                      ") head " + std::to_string(h) + ": got " + fmt(got) + ", reference " + fmt(want);
        }
      }
    }
    EXPECT_EQ(o_bad, 0u) << o_bad << " of " << o_count << " checked O elements off (max error " << o_max_err
                         << "); first at " << o_first;
    EXPECT_EQ(lse_bad, 0u) << lse_bad << " of " << lse_count << " checked LSE values off (max error " << lse_max_err
                           << "); first at " << lse_first;
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(rel, 1e-2) << what << ": relative RMS error of O over the checked elements";
}

void run_case(const Case& c) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f(c);
  const SpAttentionPlan& plan = f.op->plan();
  ASSERT_EQ(plan.world(), uint32_t(c.world));
  ASSERT_EQ(plan.seq_per_rank(), c.spr);
  for (uint32_t r = 0; r < uint32_t(c.world); ++r) {
    for (uint32_t i = 0; i < c.spr; ++i) {
      ASSERT_EQ(plan.position(r, i), f.position(r, i)) << "rank " << r << " row " << i;
    }
  }
  for (size_t call = 0; call < c.calls.size(); ++call) {
    const Mode mode = c.calls[call];
    const std::string what = "call " + std::to_string(call + 1) + " (" + mode_name(mode) + ")";
    SCOPED_TRACE(what);
    // Odd calls: Q in [-1, 1), a nearly flat softmax; even calls: Q in [-4, 4), scores spread
    // over several units, so that the running max moves and the rescaling matters.
    f.new_inputs(seed, call, call % 2 == 0 ? 1.0f : 4.0f);
    f.prepare();
    f.run(mode);
    check_outputs(f, rng, what);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

std::string case_name(const char* kind, int world, bool causal, SeqLayout layout, uint32_t head_dim,
                      CommResource resource) {
  return std::string(kind) + "_world" + std::to_string(world) + (causal ? "_causal" : "_full") +
         (layout == SeqLayout::kZigZag ? "_zigzag" : "_contiguous") + "_hd" + std::to_string(head_dim) +
         (resource == CommResource::kSm ? "_sm" : "_ce");
}

Case make_case(const std::string& name, int world, uint32_t spr, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
               bool causal, SeqLayout layout, CommResource resource, std::vector<Mode> calls, uint32_t comm_rows = 0,
               size_t kv_offset = 0, uint32_t sample_rows = 0) {
  Case c;
  c.name = name;
  c.world = world;
  c.spr = spr;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.causal = causal;
  c.layout = layout;
  c.resource = resource;
  c.calls = std::move(calls);
  c.comm_rows = comm_rows;
  c.kv_offset = kv_offset;
  c.sample_rows = sample_rows;
  return c;
}

constexpr SeqLayout kContig = SeqLayout::kContiguous;
constexpr SeqLayout kZig = SeqLayout::kZigZag;
constexpr CommResource kCe = CommResource::kCopyEngine;
constexpr CommResource kSm = CommResource::kSm;
constexpr Mode kF = Mode::kFused;
constexpr Mode kN = Mode::kNonOverlapped;
constexpr Mode kR = Mode::kRing;

// Shards of 300 or 330 tokens: never a multiple of the 128-token key tile or query block, and the
// zig-zag pieces of 150 / 165 tokens neither.
uint32_t grid_spr(int world) { return world == 1 || world == 8 ? 330 : 300; }

// "grid": every world, mask, layout, head dim and all-gather resource, GQA 4 q heads on 2 kv
// heads, two fused calls.
std::vector<Case> grid_cases() {
  std::vector<Case> cases;
  for (int world : {1, 2, 4, 8}) {
    for (bool causal : {false, true}) {
      for (SeqLayout layout : {kContig, kZig}) {
        for (uint32_t d : {128u, 64u}) {
          for (CommResource resource : {kCe, kSm}) {
            cases.push_back(make_case(case_name("grid", world, causal, layout, d, resource), world, grid_spr(world), 4,
                                      2, d, causal, layout, resource, {kF, kF}));
          }
        }
      }
    }
  }
  return cases;
}

// "modes": the two baselines, interleaved with a fused call on the same op (its signal epochs go
// on across them): non-overlapped, ring, fused, non-overlapped, ring. Every world, mask, layout
// and resource (the non-overlapped call runs the op's all-gather on it); head dim 128 on the copy
// engine, 64 on SMs.
std::vector<Case> modes_cases() {
  std::vector<Case> cases;
  for (int world : {1, 2, 4, 8}) {
    for (bool causal : {false, true}) {
      for (SeqLayout layout : {kContig, kZig}) {
        for (CommResource resource : {kCe, kSm}) {
          const uint32_t d = resource == kSm ? 64 : 128;
          cases.push_back(make_case(case_name("modes", world, causal, layout, d, resource), world, grid_spr(world), 4,
                                    2, d, causal, layout, resource, {kN, kR, kF, kN, kR}));
        }
      }
    }
  }
  return cases;
}

// "shape": head groupings other than GQA 4/2 (MQA, MHA, 8/2), and shapes at the edges: shards
// shorter than a tile, of one or two tokens, one past a tile, whole tiles; chunks of several tiles
// with a short last one; a chunk longer than the shard that is not a multiple of 128; K/V at an
// offset into its buffer.
std::vector<Case> shape_cases() {
  return {
      make_case("shape_mqa_world4_causal_zigzag_hd128_ce", 4, 300, 4, 1, 128, true, kZig, kCe, {kF, kR}),
      // More work items than any rank's SM budget: every rank's persistent grid is full while its
      // CTAs wait for the copy-engine all-gather (on virtual ranks the copies need SMs too).
      make_case("shape_fullgrid_world4_causal_zigzag_hd128_ce", 4, 1100, 8, 2, 128, true, kZig, kCe, {kF, kF}),
      make_case("shape_fullgrid_world2_full_contiguous_hd128_ce", 2, 1100, 8, 2, 128, false, kContig, kCe, {kF, kN}),
      make_case("shape_mqa_world8_full_contiguous_hd64_sm", 8, 330, 4, 1, 64, false, kContig, kSm, {kF, kN}),
      make_case("shape_mha_world2_causal_contiguous_hd64_ce", 2, 330, 4, 4, 64, true, kContig, kCe, {kF, kR}),
      make_case("shape_mha_world8_causal_zigzag_hd128_sm", 8, 300, 4, 4, 128, true, kZig, kSm, {kF, kF}),
      make_case("shape_gqa8x2_world4_full_zigzag_hd128_sm", 4, 330, 8, 2, 128, false, kZig, kSm, {kF, kN}),
      make_case("shape_spr1_world4_causal_contiguous_hd64_ce", 4, 1, 4, 2, 64, true, kContig, kCe, {kF, kR, kN}),
      make_case("shape_spr2_world4_causal_zigzag_hd128_sm", 4, 2, 4, 2, 128, true, kZig, kSm, {kF, kR, kN}),
      make_case("shape_spr129_world2_causal_contiguous_hd128_sm", 2, 129, 4, 2, 128, true, kContig, kSm, {kF, kN}),
      make_case("shape_spr256_world8_causal_zigzag_hd64_sm", 8, 256, 4, 2, 64, true, kZig, kSm, {kF, kR}),
      make_case("shape_spr1000_world4_causal_zigzag_hd64_sm", 4, 1000, 4, 2, 64, true, kZig, kSm, {kF, kF}),
      make_case("shape_comm256_world4_causal_zigzag_hd128_sm", 4, 600, 4, 2, 128, true, kZig, kSm, {kF, kN}, 256),
      make_case("shape_comm256_world2_full_contiguous_hd64_ce", 2, 600, 4, 2, 64, false, kContig, kCe, {kF, kF}, 256),
      make_case("shape_comm330_world2_causal_zigzag_hd128_ce", 2, 300, 4, 2, 128, true, kZig, kCe, {kF, kR}, 330),
      make_case("shape_offset_world4_causal_zigzag_hd128_sm", 4, 300, 4, 2, 128, true, kZig, kSm, {kF, kR, kN}, 0,
                1040),
      make_case("shape_offset_world2_full_contiguous_hd64_ce", 2, 330, 4, 2, 64, false, kContig, kCe, {kF, kN}, 0,
                4096),
  };
}

// "long": 32k and 128k tokens, head dim 128, 4 q heads on 1 kv head; the reference for 64 rows
// per rank (all 4 heads: 256 pairs), the shard's first and last rows among them.
std::vector<Case> long_cases() {
  constexpr uint32_t k32 = 32768, k128 = 131072, kSample = 64;
  return {
      make_case("long_seq32k_world1_causal_ce", 1, k32, 4, 1, 128, true, kContig, kCe, {kF, kR}, 0, 0, kSample),
      make_case("long_seq32k_world1_full_ce", 1, k32, 4, 1, 128, false, kContig, kCe, {kF, kN}, 0, 0, kSample),
      make_case("long_seq32k_world8_causal_zigzag_sm", 8, k32 / 8, 4, 1, 128, true, kZig, kSm, {kF, kR}, 0, 0, kSample),
      make_case("long_seq32k_world8_full_contiguous_ce", 8, k32 / 8, 4, 1, 128, false, kContig, kCe, {kF, kN}, 0, 0,
                kSample),
      make_case("long_seq128k_world1_causal_ce", 1, k128, 4, 1, 128, true, kContig, kCe, {kF, kF}, 0, 0, kSample),
      make_case("long_seq128k_world1_full_ce", 1, k128, 4, 1, 128, false, kContig, kCe, {kF, kF}, 0, 0, kSample),
      make_case("long_seq128k_world8_causal_zigzag_ce", 8, k128 / 8, 4, 1, 128, true, kZig, kCe, {kF, kF}, 0, 0,
                kSample),
      make_case("long_seq128k_world8_full_contiguous_sm", 8, k128 / 8, 4, 1, 128, false, kContig, kSm, {kF, kF}, 0, 0,
                kSample),
  };
}

// "local": the local pass first (every block folds its items' own shard, parks their state and
// resumes them on the remote chunks) over worlds, masks, layouts, both head dims and resources,
// with the baselines (one pass) in between; a full grid and a long sequence.
std::vector<Case> local_cases() {
  std::vector<Case> cases;
  for (int world : {1, 2, 4, 8}) {
    for (bool causal : {false, true}) {
      for (SeqLayout layout : {kContig, kZig}) {
        const CommResource resource = causal ? kSm : kCe;
        const uint32_t d = layout == kZig ? 64 : 128;
        Case c = make_case(case_name("local", world, causal, layout, d, resource), world, grid_spr(world), 4, 2, d,
                           causal, layout, resource, {kF, kN, kF});
        c.local_first = true;
        cases.push_back(std::move(c));
      }
    }
  }
  Case full = make_case("local_fullgrid_world4_causal_zigzag_hd128_ce", 4, 1100, 8, 2, 128, true, kZig, kCe, {kF, kF});
  full.local_first = true;
  cases.push_back(std::move(full));
  Case chunks = make_case("local_comm256_world2_full_contiguous_hd128_ce", 2, 600, 4, 2, 128, false, kContig, kCe,
                          {kF, kR}, 256);
  chunks.local_first = true;
  cases.push_back(std::move(chunks));
  Case longer = make_case("local_seq32k_world8_causal_zigzag_ce", 8, 32768 / 8, 4, 1, 128, true, kZig, kCe, {kF, kF},
                          0, 0, 64);
  longer.local_first = true;
  cases.push_back(std::move(longer));
  return cases;
}

// "section": items in sections of fewer kv heads than there are (8 q heads on 4 kv heads), with
// and without the local pass first and the causal mask's heaviest-first order in each section.
std::vector<Case> section_cases() {
  std::vector<Case> cases;
  for (uint32_t section : {1u, 2u}) {
    for (bool causal : {false, true}) {
      const int world = causal ? 4 : 1;
      const SeqLayout layout = causal ? kZig : kContig;
      const std::string kind = "section" + std::to_string(section);
      Case c = make_case(case_name(kind.c_str(), world, causal, layout, 128, kCe),
                         world, grid_spr(world), 8, 4, 128, causal, layout, kCe, {kF, kN, kR});
      c.section_kv_heads = section;
      c.local_first = section == 2 && causal;
      if (c.local_first) c.calls = {kF, kN, kF};
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto* list : {&grid_cases, &modes_cases, &shape_cases, &long_cases, &local_cases, &section_cases}) {
    for (Case& c : (*list)()) cases.push_back(std::move(c));
  }
  return cases;
}

// One suite, SpAttentionTest: the cases below (TEST_P, no instantiation prefix) and the plain
// checks after them (TEST_F on the same fixture; they take no parameter).
class SpAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpAttentionTest, MatchesReference) {
  TL_SKIP_WITHOUT_GPU();
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(, SpAttentionTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Two fused calls on the same inputs give the same bytes of O and LSE; so does the attention
// alone on the gathered K/V (the same kernel without waits and on a larger grid: every work item
// still visits its key tiles in the same order, so its arithmetic is the same).
TEST_F(SpAttentionTest, DeterministicOnTheSameInputs) {
  TL_SKIP_WITHOUT_GPU();
  for (CommResource resource : {kCe, kSm}) {
    const Case c = make_case("", 4, 330, 4, 2, 128, true, kZig, resource, {});
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
    Fixture f(c);
    f.new_inputs(seed, 0, 4.0f);
    std::vector<std::vector<uint8_t>> o_first, lse_first;
    f.prepare();
    f.run(Mode::kFused);
    for (int r = 0; r < c.world; ++r) {
      o_first.push_back(f.o_bytes(r));
      lse_first.push_back(f.lse_bytes(r));
    }
    for (Mode mode : {Mode::kFused, Mode::kNonOverlapped}) {
      SCOPED_TRACE(std::string("second call: ") + mode_name(mode));
      f.prepare();
      f.run(mode);
      for (int r = 0; r < c.world; ++r) {
        EXPECT_TRUE(bytes_equal(f.o_bytes(r), o_first[r])) << "O of rank " << r;
        EXPECT_TRUE(bytes_equal(f.lse_bytes(r), lse_first[r])) << "LSE of rank " << r;
      }
    }
  }
}

// With every knob on automatic, SpAttention takes the tune cache's configuration for its GPU,
// world, shape, mask and layout -- keeping its own layout -- and matches the reference; a cached
// configuration it refuses is ignored, and so is the cache with use_tune_cache = false.
TEST_F(SpAttentionTest, AutomaticConfigTakesTheCachedOne) {
  TL_SKIP_WITHOUT_GPU();
  const Case c = make_case("tuned", 2, 300, 4, 2, 128, true, kZig, kCe, {kF});
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(describe(c) + ", seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Fixture f(c);  // built before the cache: automatic
  EXPECT_EQ(f.op->tuned_from(), "");
  const ScopedTuneCache cache("sp_attention_tune");
  TuneEntry entry;
  entry.op = "sp_attention";
  entry.sp_attention.comm = {CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, 128, 2, 512};
  entry.sp_attention.local_first = true;
  entry.sp_attention.section_kv_heads = 1;  // layout: contiguous, not the caller's
  cache.put(sp_attention_tune_key(f.env.world, f.args), entry);

  SpAttentionArguments plain_args = f.args;
  plain_args.config.use_tune_cache = false;
  EXPECT_EQ(SpAttention(f.env.world, f.env.heap, f.env.signals, plain_args, "plain").tuned_from(), "");
  f.op.reset();
  f.op = std::make_unique<SpAttention>(f.env.world, f.env.heap, f.env.signals, f.args, "tuned");
  EXPECT_EQ(f.op->tuned_from(), cache.path());
  EXPECT_EQ(f.op->config().layout, SeqLayout::kZigZag) << "the layout is the caller's";
  EXPECT_TRUE(f.op->config().local_first);
  EXPECT_EQ(f.op->config().comm.resource, CommResource::kSm);
  EXPECT_EQ(f.op->plan().section_kv_heads, 1u);
  EXPECT_TRUE(f.op->plan().local_first);
  for (uint64_t call = 0; call < 2; ++call) {
    f.new_inputs(seed, call, call % 2 == 0 ? 1.0f : 4.0f);
    f.prepare();
    f.run(Mode::kFused);
    check_outputs(f, rng, "tuned call " + std::to_string(call + 1));
  }

  entry.sp_attention.section_kv_heads = 3;  // not a divisor of the 2 kv heads: refused
  cache.put(sp_attention_tune_key(f.env.world, f.args), entry);
  const SpAttention refused(f.env.world, f.env.heap, f.env.signals, f.args, "refused");
  EXPECT_EQ(refused.tuned_from(), "") << "a cached configuration the op refuses was taken";
  EXPECT_TRUE(is_automatic(refused.config()));
  settle();
}

// The plan's layout, the accessors: positions a permutation of the sequence that home() inverts,
// flops() = 4 d q_heads x visible pairs, attention CTAs within the rank's SM budget.
TEST_F(SpAttentionTest, PlanAndAccessors) {
  TL_SKIP_WITHOUT_GPU();
  for (const Case& c : {make_case("", 4, 300, 4, 2, 64, true, kZig, kSm, {}),
                        make_case("", 2, 330, 4, 1, 128, false, kContig, kCe, {})}) {
    SCOPED_TRACE(describe(c));
    Fixture f(c);
    const SpAttentionPlan& plan = f.op->plan();
    const uint32_t S = f.seq_len;
    EXPECT_EQ(plan.seq_len(), S);
    EXPECT_EQ(plan.q_heads, c.q_heads);
    EXPECT_EQ(plan.kv_heads, c.kv_heads);
    EXPECT_EQ(plan.head_dim, c.head_dim);
    EXPECT_EQ(plan.causal, c.causal);
    EXPECT_EQ(plan.layout, c.layout);
    std::vector<int> seen(S, 0);
    for (uint32_t r = 0; r < uint32_t(c.world); ++r) {
      double pairs = 0;
      for (uint32_t i = 0; i < c.spr; ++i) {
        const uint32_t pos = plan.position(r, i);
        ASSERT_EQ(pos, f.position(r, i)) << "rank " << r << " row " << i;
        ++seen[pos];
        const TokenHome home = plan.home(pos);
        EXPECT_EQ(home.rank, r);
        EXPECT_EQ(home.row, i);
        EXPECT_EQ(plan.kv_position(r * c.spr + i), pos);
        pairs += c.causal ? double(pos) + 1 : double(S);
      }
      EXPECT_DOUBLE_EQ(f.op->flops(int(r)), pairs * 4.0 * c.head_dim * c.q_heads) << "rank " << r;
      EXPECT_GE(f.op->attention_ctas(int(r)), 1) << "rank " << r;
      EXPECT_LE(f.op->attention_ctas(int(r)), f.env.world.sm_budget(int(r))) << "rank " << r;
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }))
        << "positions are not a permutation of the sequence";
  }
  settle();
}

// Bad arguments are refused with the argument's name, before anything is launched.
TEST_F(SpAttentionTest, RefusesWhatItCannotRun) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2, 8 << 20, 1024);
  const World& world = env.world;
  const uint32_t spr = 300, q_heads = 4, kv_heads = 2, head_dim = 128;
  const size_t row_bytes = size_t(2) * kv_heads * head_dim * 2;
  SymmetricBuffer kv = env.heap.allocate(2 * 304 * row_bytes);  // room for 304 tokens per rank
  DeviceBuffer q(size_t(304) * q_heads * head_dim * 2, world.device(0));
  DeviceBuffer o(size_t(304) * q_heads * head_dim * 2, world.device(0));
  DeviceBuffer lse(size_t(304) * q_heads * sizeof(float), world.device(0));
  SpAttentionArguments good;
  good.q = {q.get(), q.get()};
  good.kv = &kv;
  good.o = {o.get(), o.get()};
  good.lse = {lse.get<float>(), lse.get<float>()};
  good.seq_per_rank = spr;
  good.q_heads = q_heads;
  good.kv_heads = kv_heads;
  good.head_dim = head_dim;
  good.causal = true;
  ASSERT_EQ(SpAttention::can_implement(world, env.heap, good), "");

  auto refused = [&](const SpAttentionArguments& a, const std::string& needle) {
    expect_refused<SpAttention>(env, a, needle);
  };
  SpAttentionArguments a = good;
  a.head_dim = 96;
  refused(a, "'head_dim' = 96");
  a = good;
  a.q_heads = 3;
  refused(a, "'q_heads' = 3");
  a = good;
  a.config.section_kv_heads = 3;
  refused(a, "'config.section_kv_heads' = 3");
  a = good;
  a.kv_heads = 3;
  refused(a, "'q_heads' = 4");
  a = good;
  a.kv_heads = 0;
  refused(a, "'kv_heads' = 0");
  a = good;
  a.config.layout = SeqLayout::kZigZag;
  a.seq_per_rank = 301;
  refused(a, "'seq_per_rank' = 301");
  a = good;
  a.seq_per_rank = 0;
  refused(a, "'seq_per_rank' = 0");
  a = good;
  a.config.comm.comm_rows = 100;  // not a multiple of the 128-token key tile, less than a shard
  refused(a, "'config.comm.comm_rows' = 100");
  a = good;
  a.config.comm.resource = CommResource::kSm;
  a.config.comm.comm_rows = 100;
  refused(a, "'config.comm.comm_rows' = 100");
  a = good;
  a.q = {q.get()};
  refused(a, "'q' has 1 pointers");
  a = good;
  a.o[1] = nullptr;
  refused(a, "'o[1]' = nullptr");
  a = good;
  a.lse[0] = lse.get<float>() + 1;
  refused(a, "'lse[0]'");
  a = good;
  a.kv = nullptr;
  refused(a, "'kv' = nullptr");
  a = good;
  a.seq_per_rank = 400;  // the buffer holds 2 x 304 tokens
  refused(a, "'kv' holds");
  a = good;
  a.kv_offset = 8;
  refused(a, "'kv' offset = 8");
  a = good;
  a.config.comm = {CommResource::kSm,
                   AgMethod::kPull,
                   DataPath::kLdSt,
                   CommOrder::kFullMesh,
                   128,
                   static_cast<uint32_t>(world.sm_budget(0)),
                   512};
  refused(a, "'config.attention_sms'");
  if (world.mode() == WorldMode::kVirtual) {  // both ranks' whole budgets: no SM left for the copies
    a = good;
    a.config.attention_sms = static_cast<uint32_t>(world.sm_budget(0));
    refused(a, "'config.attention_sms'");
  }

  // Accepted: chunks of whole key tiles, or at least a shard long.
  for (uint32_t rows : {128u, 256u, 300u, 330u, 384u}) {
    a = good;
    a.config.comm.comm_rows = rows;
    EXPECT_EQ(SpAttention::can_implement(world, env.heap, a), "") << "comm_rows " << rows;
  }
  a = good;
  a.config.layout = SeqLayout::kZigZag;
  a.head_dim = 64;
  a.kv_heads = 1;
  EXPECT_EQ(SpAttention::can_implement(world, env.heap, a), "");
  settle();
}

}  // namespace tilelink::test::sp_attention
