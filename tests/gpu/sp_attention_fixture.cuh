// The SP attention GPU test's fixture (test_sp_attention.cu): a case (world, shape, mask, layout,
// configuration), the op with its inputs and poisoned outputs, the run modes, and the check of
// every output against the reference.
#pragma once

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
  OpMethod method = OpMethod::kFused;  // SpAttentionConfig::method: what Mode::kFused's run() runs
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "world " << c.world << ", seq/rank " << c.spr << ", heads " << c.q_heads << "/" << c.kv_heads << ", d "
    << c.head_dim << (c.causal ? ", causal" : ", full")
    << (c.layout == SeqLayout::kZigZag ? ", zig-zag" : ", contiguous")
    << (c.resource == CommResource::kSm ? ", sm" : ", copy engine") << ", comm_rows " << c.comm_rows << ", kv_offset "
    << c.kv_offset << (c.local_first ? ", local pass first" : "")
    << (c.section_kv_heads ? ", sections of " + std::to_string(c.section_kv_heads) + " kv heads" : "")
    << (c.method != OpMethod::kFused ? std::string(", run() by method ") + to_string(c.method) : "");
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

// cudaMemset on the memory's own device, then settle() (as poison() does).
void fill_bytes(void* p, int value, size_t bytes) {
  cudaPointerAttributes attributes{};
  TL_CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
  int current = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  TL_CUDA_CHECK(cudaSetDevice(attributes.type == cudaMemoryTypeDevice ? attributes.device : current));
  TL_CUDA_CHECK(cudaMemset(p, value, bytes));
  TL_CUDA_CHECK(cudaSetDevice(current));
  settle();
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
    args.config.method = c.method;
    EXPECT_EQ(SpAttention::can_implement(world, env.heap, args), "");
    op = std::make_unique<SpAttention>(world, env.heap, env.signals, args, "sp_attention_test");
    EXPECT_EQ(op->method(), c.method);
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
  const AttentionShape shape{f.seq_len, H, c.kv_heads, d, c.causal};
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

}  // namespace tilelink::test::sp_attention
