#include "tilelink/tune/sp_attention_tune.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/sim/sp_attention_sim.hpp"

namespace tilelink {
namespace {

constexpr uint32_t kKeyTile = 128;  // the kernel's key tile: chunks are whole multiples of it

bool same_schedule(const SpAttentionConfig& a, const SpAttentionConfig& b) {
  return same_comm(a.comm, b.comm) && a.local_first == b.local_first;
}

double predict_us(const SpAttentionConfig& c, const SpAttentionTuneShape& s, const sim::CostModel& gpu) {
  const sim::SpAttentionProblem& p = s.problem;
  const uint32_t spr = p.seq / static_cast<uint32_t>(p.world);
  sim::SpAttentionPlanConfig q;
  q.op = c;
  q.op.comm = all_gather_policy::resolved(c.comm, spr, 2 * p.kv_heads * p.head_dim, s.sm_budget);
  q.op.layout = s.layout;
  // The model runs the rank on its budget's SMs; its rate is the GPU's times that share.
  q.attention_flops = q.attention_flops * s.sm_budget / gpu.sms;
  return sim::predict_sp_attention(p, q, gpu.share(s.sm_budget)).fused * 1e6;
}

}  // namespace

std::vector<SpAttentionConfig> sp_attention_compute_candidates(uint32_t kv_heads, SeqLayout layout) {
  TL_REQUIRE(kv_heads >= 1, "sp_attention_compute_candidates", "kv_heads", kv_heads, ">= 1");
  SpAttentionConfig automatic;
  automatic.use_tune_cache = false;
  automatic.layout = layout;
  std::vector<SpAttentionConfig> out{automatic};
  for (uint32_t h = 1; h <= kv_heads; ++h) {
    if (kv_heads % h != 0) continue;
    SpAttentionConfig c = automatic;
    c.section_kv_heads = h;
    out.push_back(c);
  }
  // The op's methods (issue 21), timed like any candidate (the ring is refused, so skipped, on a
  // process world): where one wins, the cache stores it and the automatic method runs it.
  for (OpMethod m : {OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped}) {
    SpAttentionConfig c = automatic;
    c.method = m;
    out.push_back(c);
  }
  return out;
}

std::vector<RankedSpAttentionConfig> sp_attention_comm_candidates(const SpAttentionConfig& base,
                                                                  const SpAttentionTuneShape& shape, size_t top,
                                                                  const sim::CostModel& gpu) {
  TL_REQUIRE(top >= 1, "sp_attention_comm_candidates", "top", top, ">= 1");
  const sim::SpAttentionProblem& problem = shape.problem;
  TL_REQUIRE(problem.world >= 1 && problem.seq % static_cast<uint32_t>(problem.world) == 0,
             "sp_attention_comm_candidates", "seq", problem.seq, "a multiple of the world size");
  const RankedSpAttentionConfig auto_ranked = detail::ranked_automatic(
      base, problem.world,
      [](SpAttentionConfig& c) {
        c.comm = SpAttentionConfig{}.comm;
        c.local_first = false;
      },
      [&](const SpAttentionConfig& c) { return predict_us(c, shape, gpu); });
  if (problem.world == 1) return {auto_ranked};
  const uint32_t spr = problem.seq / static_cast<uint32_t>(problem.world);

  std::vector<RankedSpAttentionConfig> all;
  auto add = [&](const AllGatherConfig& comm) {
    // The op takes chunks of whole key tiles, or the whole shard.
    if (comm.comm_rows > spr || (comm.comm_rows % kKeyTile != 0 && comm.comm_rows != spr)) return;
    for (bool local_first : {false, true}) {
      SpAttentionConfig c = base;
      c.comm = comm;
      c.local_first = local_first;
      all.push_back({c, predict_us(c, shape, gpu)});
    }
  };
  add(SpAttentionConfig{}.comm);
  for (uint32_t rows : {512u, 1024u, 2048u, 4096u}) {
    add({CommResource::kCopyEngine, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, rows, 0, 512});
  }
  const uint32_t more_blocks = static_cast<uint32_t>(std::max(2, shape.sm_budget / 4));
  for (uint32_t rows : {128u, 256u, 512u}) {
    for (uint32_t blocks : {0u, more_blocks}) {
      add({CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, rows, blocks, 512});
    }
  }
  return detail::keep_top(std::move(all), top, auto_ranked, same_schedule);
}

}  // namespace tilelink
