// The process suite's SP attention (tests/process/test_process.cu says how the suite runs).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../gpu/attention_ref.cuh"
#include "../gpu/gpu_test_util.hpp"
#include "process_env.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"

namespace tilelink::test::process {
namespace {

// SP attention over processes: every process draws every rank's Q/K/V from the shared seed, puts its
// own K/V rows in the symmetric buffer, and checks its own O and LSE (all rows, all heads) against the
// GPU reference over the whole sequence; Q/O/LSE re-pointed between calls (set_operands), outputs
// poisoned, the peers' K/V rows poisoned in this rank's buffer.
struct SpCase {
  const char* name;
  bool causal;
  SeqLayout layout;
  CommResource resource;
};

class ProcessSpAttention : public ::testing::TestWithParam<SpCase> {};

TEST_P(ProcessSpAttention, MatchesTheReferenceOverTheWholeSequence) {
  const SpCase sc = GetParam();
  const int w = world().size();
  const uint32_t spr = 128, q_heads = 4, kv_heads = 2, d = 64, seq = spr * uint32_t(w);
  const size_t row_elems = 2 * size_t(kv_heads) * d, q_elems = size_t(spr) * q_heads * d;
  const size_t kv_bytes = size_t(seq) * row_elems * 2, shard_bytes = size_t(spr) * row_elems * 2;
  SymmetricHeap heap(world(), kv_bytes + (4 << 20));
  SignalSet signals(heap, 4096);
  SymmetricBuffer kv = heap.allocate(kv_bytes);
  const int dev = world().device(me());
  DeviceBuffer qs[2] = {DeviceBuffer(q_elems * 2, dev), DeviceBuffer(q_elems * 2, dev)};
  DeviceBuffer os[2] = {DeviceBuffer(q_elems * 2, dev), DeviceBuffer(q_elems * 2, dev)};
  DeviceBuffer lses[2] = {DeviceBuffer(size_t(q_heads) * spr * 4, dev), DeviceBuffer(size_t(q_heads) * spr * 4, dev)};
  SpAttentionArguments args;
  args.kv = &kv;
  args.seq_per_rank = spr;
  args.q_heads = q_heads;
  args.kv_heads = kv_heads;
  args.head_dim = d;
  args.causal = sc.causal;
  args.config.layout = sc.layout;
  args.config.comm.resource = sc.resource;
  args.q.assign(w, nullptr);  // other processes' entries are not read
  args.o.assign(w, nullptr);
  args.lse.assign(w, nullptr);
  args.q[me()] = qs[0].get();
  args.o[me()] = os[0].get();
  args.lse[me()] = lses[0].get<float>();
  ASSERT_EQ(SpAttention::can_implement(world(), heap, args), "");
  SpAttention op(world(), heap, signals, args, std::string("process_sp_attention_") + sc.name);
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    DeviceBuffer &q = qs[(call - 1) % 2], &o = os[(call - 1) % 2], &lse = lses[(call - 1) % 2];
    op.set_operands(me(), q.get(), o.get(), lse.get<float>());
    // Every rank's Q and K/V rows, the same in every process.
    std::vector<std::vector<__nv_bfloat16>> q_host(w), kv_host(w);
    for (int r = 0; r < w; ++r) {
      auto rng = shared_rng(200 + r, call);
      q_host[r] = random_bf16(q_elems, rng);
      kv_host[r] = random_bf16(size_t(spr) * row_elems, rng);
    }
    char* mine = static_cast<char*>(kv.data(me()));
    poison(mine, kv_bytes);  // peers' rows stay poison unless gathered
    upload(mine + size_t(me()) * shard_bytes, kv_host[me()].data(), shard_bytes);
    upload(q.get(), q_host[me()].data(), q_elems * 2);
    poison(o.get(), o.bytes());
    poison(lse.get(), lse.bytes());
    op.run();
    world().synchronize();
    // The reference: the whole sequence's K/V in position order, this rank's queries.
    std::vector<__nv_bfloat16> kv_seq(size_t(seq) * row_elems);
    for (int r = 0; r < w; ++r) {
      for (uint32_t i = 0; i < spr; ++i) {
        const uint32_t pos = attention_ref::token_position(sc.layout, uint32_t(w), spr, uint32_t(r), i);
        std::copy_n(kv_host[r].data() + size_t(i) * row_elems, row_elems, kv_seq.data() + size_t(pos) * row_elems);
      }
    }
    std::vector<attention_ref::Query> queries;
    for (uint32_t i = 0; i < spr; ++i) {
      const uint32_t pos = attention_ref::token_position(sc.layout, uint32_t(w), spr, uint32_t(me()), i);
      for (uint32_t h = 0; h < q_heads; ++h) queries.push_back({i, pos, h});
    }
    std::vector<float> o_ref, lse_ref;
    attention_ref::reference_attention(dev, AttentionShape{seq, q_heads, kv_heads, d, sc.causal}, q_host[me()], kv_seq,
                                       queries, o_ref, lse_ref);
    const auto o_got = download<__nv_bfloat16>(o.get(), q_elems);
    const auto lse_got = download<float>(lse.get(), size_t(q_heads) * spr);
    size_t o_bad = 0, lse_bad = 0;
    std::string first;
    for (size_t qi = 0; qi < queries.size(); ++qi) {
      const uint32_t row = queries[qi].token, h = queries[qi].head;
      for (uint32_t e = 0; e < d; ++e) {
        const double got = __bfloat162float(o_got[(size_t(row) * q_heads + h) * d + e]), want = o_ref[qi * d + e];
        if (!(std::fabs(got - want) <= 2e-2 + 2e-2 * std::fabs(want)) && o_bad++ == 0) {
          first = "O row " + std::to_string(row) + " head " + std::to_string(h) + " col " + std::to_string(e) +
                  ": got " + std::to_string(got) + ", reference " + std::to_string(want);
        }
      }
      const double got = lse_got[size_t(h) * spr + row], want = lse_ref[qi];
      if (!(std::fabs(got - want) <= 1e-3 + 1e-3 * std::fabs(want)) && lse_bad++ == 0 && first.empty()) {
        first = "LSE row " + std::to_string(row) + " head " + std::to_string(h) + ": got " + std::to_string(got) +
                ", reference " + std::to_string(want);
      }
    }
    EXPECT_EQ(o_bad + lse_bad, 0u) << "rank " << me() << ": " << o_bad << " O elements and " << lse_bad
                                   << " LSE values off; first: " << first;
  }
  EXPECT_TRUE(throws_invalid_argument([&] { op.run_ring(); }, "process world"));
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessSpAttention,
                         ::testing::Values(SpCase{"causal_zigzag_sm", true, SeqLayout::kZigZag, CommResource::kSm},
                                           SpCase{"causal_zigzag_ce", true, SeqLayout::kZigZag, CommResource::kCopyEngine},
                                           SpCase{"full_contiguous_ce", false, SeqLayout::kContiguous,
                                                  CommResource::kCopyEngine}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tilelink::test::process
