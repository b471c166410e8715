// MoE part 1 (mapping, gather, grouped GEMM) and part 2 (combine, reduce-scatter) on the CPU executor (protocol_runners.hpp).
#pragma once

#include <algorithm>
#include <atomic>
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
#include "tilelink/ops/moe/moe_gather_protocol.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/sim/synthetic_routing.hpp"
#include "tilelink/testing/moe_naive_blocks.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink::test {

// ---- MoE part 1 (moe_mapping.hpp) and part 2 (moe_rs_protocol.hpp) -----------------------------------

struct MoeCase {
  int world;
  uint32_t tokens_per_rank, k, n, experts, topk, bm, comm_rows;
  SyntheticRouting routing;
  // Part 1's all-gather of the tokens (a full-mesh pull unless told) and the roles' blocks per rank.
  AgMethod method = AgMethod::kPull;
  CommOrder order = CommOrder::kFullMesh;
  bool copy_engine = false;
  uint32_t comm_blocks = 2, gather_blocks = 2, combine_blocks = 3;
  // Part 1: every gather block but the first starts only once the grouped GEMM is done (a gather
  // CTA that is never scheduled beside the GEMM's spinning CTAs): the first must gather every tile.
  bool late_gather_blocks = false;
  // Part 2: combine blocks beside the GEMM, or the GEMM blocks' epilogue (then combine_blocks
  // reduction blocks, running beside the GEMM: they must wait for every part they sum).
  MoeCombine combine = MoeCombine::kBlocks;
  // Part 2, combine blocks: the put-with-signal transport's staged combine (moe_staged_put).
  bool staged = false;
};

inline std::string describe(const MoeCase& c) {
  return "world " + std::to_string(c.world) + " tokens/rank " + std::to_string(c.tokens_per_rank) + " experts " +
         std::to_string(c.experts) + " topk " + std::to_string(c.topk) + " bm " + std::to_string(c.bm) + " " +
         to_string(c.routing);
}

// The tables' invariants, against the routing.
inline std::string check_mapping(const MoeMapping& m, const std::vector<int32_t>& ids, uint32_t tokens) {
  std::vector<int> seen(size_t(tokens) * m.topk, 0);
  for (uint32_t e = 0; e < m.experts; ++e) {
    if (m.row_offset[e] % m.bm != 0) return "row_offset[" + std::to_string(e) + "] not a multiple of bm";
    uint32_t prev_token = 0;
    bool padding = false;
    for (uint32_t row = m.row_offset[e]; row < m.row_offset[e + 1]; ++row) {
      const uint32_t pair = m.row_pair[row];
      if (pair == kPadRow) {
        padding = true;
        continue;
      }
      if (padding) return "row " + std::to_string(row) + ": a pair after padding";
      if (uint32_t(ids[pair]) != e) return "row " + std::to_string(row) + ": pair of another expert";
      if (pair / m.topk < prev_token) return "row " + std::to_string(row) + ": tokens out of order";
      prev_token = pair / m.topk;
      ++seen[pair];
    }
    if (m.row_offset[e + 1] - m.row_offset[e] >= m.bm + uint32_t(std::count(ids.begin(), ids.end(), int32_t(e)))) {
      return "expert " + std::to_string(e) + ": more than one tile of padding";
    }
  }
  for (size_t p = 0; p < seen.size(); ++p) {
    if (seen[p] != 1) return "pair " + std::to_string(p) + " placed " + std::to_string(seen[p]) + " times";
  }
  for (uint32_t t = 0; t < m.num_tiles(); ++t) {
    for (uint32_t row = t * m.bm; row < (t + 1) * m.bm; ++row) {
      if (m.row_pair[row] == kPadRow) continue;
      const uint32_t token = m.row_pair[row] / m.topk;
      if (token < m.tile_token0[t] || token >= m.tile_token0[t] + m.tile_span[t]) {
        return "tile " + std::to_string(t) + ": token " + std::to_string(token) + " outside its span";
      }
      if (uint32_t(ids[m.row_pair[row]]) != m.tile_expert[t]) return "tile " + std::to_string(t) + ": mixed experts";
    }
  }
  return "";
}

inline std::string run_moe(const MoeCase& c, uint64_t seed, int calls) {
  const uint32_t w = static_cast<uint32_t>(c.world);
  const uint32_t tokens = w * c.tokens_per_rank;
  const AllGatherPlan ag = all_gather_plan(c.world, c.tokens_per_rank, c.comm_rows, c.k * 4, c.method, c.order);

  // Room for the padded rows of any routing: every expert may pad up to bm - 1 rows.
  const uint32_t max_rows = tokens * c.topk + c.experts * c.bm;
  const uint32_t max_tiles = max_rows / c.bm;
  cpu::Executor ex(c.world, 64 << 20, ag.num_channels() + max_tiles, stress_options(seed));
  const uint32_t op = ex.register_op("moe_ag_group_gemm");
  const size_t x_off = ex.allocate(size_t(tokens) * ag.pitch);
  const size_t w_off = ex.allocate(size_t(c.experts) * c.k * c.n * 4);
  const size_t out_off = ex.allocate(size_t(max_rows) * c.n * 4);
  const size_t sorted_off = ex.allocate(size_t(max_rows) * ag.pitch);

  std::mt19937_64 rng(seed);
  // Per rank: the gather's work queue, kept across calls -- each call's last draw puts it back to 0.
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));
  for (int call = 1; call <= calls; ++call) {
    const std::vector<int32_t> ids = synthetic_routing(rng, tokens, c.topk, c.experts, c.routing);
    const MoeRouting routing{tokens, c.topk, c.experts, ids.data(), nullptr};
    if (std::string e = check_moe_routing(routing); !e.empty()) return describe(c) + ": " + e;
    const MoeMapping m = build_moe_mapping(routing, c.bm);
    if (std::string e = check_mapping(m, ids, tokens); !e.empty()) return describe(c) + ": " + e;
    if (m.num_tiles() > moe_max_tiles(uint64_t(tokens) * c.topk, c.experts, c.bm)) {
      return describe(c) + ": " + std::to_string(m.num_tiles()) + " tiles, more than moe_max_tiles";
    }
    const MoeMappingView view = m.view();
    std::vector<std::vector<uint32_t>> order(w, std::vector<uint32_t>(m.num_tiles()));
    for (uint32_t r = 0; r < w; ++r) make_moe_tile_order(ag, r, view, order[r].data());

    const std::vector<float> x = random_floats(rng, size_t(tokens) * c.k);
    std::vector<std::vector<float>> weights(w);
    for (uint32_t r = 0; r < w; ++r) {
      weights[r] = random_floats(rng, size_t(c.experts) * c.k * c.n);
      std::memcpy(ex.at<float>(r, w_off), weights[r].data(), weights[r].size() * 4);
      std::memcpy(ex.at<char>(r, x_off) + size_t(r) * c.tokens_per_rank * ag.pitch,
                  x.data() + size_t(r) * c.tokens_per_rank * c.k, size_t(c.tokens_per_rank) * ag.pitch);
      std::memset(ex.at<float>(r, out_off), kPoison, size_t(max_rows) * c.n * 4);
      std::memset(ex.at<float>(r, sorted_off), kPoison, size_t(max_rows) * ag.pitch);
    }
    const uint64_t epoch = static_cast<uint64_t>(call);
    std::vector<std::atomic<uint32_t>> gemm_done(static_cast<size_t>(c.world));  // per rank: GEMM blocks finished
    for (auto& n : gemm_done) n = 0;
    constexpr uint32_t kGemmBlocks = 3;
    auto ag_sig = [&](int r) { return ex.signals(r, 0, ag.num_channels(), epoch, op); };
    auto gather_sig = [&](int r) { return ex.signals(r, ag.num_channels(), max_tiles, epoch, op); };
    ex.run({{"comm", c.copy_engine ? 1u : c.comm_blocks,
             [&](cpu::BlockCtx& ctx) {
               if (c.copy_engine) {
                 all_gather_stream(ctx, ag, ag_sig(ctx.rank()), ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), x_off));
               } else {
                 all_gather_block(ctx, ag, ag_sig(ctx.rank()), ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), x_off));
               }
             }},
            {"gather", c.gather_blocks,
             [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               if (c.late_gather_blocks && ctx.block() > 0) {
                 hold_until([&] { return gemm_done[static_cast<size_t>(r)].load() >= kGemmBlocks; });
               }
               moe_gather_block(ctx, ag, ag_sig(r), view, order[r].data(), gather_sig(r), 0,
                                queues[static_cast<size_t>(r)],
                                [&](uint32_t t) {
                                  moe_gather_rows<uint32_t>(ctx.lanes(), ag, view, t, ex.at<char>(r, x_off),
                                                            ex.at<char>(r, sorted_off), c.k * 4);
                                });
             }},
            {"group_gemm", kGemmBlocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               moe_group_gemm_block(ctx, view, order[r].data(), gather_sig(r), 0, ex.at<float>(r, sorted_off), c.k,
                                    ex.at<float>(r, w_off), c.n, ex.at<float>(r, out_off));
               gemm_done[static_cast<size_t>(r)].fetch_add(1);
             }}});

    if (std::string q = check_queues_reset(queues, describe(c) + ": the gather, call " + std::to_string(call));
        !q.empty()) {
      return q;
    }
    for (uint32_t r = 0; r < w; ++r) {
      const float* got = ex.at<float>(r, out_off);
      for (uint32_t row = 0; row < view.rows(); ++row) {
        const uint32_t pair = m.row_pair[row];
        for (uint32_t col = 0; col < c.n; ++col) {
          float want = 0.f;
          if (pair != kPadRow) {
            const uint32_t token = pair / c.topk, e = uint32_t(ids[pair]);
            for (uint32_t kk = 0; kk < c.k; ++kk) {
              want += x[size_t(token) * c.k + kk] * weights[r][(size_t(e) * c.k + kk) * c.n + col];
            }
          }
          const std::string e = float_mismatch(got[size_t(row) * c.n + col], want, [&] {
            return describe(c) + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " row " +
                   std::to_string(row) + " col " + std::to_string(col);
          });
          if (!e.empty()) return e;
        }
      }
    }
  }
  return "";
}

// Part 2: grouped GEMM -> top-k weighted combine -> reduce-scatter to the tokens' owners.
inline std::string run_moe_rs(const MoeCase& c, uint64_t seed, int calls) {
  const uint32_t w = static_cast<uint32_t>(c.world);
  const uint32_t tokens = w * c.tokens_per_rank;
  const uint32_t max_rows = tokens * c.topk + c.experts * c.bm;
  MoeRsPlan plan;
  plan.tokens = RowShardMapping{c.tokens_per_rank, c.comm_rows, w};
  plan.n = c.n;
  plan.bn = 3;  // n tiles do not divide n
  plan.max_tiles = max_rows / c.bm;
  const bool in_epilogue = c.combine == MoeCombine::kEpilogue;
  if (in_epilogue) plan.recv_columns = plan.n_tiles();
  plan.staged = c.staged;
  // The epilogue combine's counters per rank: (token block, column tile) items.
  const uint32_t items = plan.tokens.num_channels() * plan.n_tiles();
  std::vector<std::vector<std::atomic<uint32_t>>> arrived(w);
  for (auto& a : arrived) a = std::vector<std::atomic<uint32_t>>(items);
  std::vector<uint32_t> expected(plan.tokens.num_channels());
  cpu::Executor ex(c.world, 64 << 20, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("moe_group_gemm_rs");
  const size_t h_off = ex.allocate(size_t(max_rows) * c.k * 4);
  const size_t w_off = ex.allocate(size_t(c.experts) * c.k * c.n * 4);
  const size_t y_off = ex.allocate(size_t(max_rows) * c.n * 4);
  const size_t recv_off = ex.allocate(size_t(tokens) * c.n * 4);
  const size_t send_off = ex.allocate(size_t(tokens) * c.n * 4);
  const size_t out_off = ex.allocate(size_t(c.tokens_per_rank) * c.n * 4);

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    const std::vector<int32_t> ids = synthetic_routing(rng, tokens, c.topk, c.experts, c.routing);
    const std::vector<float> weights = random_floats(rng, size_t(tokens) * c.topk);
    const MoeMapping m = build_moe_mapping({tokens, c.topk, c.experts, ids.data(), weights.data()}, c.bm);
    const MoeMappingView view = m.view();
    std::vector<std::vector<float>> h(w), w2(w);
    for (uint32_t r = 0; r < w; ++r) {
      h[r] = random_floats(rng, size_t(view.rows()) * c.k);
      w2[r] = random_floats(rng, size_t(c.experts) * c.k * c.n);
      std::memcpy(ex.at<float>(r, h_off), h[r].data(), h[r].size() * 4);
      std::memcpy(ex.at<float>(r, w_off), w2[r].data(), w2[r].size() * 4);
      std::memset(ex.at<float>(r, y_off), kPoison, size_t(max_rows) * c.n * 4);
      std::memset(ex.at<float>(r, recv_off), kPoison, size_t(tokens) * c.n * 4);
      std::memset(ex.at<float>(r, send_off), kPoison, size_t(tokens) * c.n * 4);
      std::memset(ex.at<float>(r, out_off), kPoison, size_t(c.tokens_per_rank) * c.n * 4);
    }
    const uint64_t epoch = static_cast<uint64_t>(call);
    auto sig = [&](int r) { return ex.signals(r, 0, plan.num_channels(), epoch, op); };
    // The top-k weighted sums of token rows `rows` (global numbering), columns `cols`, into the
    // owner's slot of rank r (the output with no peers).
    auto combine = [&](int r, uint32_t owner, RowRange rows, ColRange cols) {
      const float* y = ex.at<float>(r, y_off);
      // Staged, for a peer: rank r's own `send` at the token's global row.
      float* dst = w == 1 ? ex.at<float>(r, out_off)
                   : c.staged && owner != uint32_t(r)
                       ? ex.at<float>(r, send_off) + size_t(owner) * c.tokens_per_rank * c.n
                       : ex.heap(r).translate(plan.slot(ex.at<float>(r, recv_off), uint32_t(r)), int(owner));
      for (uint32_t t = rows.row0; t < rows.row0 + rows.rows; ++t) {
        for (uint32_t col = cols.col0; col < cols.col0 + cols.cols; ++col) {
          float acc = 0.f;
          for (uint32_t j = 0; j < c.topk; ++j) {
            const size_t pair = size_t(t) * c.topk + j;
            acc += weights[pair] * y[size_t(m.pair_row[pair]) * c.n + col];
          }
          dst[size_t(t - owner * c.tokens_per_rank) * c.n + col] = acc;
        }
      }
    };
    // The rank-order sum of rank r's slots, rows [row0, row0 + rows) of its tokens, columns `cols`.
    auto sum = [&](int r, uint32_t row0, uint32_t rows, ColRange cols) {
      const float* recv = ex.at<float>(r, recv_off);
      float* out = ex.at<float>(r, out_off);
      for (uint32_t row = row0; row < row0 + rows; ++row) {
        for (uint32_t col = cols.col0; col < cols.col0 + cols.cols; ++col) {
          const size_t e = size_t(row) * c.n + col;
          float acc = 0.f;
          for (uint32_t s = 0; s < w; ++s) acc += plan.slot(recv, s)[e];
          out[e] = acc;
        }
      }
    };
    if (in_epilogue) {  // counted once per call before the GEMM, as the op's counting kernel does
      for (uint32_t g = 0; g < expected.size(); ++g) expected[g] = moe_block_tiles(plan, view, view.num_tiles, g);
      for (auto& a : arrived) {
        for (auto& v : a) v.store(0);
      }
    }
    std::vector<cpu::Role> roles;
    if (!in_epilogue) {
      roles.push_back({"group_gemm", 3, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         moe_group_gemm_rs_compute_block(ctx, plan, view, sig(r), ex.at<float>(r, h_off), c.k,
                                                         ex.at<float>(r, w_off), ex.at<float>(r, y_off));
                       }});
      roles.push_back({"combine_reduce", c.combine_blocks, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         moe_combine_reduce_block(
                             ctx, plan, view, m.pair_row.data(), sig(r),
                             [&](uint32_t owner, RowRange rows) { combine(r, owner, rows, ColRange{0, c.n}); },
                             [&](uint32_t, uint32_t row0, uint32_t rows) { sum(r, row0, rows, ColRange{0, c.n}); });
                       }});
      if (c.staged) {  // the rank's stream beside the combine kernel: the staged blocks' puts
        roles.push_back({"staged_put", 1, [&](cpu::BlockCtx& ctx) {
                           const int r = ctx.rank();
                           moe_staged_put(ctx, plan, sig(r), ex.heap(r), ex.at<float>(r, send_off),
                                          ex.at<float>(r, recv_off), 4);
                         }});
      }
    } else {
      roles.push_back({"group_gemm_combine", 3, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         moe_group_gemm_epilogue_combine_block(
                             ctx, plan, view, sig(r), ex.at<float>(r, h_off), c.k, ex.at<float>(r, w_off),
                             ex.at<float>(r, y_off),
                             [&](uint32_t g, uint32_t col_tile) {
                               const uint32_t seen = arrived[size_t(r)][size_t(g) * plan.n_tiles() + col_tile]
                                                         .fetch_add(1, std::memory_order_acq_rel);
                               return seen + 1 == expected[g];
                             },
                             [&](uint32_t owner, RowRange rows, uint32_t col_tile) {
                               combine(r, owner, rows, tile_cols(col_tile, plan.bn, plan.n));
                             });
                       }});
      if (w > 1) {
        roles.push_back({"reduce", c.combine_blocks, [&](cpu::BlockCtx& ctx) {
                           const int r = ctx.rank();
                           moe_reduce_own_blocks(ctx, plan, sig(r), [&](uint32_t row0, uint32_t rows, ColRange cols) {
                             sum(r, row0, rows, cols);
                           });
                         }});
      }
    }
    ex.run(roles);
    if (c.staged && w > 1) {  // after the combine kernel and the puts, on the stream
      ex.run({{"exit_barrier", 1, [&](cpu::BlockCtx& ctx) {
                 rank_exit_barrier_stream(ctx, sig(ctx.rank()), plan.exit_channel());
               }}});
    }

    for (uint32_t q = 0; q < w; ++q) {
      const float* got = ex.at<float>(q, out_off);
      for (uint32_t i = 0; i < c.tokens_per_rank; ++i) {
        const uint32_t token = q * c.tokens_per_rank + i;
        for (uint32_t col = 0; col < c.n; ++col) {
          float want = 0.f;
          for (uint32_t r = 0; r < w; ++r) {
            float rank_sum = 0.f;
            for (uint32_t j = 0; j < c.topk; ++j) {
              const size_t pair = size_t(token) * c.topk + j;
              const uint32_t row = m.pair_row[pair], e = uint32_t(ids[pair]);
              float y = 0.f;
              for (uint32_t kk = 0; kk < c.k; ++kk) {
                y += h[r][size_t(row) * c.k + kk] * w2[r][(size_t(e) * c.k + kk) * c.n + col];
              }
              rank_sum += weights[pair] * y;
            }
            want += rank_sum;
          }
          const std::string e = float_mismatch(got[size_t(i) * c.n + col], want, [&] {
            return describe(c) + ": call " + std::to_string(call) + ", owner " + std::to_string(q) + " token " +
                   std::to_string(token) + " col " + std::to_string(col);
          });
          if (!e.empty()) return e;
        }
      }
    }
  }
  return "";
}

}  // namespace tilelink::test
