// The SP attention protocol on the CPU executor, checked against the attention reference (protocol_runners.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"
#include "collective_runners.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/testing/attention_reference.hpp"
#include "tilelink/testing/sp_attention_naive_blocks.hpp"

namespace tilelink::test {

// ---- SP attention (ops/attention/sp_attention_protocol.hpp) -------------------------------------------

struct SpCase {
  int world;
  uint32_t seq_per_rank, comm_rows, bq, q_heads, kv_heads, head_dim;
  bool causal;
  SeqLayout layout;
  AgMethod method;
  CommOrder order;
  bool copy_engine;
  uint32_t pitch_pad = 0;  // bytes between gathered K/V rows beyond the row itself
  bool local_first = false;
  uint32_t section_kv_heads = 0;
  uint32_t comm_blocks = 2;  // SM all-gather blocks per rank
};

inline std::string describe(const SpCase& c) {
  return "world " + std::to_string(c.world) + (c.causal ? " causal" : " full") +
         (c.layout == SeqLayout::kZigZag ? " zigzag" : " contiguous") + (c.copy_engine ? " ce" : "") +
         (c.method == AgMethod::kPull ? " pull" : " push") + (c.order == CommOrder::kRing ? " ring" : " mesh") +
         " seq/rank " + std::to_string(c.seq_per_rank) + " comm_rows " + std::to_string(c.comm_rows) + " bq " +
         std::to_string(c.bq) + " heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + " d " +
         std::to_string(c.head_dim) + (c.pitch_pad ? " pitch pad " + std::to_string(c.pitch_pad) : "") +
         (c.local_first ? " local pass first" : "") +
         (c.section_kv_heads ? " sections of " + std::to_string(c.section_kv_heads) + " kv heads" : "");
}

inline SpAttentionPlan make_plan(const SpCase& c) {
  SpAttentionPlan p{.ag = all_gather_plan(c.world, c.seq_per_rank, c.comm_rows, 0, c.method, c.order),
                    .q_heads = c.q_heads,
                    .kv_heads = c.kv_heads,
                    .head_dim = c.head_dim,
                    .bq = c.bq,
                    .causal = c.causal,
                    .layout = c.layout,
                    .local_first = c.local_first,
                    .section_kv_heads = c.section_kv_heads};
  // K/V rows of the heads' floats, pitch_pad bytes apart.
  p.ag.row_bytes = p.kv_row_elems() * 4;
  p.ag.pitch = p.ag.row_bytes + c.pitch_pad;
  return p;
}

struct Wait {
  uint32_t channel;
  uint32_t count;
  int32_t tile;
};

// The attention blocks' context: a BlockCtx that logs the consumer waits it completes.
class LoggingCtx {
 public:
  LoggingCtx(cpu::BlockCtx& ctx, std::vector<Wait>& log) : ctx_(ctx), log_(log) {}
  int rank() const { return ctx_.rank(); }
  int world() const { return ctx_.world(); }
  uint32_t block() const { return ctx_.block(); }
  uint32_t num_blocks() const { return ctx_.num_blocks(); }
  Lanes lanes() const { return ctx_.lanes(); }
  void sync() { ctx_.sync(); }
  void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count = 1, uint32_t arrivals = 1,
                          int32_t tile = -1) {
    ctx_.consumer_tile_wait(sig, channel, count, arrivals, tile);
    log_.push_back({channel, count, tile});
  }

 private:
  cpu::BlockCtx& ctx_;
  std::vector<Wait>& log_;
};

// The slice channels an item's block must wait on, in order, worked out from the definitions: all
// chunks, sorted (stably) by the all-gather step that delivers them; under the causal mask only
// those holding a key that some query of the block can see.
inline std::vector<uint32_t> expected_waits(const SpAttentionPlan& p, uint32_t rank, uint32_t item) {
  std::vector<uint32_t> chunks(p.num_kv_chunks());
  for (uint32_t ch = 0; ch < chunks.size(); ++ch) chunks[ch] = ch;
  std::stable_sort(chunks.begin(), chunks.end(), [&](uint32_t a, uint32_t b) {
    const RowRange ra = p.ag.map.rows_of_channel(a), rb = p.ag.map.rows_of_channel(b);
    return arrival_step(p.ag, rank, ra.row0, ra.rows) < arrival_step(p.ag, rank, rb.row0, rb.rows);
  });
  const RowRange q = p.q_rows(p.item(item).q_block);
  std::vector<uint32_t> waits;
  for (uint32_t ch : chunks) {
    const RowRange keys = p.ag.map.rows_of_channel(ch);
    bool seen = !p.causal;
    for (uint32_t i = q.row0; i < q.row0 + q.rows && !seen; ++i) {
      for (uint32_t g = keys.row0; g < keys.row0 + keys.rows && !seen; ++g) {
        seen = p.kv_position(g) <= p.position(rank, i);
      }
    }
    if (seen) waits.push_back(p.ag.tile_channel(ch));
  }
  return waits;
}

inline std::string join(const std::vector<uint32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + "}";
}

inline bool within_tolerance(float got, float want) { return std::fabs(got - want) <= 1e-4f * std::fabs(want) + 1e-5f; }

// Runs `calls` consecutive calls with fresh Q, K, V each; returns "" or the first mismatch.
inline std::string run_sp_attention(const SpCase& c, uint64_t seed, int calls) {
  const SpAttentionPlan p = make_plan(c);
  if (std::string e = check_sp_attention_plan(p, 4); !e.empty()) return describe(c) + ": " + e;
  const uint32_t w = p.world(), spr = p.seq_per_rank(), seq = p.seq_len(), d = p.head_dim;
  const size_t q_elems = size_t(spr) * p.q_heads * d;
  constexpr uint32_t kAttentionBlocks = 3;

  cpu::Executor ex(c.world, 16 << 20, p.ag.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("sp_attention");
  const size_t kv_off = ex.allocate(size_t(seq) * p.ag.pitch);
  const size_t q_off = ex.allocate(q_elems * 4);
  const size_t o_off = ex.allocate(q_elems * 4);
  const size_t lse_off = ex.allocate(size_t(p.q_heads) * spr * 4);
  const size_t ml_off = ex.allocate(size_t(2) * p.q_heads * spr * 4);

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    // The whole sequence in position order; each rank gets its tokens' Q in its local rows and its
    // tokens' K/V rows in place in the gathered buffer, every other K/V row poisoned.
    const std::vector<float> q = random_floats(rng, size_t(seq) * p.q_heads * d);
    const std::vector<float> k = random_floats(rng, size_t(seq) * p.kv_heads * d);
    const std::vector<float> v = random_floats(rng, size_t(seq) * p.kv_heads * d);
    const size_t k_bytes = size_t(p.kv_heads) * d * 4;
    for (uint32_t r = 0; r < w; ++r) {
      std::memset(ex.at<char>(r, kv_off), kPoison, size_t(seq) * p.ag.pitch);
      std::memset(ex.at<char>(r, o_off), kPoison, q_elems * 4);
      std::memset(ex.at<char>(r, lse_off), kPoison, size_t(p.q_heads) * spr * 4);
      std::memset(ex.at<char>(r, ml_off), kPoison, size_t(2) * p.q_heads * spr * 4);
      for (uint32_t i = 0; i < spr; ++i) {
        const uint32_t pos = p.position(r, i);
        std::memcpy(ex.at<float>(r, q_off) + size_t(i) * p.q_heads * d, q.data() + size_t(pos) * p.q_heads * d,
                    size_t(p.q_heads) * d * 4);
        char* row = ex.at<char>(r, kv_off) + (size_t(r) * spr + i) * p.ag.pitch;
        std::memcpy(row, k.data() + size_t(pos) * p.kv_heads * d, k_bytes);
        std::memcpy(row + k_bytes, v.data() + size_t(pos) * p.kv_heads * d, k_bytes);
      }
    }
    std::vector<std::vector<Wait>> logs(size_t(w) * kAttentionBlocks);
    const uint64_t epoch = static_cast<uint64_t>(call);
    auto sig = [&](int r) { return ex.signals(r, 0, p.ag.num_channels(), epoch, op); };
    std::vector<cpu::Role> roles;
    if (c.copy_engine) {
      roles.push_back({"copy_engine", 1, [&](cpu::BlockCtx& ctx) {
                         all_gather_stream(ctx, p.ag, sig(ctx.rank()), ex.heap(ctx.rank()),
                                           ex.at<char>(ctx.rank(), kv_off));
                       }});
    } else {
      roles.push_back({"comm", c.comm_blocks, [&](cpu::BlockCtx& ctx) {
                         all_gather_block(ctx, p.ag, sig(ctx.rank()), ex.heap(ctx.rank()),
                                          ex.at<char>(ctx.rank(), kv_off));
                       }});
    }
    roles.push_back({"attention", kAttentionBlocks, [&](cpu::BlockCtx& ctx) {
                       const int r = ctx.rank();
                       LoggingCtx logged(ctx, logs[size_t(r) * kAttentionBlocks + ctx.block()]);
                       sp_attention_block(logged, p, sig(r), ex.at<float>(r, q_off), ex.at<char>(r, kv_off),
                                          ex.at<float>(r, o_off), ex.at<float>(r, lse_off), ex.at<float>(r, ml_off));
                     }});
    ex.run(roles);

    std::vector<float> o_ref(q.size()), lse_ref(size_t(p.q_heads) * seq);
    attention_reference({seq, p.q_heads, p.kv_heads, d, p.causal}, q.data(), k.data(), v.data(), o_ref.data(),
                        lse_ref.data());
    const std::string at = describe(c) + ": call " + std::to_string(call) + ", rank ";
    for (uint32_t r = 0; r < w; ++r) {
      for (uint32_t h = 0; h < p.q_heads; ++h) {
        for (uint32_t i = 0; i < spr; ++i) {
          const uint32_t pos = p.position(r, i);
          const std::string where = at + std::to_string(r) + " head " + std::to_string(h) + " row " +
                                    std::to_string(i) + " (position " + std::to_string(pos) + ")";
          const float got_lse = ex.at<float>(r, lse_off)[size_t(h) * spr + i];
          const float want_lse = lse_ref[size_t(h) * seq + pos];
          if (!within_tolerance(got_lse, want_lse)) {
            return where + ": LSE " + std::to_string(got_lse) + ", expected " + std::to_string(want_lse);
          }
          for (uint32_t e = 0; e < d; ++e) {
            const float got = ex.at<float>(r, o_off)[(size_t(i) * p.q_heads + h) * d + e];
            const float want = o_ref[(size_t(pos) * p.q_heads + h) * d + e];
            if (!within_tolerance(got, want)) {
              return where + ": O[" + std::to_string(e) + "] " + std::to_string(got) + ", expected " +
                     std::to_string(want);
            }
          }
        }
      }
      if (p.local_first) {  // a block reads its own shard for every item before any remote chunk
        std::vector<uint32_t> own;
        for (uint32_t c = 0; c < p.ag.map.chunks_per_rank(); ++c) own.push_back(p.ag.tile_channel(p.ag.map.channel(r, c)));
        for (uint32_t b = 0; b < kAttentionBlocks; ++b) {
          bool remote = false;
          for (const Wait& wt : logs[size_t(r) * kAttentionBlocks + b]) {
            const bool is_own = std::find(own.begin(), own.end(), wt.channel) != own.end();
            if (is_own && remote) {
              return at + std::to_string(r) + " block " + std::to_string(b) + ": own chunk " +
                     std::to_string(wt.channel) + " read after a remote one";
            }
            remote = remote || !is_own;
          }
        }
      }
      for (uint32_t item = 0; item < p.num_items(); ++item) {
        std::vector<uint32_t> got;
        for (const Wait& wt : logs[size_t(r) * kAttentionBlocks + item % kAttentionBlocks]) {
          if (wt.tile != int32_t(item)) continue;
          if (wt.count != 1) return at + std::to_string(r) + " item " + std::to_string(item) + ": a multi-chunk wait";
          got.push_back(wt.channel);
        }
        const std::vector<uint32_t> want = expected_waits(p, r, item);
        if (got != want) {
          return at + std::to_string(r) + " item " + std::to_string(item) + " waited on channels " + join(got) +
                 ", expected " + join(want);
        }
      }
    }
  }
  return "";
}

}  // namespace tilelink::test
