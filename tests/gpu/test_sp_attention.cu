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

#include <random>
#include <string>
#include <vector>

#include "sp_attention_fixture.cuh"

namespace tilelink::test::sp_attention {

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

// "method": run() by SpAttentionConfig::method (issue 21): the non-overlapped chain and the ring
// as the op's own paths, at odd worlds too, calls repeated on fresh inputs.
std::vector<Case> method_cases() {
  std::vector<Case> cases;
  for (int world : {1, 2, 3, 4, 8}) {
    for (OpMethod method : {OpMethod::kNonOverlapped, OpMethod::kDecomposed}) {
      Case c = make_case(std::string("method_") + to_string(method) + "_world" + std::to_string(world), world,
                         grid_spr(world), 4, 2, 128, true, kZig, kCe, {kF, kF, kF});
      c.method = method;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto* list :
       {&grid_cases, &modes_cases, &shape_cases, &long_cases, &local_cases, &section_cases, &method_cases}) {
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

  using A = SpAttentionArguments;
  std::vector<Refusal<A>> refusals = {
      {[](A& a) { a.head_dim = 96; }, "'head_dim' = 96"},
      {[](A& a) { a.q_heads = 3; }, "'q_heads' = 3"},
      {[](A& a) { a.config.section_kv_heads = 3; }, "'config.section_kv_heads' = 3"},
      {[](A& a) { a.kv_heads = 3; }, "'q_heads' = 4"},
      {[](A& a) { a.kv_heads = 0; }, "'kv_heads' = 0"},
      {[](A& a) {
         a.config.layout = SeqLayout::kZigZag;
         a.seq_per_rank = 301;
       },
       "'seq_per_rank' = 301"},
      {[](A& a) { a.seq_per_rank = 0; }, "'seq_per_rank' = 0"},
      // Not a multiple of the 128-token key tile, less than a shard.
      {[](A& a) { a.config.comm.comm_rows = 100; }, "'config.comm.comm_rows' = 100"},
      {[](A& a) {
         a.config.comm.resource = CommResource::kSm;
         a.config.comm.comm_rows = 100;
       },
       "'config.comm.comm_rows' = 100"},
      {[&](A& a) { a.q = {q.get()}; }, "'q' has 1 pointers"},
      {[](A& a) { a.o[1] = nullptr; }, "'o[1]' = nullptr"},
      {[&](A& a) { a.lse[0] = lse.get<float>() + 1; }, "'lse[0]'"},
      {[](A& a) { a.kv = nullptr; }, "'kv' = nullptr"},
      {[](A& a) { a.seq_per_rank = 400; }, "'kv' holds"},  // the buffer holds 2 x 304 tokens
      {[](A& a) { a.kv_offset = 8; }, "'kv' offset = 8"},
      {[&](A& a) {
         a.config.comm = {CommResource::kSm,
                          AgMethod::kPull,
                          DataPath::kLdSt,
                          CommOrder::kFullMesh,
                          128,
                          static_cast<uint32_t>(world.sm_budget(0)),
                          512};
       },
       "'config.attention_sms'"},
  };
  if (world.mode() == WorldMode::kVirtual) {  // both ranks' whole budgets: no SM left for the copies
    refusals.push_back({[&](A& a) { a.config.attention_sms = static_cast<uint32_t>(world.sm_budget(0)); },
                        "'config.attention_sms'"});
  }
  expect_refusals<SpAttention>(env, good, refusals);

  // Accepted: chunks of whole key tiles, or at least a shard long.
  SpAttentionArguments a = good;
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
