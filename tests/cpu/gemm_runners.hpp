// AG+GEMM and GEMM+RS protocols on the CPU executor, with naive GEMM blocks (protocol_runners.hpp).
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
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/testing/ag_gemm_naive_blocks.hpp"
#include "tilelink/testing/gemm_rs_naive_blocks.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink::test {

// ---- AG+GEMM (ops/ag_gemm/ag_gemm_protocol.hpp) ------------------------------------------------------

struct AgGemmCase {
  int world;
  uint32_t rows_per_rank, k, n, comm_rows, bm, bn;
  AgMethod method;
  CommOrder order;
  bool copy_engine;
  uint32_t comm_blocks = 3;  // SM all-gather blocks per rank
};

inline std::string describe(const AgGemmCase& c) {
  return "world " + std::to_string(c.world) + (c.copy_engine ? " ce" : "") +
         (c.method == AgMethod::kPull ? " pull" : " push") + (c.order == CommOrder::kRing ? " ring" : " mesh") +
         " rows/rank " + std::to_string(c.rows_per_rank) + " k " + std::to_string(c.k) + " n " +
         std::to_string(c.n) + " comm_rows " + std::to_string(c.comm_rows) + " bm " + std::to_string(c.bm) +
         " bn " + std::to_string(c.bn);
}

// Runs `calls` consecutive calls with fresh A and B each; returns "" or the first mismatch.
inline std::string run_ag_gemm(const AgGemmCase& c, uint64_t seed, int calls) {
  const uint32_t w = static_cast<uint32_t>(c.world);
  const AllGatherPlan ag = all_gather_plan(c.world, c.rows_per_rank, c.comm_rows, c.k * 4, c.method, c.order);
  const uint32_t m = ag.map.total_rows();

  cpu::Executor ex(c.world, 64 << 20, ag.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("ag_gemm");
  const size_t a_off = ex.allocate(size_t(m) * ag.pitch);
  const size_t b_off = ex.allocate(size_t(c.k) * c.n * 4);
  const size_t c_off = ex.allocate(size_t(m) * c.n * 4);
  std::vector<std::vector<uint32_t>> m_order(w);
  std::vector<AgGemmSchedule> schedule(w);
  for (uint32_t r = 0; r < w; ++r) {
    m_order[r].resize((m + c.bm - 1) / c.bm);
    make_m_order(ag, r, c.bm, m_order[r].data());
    schedule[r] = AgGemmSchedule{m, c.n, c.bm, c.bn, m_order[r].data()};
  }

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    // Fresh inputs: each rank's own A rows in place, its own B; C poisoned.
    std::vector<float> a_full = random_floats(rng, size_t(m) * c.k);
    std::vector<std::vector<float>> b(w);
    for (uint32_t r = 0; r < w; ++r) {
      b[r] = random_floats(rng, size_t(c.k) * c.n);
      std::memcpy(ex.at<float>(r, b_off), b[r].data(), b[r].size() * 4);
      std::memcpy(ex.at<char>(r, a_off) + size_t(r) * c.rows_per_rank * ag.pitch,
                  a_full.data() + size_t(r) * c.rows_per_rank * c.k, size_t(c.rows_per_rank) * ag.pitch);
      std::memset(ex.at<float>(r, c_off), kPoison, size_t(m) * c.n * 4);
    }
    const uint64_t epoch = static_cast<uint64_t>(call);
    std::vector<cpu::Role> roles;
    if (c.copy_engine) {
      roles.push_back({"copy_engine", 1, [&](cpu::BlockCtx& ctx) {
                         all_gather_stream(ctx, ag, ex.signals(ctx.rank(), 0, ag.num_channels(), epoch, op),
                                           ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), a_off));
                       }});
    } else {
      roles.push_back({"comm", c.comm_blocks, [&](cpu::BlockCtx& ctx) {
                         all_gather_block(ctx, ag, ex.signals(ctx.rank(), 0, ag.num_channels(), epoch, op),
                                          ex.heap(ctx.rank()), ex.at<char>(ctx.rank(), a_off));
                       }});
    }
    roles.push_back({"gemm", 4, [&](cpu::BlockCtx& ctx) {
                       const int r = ctx.rank();
                       ag_gemm_tiles_block(ctx, ag, schedule[r], ex.signals(r, 0, ag.num_channels(), epoch, op),
                                           ex.at<char>(r, a_off), c.k, ex.at<float>(r, b_off), ex.at<float>(r, c_off));
                     }});
    ex.run(roles);

    for (uint32_t r = 0; r < w; ++r) {
      const float* got = ex.at<float>(r, c_off);
      for (uint32_t row = 0; row < m; ++row) {
        for (uint32_t col = 0; col < c.n; ++col) {
          float want = 0.f;
          for (uint32_t kk = 0; kk < c.k; ++kk) want += a_full[size_t(row) * c.k + kk] * b[r][size_t(kk) * c.n + col];
          const std::string e = float_mismatch(got[size_t(row) * c.n + col], want, [&] {
            return describe(c) + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " C[" +
                   std::to_string(row) + "][" + std::to_string(col) + "]";
          });
          if (!e.empty()) return e;
        }
      }
    }
  }
  return "";
}

// ---- GEMM+RS (ops/gemm_rs/gemm_rs_fused.hpp) ---------------------------------------------------------

// The fused kernel's protocol, every scatter variant: compute blocks store each tile in the
// kernel's owner order where the variant puts it and notify per tile; for the copy engine a
// stream role moves finished groups to the owners; reduction blocks sum every sender's tiles as
// they arrive. Bit-identical to per-rank partials summed in rank order.
inline std::string run_gemm_rs_fused(GemmRsFusedPlan plan, uint32_t k, uint64_t seed, int calls,
                                     uint32_t reduce_blocks = 2) {
  const int w = static_cast<int>(plan.world);
  const uint32_t m = plan.m;  // rows of A; the buffers hold every owner's block of R rows
  const uint32_t buf_rows = plan.world * plan.rows_per_rank;
  constexpr uint32_t kComputeBlocks = 3;
  cpu::Executor ex(w, 16 << 20, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("gemm_rs_fused");
  const size_t a_off = ex.allocate(size_t(m) * k * 4);
  const size_t b_off = ex.allocate(size_t(plan.n) * k * 4);
  const size_t partial_off = ex.allocate(size_t(buf_rows) * plan.n * 4);
  const size_t recv_off = ex.allocate(size_t(buf_rows) * plan.n * 4);
  const size_t out_off = ex.allocate(size_t(plan.rows_per_rank) * plan.n * 4);
  std::vector<std::vector<uint32_t>> m_order(w, std::vector<uint32_t>(plan.world * plan.m_tiles()));
  for (int r = 0; r < w; ++r) make_gemm_rs_m_order(plan, uint32_t(r), m_order[r].data());

  std::mt19937_64 rng(seed);
  for (int call = 1; call <= calls; ++call) {
    std::vector<std::vector<float>> a(w), b(w);
    for (int r = 0; r < w; ++r) {
      a[r] = random_floats(rng, size_t(m) * k);
      b[r] = random_floats(rng, size_t(plan.n) * k);
      std::memcpy(ex.at<float>(r, a_off), a[r].data(), a[r].size() * 4);
      std::memcpy(ex.at<float>(r, b_off), b[r].data(), b[r].size() * 4);
      std::memset(ex.at<float>(r, out_off), kPoison, size_t(plan.rows_per_rank) * plan.n * 4);
      std::memset(ex.at<float>(r, partial_off), kPoison, size_t(buf_rows) * plan.n * 4);
      std::memset(ex.at<float>(r, recv_off), kPoison, size_t(buf_rows) * plan.n * 4);
    }
    const uint64_t epoch = uint64_t(call);
    // Owner r's sum of a tile in rank order (the reduction blocks', or with kEpilogue the compute
    // blocks' after an own tile).
    const auto sum_tile = [&](int r) {
      return [&, r](uint32_t, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols) {
        const SymmetricView heap = ex.heap(r);
        const float* buf = ex.at<float>(r, partial_off);
        const float* recv = ex.at<float>(r, recv_off);
        float* out = ex.at<float>(r, out_off);
        for (uint32_t e = 0; e < rows * cols; ++e) {
          const uint64_t at = uint64_t(row0 + e / cols) * plan.n + col0 + e % cols;
          float acc = 0.f;
          for (int s = 0; s < w; ++s) acc += gemm_rs_sender_rows(plan, heap, uint32_t(r), uint32_t(s), buf, recv)[at];
          out[at] = acc;
        }
      };
    };
    std::vector<cpu::Role> roles;
    if (plan.own_part_in_order) {
      // The decomposed method: one stream per rank -- the block GEMMs (a plain GEMM each, here a
      // naive one on the rank's rows of the block), each peer block's copy behind its GEMM, then
      // the reduction on the same stream after the own block.
      roles.push_back({"decomposed", 1, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         const SignalView sig = ex.signals(r, 0, plan.num_channels(), epoch, op);
                         float* partial = ex.at<float>(r, partial_off);
                         const float* a_r = ex.at<float>(r, a_off);
                         const float* b_r = ex.at<float>(r, b_off);
                         gemm_rs_decomposed(
                             ctx, plan, sig, ex.heap(r), partial, ex.at<float>(r, recv_off), 4,
                             [&](uint32_t q) {
                               const uint32_t row0 = q * plan.rows_per_rank;
                               for (uint32_t row = row0; row < row0 + plan.block_rows(q); ++row) {
                                 for (uint32_t col = 0; col < plan.n; ++col) {
                                   float acc = 0.f;
                                   for (uint32_t kk = 0; kk < k; ++kk) acc += a_r[size_t(row) * k + kk] * b_r[size_t(col) * k + kk];
                                   partial[size_t(row) * plan.n + col] = acc;
                                 }
                               }
                             },
                             [](uint32_t) {});
                         gemm_rs_fused_reduce_block(ctx, plan, sig, sum_tile(r));
                         if (plan.exit_on_stream) rank_exit_barrier_stream(ctx, sig, plan.exit_channel());
                       }});
      ex.run(roles);
    } else {
    roles = {
        {"compute", kComputeBlocks,
         [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           gemm_rs_fused_compute_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op), ex.heap(r),
                                       m_order[r].data(), ex.at<float>(r, a_off), ex.at<float>(r, b_off), k,
                                       ex.at<float>(r, partial_off), sum_tile(r));
         }},
        // With the exit barrier on the stream, one reduction block stands for the kernel and the
        // barrier follows it, as on the reduction's stream.
        {"reduce", plan.exit_on_stream ? 1u : reduce_blocks, [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           const SignalView sig = ex.signals(r, 0, plan.num_channels(), epoch, op);
           gemm_rs_fused_reduce_block(ctx, plan, sig, sum_tile(r));
           if (plan.exit_on_stream) rank_exit_barrier_stream(ctx, sig, plan.exit_channel());
         }}};
    if (plan.scatter == GemmRsScatter::kCopyEngine) {
      roles.push_back({"scatter", 1, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         gemm_rs_copy_engine_scatter(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op),
                                                     ex.heap(r), m_order[r].data(), ex.at<float>(r, partial_off),
                                                     ex.at<float>(r, recv_off), 4);
                       }});
    }
    ex.run(roles);
    }

    for (int o = 0; o < w; ++o) {
      const float* got = ex.at<float>(o, out_off);
      // Past the owner's rows (a short last block, none past M) nothing is written.
      const uint32_t rows = plan.block_rows(uint32_t(o));
      for (size_t e = size_t(rows) * plan.n; e < size_t(plan.rows_per_rank) * plan.n; ++e) {
        unsigned char bytes[4];
        std::memcpy(bytes, got + e, 4);
        if (bytes[0] != kPoison || bytes[1] != kPoison || bytes[2] != kPoison || bytes[3] != kPoison) {
          return "world " + std::to_string(w) + " m " + std::to_string(m) + ": owner " + std::to_string(o) +
                 " wrote out element " + std::to_string(e) + " past its " + std::to_string(rows) + " rows";
        }
      }
      for (uint32_t row = 0; row < rows; ++row) {
        for (uint32_t col = 0; col < plan.n; ++col) {
          const uint32_t global_row = uint32_t(o) * plan.rows_per_rank + row;
          float want = 0.f;
          for (int q = 0; q < w; ++q) {
            float partial = 0.f;
            for (uint32_t kk = 0; kk < k; ++kk) {
              partial += a[q][size_t(global_row) * k + kk] * b[q][size_t(col) * k + kk];
            }
            want += partial;
          }
          const std::string e = float_mismatch(got[size_t(row) * plan.n + col], want, [&] {
            return "world " + std::to_string(w) + " scatter " + to_string(plan.scatter) + " reducer " +
                   to_string(plan.reducer) + " granularity " +
                   std::to_string(int(plan.granularity)) + ": call " + std::to_string(call) + ", owner " +
                   std::to_string(o) + " out[" + std::to_string(row) + "][" + std::to_string(col) + "]";
          });
          if (!e.empty()) return e;
        }
      }
    }
  }
  return "";
}

}  // namespace tilelink::test
