// The CPU suite's protocol runners, shared by the protocol tests (test_all_gather.cpp,
// test_reduce_scatter.cpp, test_ag_gemm_protocol.cpp, test_gemm_rs_protocol.cpp,
// test_moe_protocol.cpp, test_sp_attention_protocol.cpp) and the protocol fuzzer
// (test_fuzz_protocols.cpp). Each run_* runs one case of a protocol on the CPU executor for a
// number of consecutive calls, with fresh random inputs and poisoned outputs every call, and
// returns "" or the first mismatch against an independent reference. The fields the fuzzer sets
// beyond the protocol tests' (the roles' block counts, the reduce-scatter's slice rows, MoE part
// 1's all-gather variant) default to the values those tests always ran with.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/comm/all_gather.hpp"
#include "tilelink/comm/reduce_scatter.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/executor/cpu_executor.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/ops/attention/attention_reference.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/ops/moe/synthetic_routing.hpp"

namespace tilelink::test {

// ---- all-gather (comm/all_gather.hpp): SM blocks or the copy-engine stream, and a consumer ----------

struct AgCase {
  int world = 4;
  uint32_t rows_per_rank = 10;
  uint32_t comm_rows = 4;
  uint32_t row_bytes = 48;
  AgMethod method = AgMethod::kPull;
  CommOrder order = CommOrder::kFullMesh;
  bool copy_engine = false;  // all_gather_stream on one "stream" thread per rank
  uint32_t comm_blocks = 3;
  uint32_t consumer_blocks = 2;
  uint32_t bm = 6;  // consumer tile rows, independent of comm_rows

  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (copy_engine ? " copy-engine" : method == AgMethod::kPull ? " pull" : " push")
       << (order == CommOrder::kRing ? " ring" : " mesh") << " rows/rank " << rows_per_rank
       << " comm_rows " << comm_rows << " bm " << bm;
    return os.str();
  }
  AllGatherPlan plan() const {
    AllGatherPlan p;
    p.map = RowShardMapping{rows_per_rank, comm_rows, static_cast<uint32_t>(world)};
    p.row_bytes = row_bytes;
    p.pitch = row_bytes;
    p.method = method;
    p.order = order;
    return p;
  }
};

// The communication role's body: the real protocol, or a broken variant under test.
using AgComm = std::function<void(cpu::BlockCtx&, const AllGatherPlan&, const SignalView&,
                                  const SymmetricView&, void*)>;

inline void real_all_gather(cpu::BlockCtx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                     const SymmetricView& heap, void* gathered) {
  all_gather_block(ctx, plan, sig, heap, gathered);
}

// Consumer tile t of rank `rank`: wait for its rows, then read them like a GEMM would.
inline void consume_tiles(cpu::BlockCtx& ctx, const AgCase& c, const AllGatherPlan& plan, const SignalView& sig,
                   const char* gathered, unsigned char* out) {
  const uint32_t total = plan.map.total_rows();
  const uint32_t tiles = (total + c.bm - 1) / c.bm;
  for (uint32_t t = ctx.block(); t < tiles; t += ctx.num_blocks()) {
    const uint32_t row0 = t * c.bm;
    const uint32_t rows = std::min(c.bm, total - row0);
    all_gather_wait_rows(ctx, plan, sig, row0, rows, static_cast<int32_t>(t));
    ctx.jitter();  // a straggling reader widens any window a missing wait leaves open
    std::memcpy(out + uint64_t(row0) * c.row_bytes, gathered + uint64_t(row0) * plan.pitch,
                uint64_t(rows) * c.row_bytes);
  }
}

// First mismatch of `out` (rank r's consumer output) against the shards, or "".
inline std::string check_gathered(const AgCase& c, int r, uint64_t call, const std::vector<unsigned char>& out,
                           const std::vector<std::vector<unsigned char>>& shards) {
  const uint32_t total = c.rows_per_rank * c.world;
  for (uint32_t row = 0; row < total; ++row) {
    const unsigned char* want = shards[row / c.rows_per_rank].data() + uint64_t(row % c.rows_per_rank) * c.row_bytes;
    if (std::memcmp(out.data() + uint64_t(row) * c.row_bytes, want, c.row_bytes) != 0) {
      const bool poison = out[uint64_t(row) * c.row_bytes] == kPoison;
      return c.name() + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " row " +
             std::to_string(row) + " (from rank " + std::to_string(row / c.rows_per_rank) + ") is " +
             (poison ? "poison" : "wrong");
    }
  }
  return "";
}

// `calls` consecutive calls (epochs 1..calls) in one executor, one run() per call. Returns the
// first wrong row, or "".
inline std::string run_all_gather(const AgCase& c, uint64_t seed, int calls, const AgComm& comm = real_all_gather) {
  const AllGatherPlan plan = c.plan();
  const uint32_t total = plan.map.total_rows();
  const uint64_t bytes = uint64_t(total) * plan.pitch;
  cpu::Executor ex(c.world, bytes + 4096, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("all_gather");
  const size_t gathered = ex.allocate(bytes);
  std::mt19937_64 rng(seed);

  for (uint64_t e = 1; e <= static_cast<uint64_t>(calls); ++e) {
    std::vector<std::vector<unsigned char>> shards(c.world);
    std::vector<std::vector<unsigned char>> out(c.world, std::vector<unsigned char>(bytes, kPoison));
    for (int r = 0; r < c.world; ++r) {
      shards[r] = random_bytes(rng, uint64_t(c.rows_per_rank) * c.row_bytes);
      char* g = ex.at<char>(r, gathered);
      std::memset(g, kPoison, bytes);
      std::memcpy(g + uint64_t(r) * c.rows_per_rank * plan.pitch, shards[r].data(), shards[r].size());
    }
    std::vector<cpu::Role> roles;
    roles.push_back({"comm", c.copy_engine ? 1u : c.comm_blocks, [&](cpu::BlockCtx& ctx) {
                       const SignalView sig = ex.signals(ctx.rank(), 0, plan.num_channels(), e, op);
                       void* g = ex.at<char>(ctx.rank(), gathered);
                       if (c.copy_engine) {
                         all_gather_stream(ctx, plan, sig, ex.heap(ctx.rank()), g);
                       } else {
                         comm(ctx, plan, sig, ex.heap(ctx.rank()), g);
                       }
                     }});
    roles.push_back({"consumer", c.consumer_blocks, [&](cpu::BlockCtx& ctx) {
                       const SignalView sig = ex.signals(ctx.rank(), 0, plan.num_channels(), e, op);
                       consume_tiles(ctx, c, plan, sig, ex.at<char>(ctx.rank(), gathered), out[ctx.rank()].data());
                     }});
    ex.run(roles);
    for (int r = 0; r < c.world; ++r) {
      const std::string err = check_gathered(c, r, e, out[r], shards);
      if (!err.empty()) return err;
    }
  }
  return "";
}

// ---- reduce-scatter (comm/reduce_scatter.hpp) --------------------------------------------------------

struct RsCase {
  int world = 4;
  uint32_t rows_per_rank = 10;
  uint32_t comm_rows = 4;
  uint32_t cols = 8;  // a multiple of 4: rows are 16-byte aligned
  RsMethod method = RsMethod::kPush;
  uint32_t blocks = 3;
  uint32_t reduce_rows = 0;  // ReduceScatterPlan::reduce_rows: rows per reduction item, 0 = a chunk

  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (method == RsMethod::kPush ? " push" : " pull") << " rows/rank "
       << rows_per_rank << " comm_rows " << comm_rows << " cols " << cols << " blocks " << blocks;
    return os.str();
  }
  ReduceScatterPlan plan() const {
    ReduceScatterPlan p;
    p.map = RowShardMapping{rows_per_rank, comm_rows, static_cast<uint32_t>(world)};
    p.cols = cols;
    p.method = method;
    p.reduce_rows = reduce_rows;
    return p;
  }
};

// reference[r][i] = sum over q = 0..P-1, in that order, of partial[q][r's block][i].
inline std::vector<std::vector<float>> reference_sum(const RsCase& c, const std::vector<std::vector<float>>& partial) {
  const size_t n = size_t(c.rows_per_rank) * c.cols;
  std::vector<std::vector<float>> ref(c.world, std::vector<float>(n));
  for (int r = 0; r < c.world; ++r) {
    for (size_t i = 0; i < n; ++i) {
      float acc = 0.f;
      for (int q = 0; q < c.world; ++q) acc += partial[q][size_t(r) * n + i];
      ref[r][i] = acc;
    }
  }
  return ref;
}

inline std::string check_out(const RsCase& c, uint64_t call, const std::vector<std::vector<float>>& out,
                      const std::vector<std::vector<float>>& ref) {
  for (int r = 0; r < c.world; ++r) {
    for (size_t i = 0; i < ref[r].size(); ++i) {
      if (std::memcmp(&out[r][i], &ref[r][i], sizeof(float)) != 0) {
        std::ostringstream os;
        os << c.name() << ": call " << call << ", rank " << r << " row " << i / c.cols << " col "
           << i % c.cols << ": got " << out[r][i] << ", expected " << ref[r][i];
        return os.str();
      }
    }
  }
  return "";
}

// `calls` consecutive calls (epochs 1..calls) in one executor, one run() per call.
inline std::string run_reduce_scatter(const RsCase& c, uint64_t seed, int calls) {
  const ReduceScatterPlan plan = c.plan();
  const size_t pbytes = plan.partial_elems() * sizeof(float);
  cpu::Executor ex(c.world, 2 * pbytes + 4096, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("reduce_scatter");
  const size_t partial = ex.allocate(pbytes);
  const size_t recv = ex.allocate(pbytes);
  std::mt19937_64 rng(seed);
  for (uint64_t e = 1; e <= static_cast<uint64_t>(calls); ++e) {
    std::vector<std::vector<float>> in(c.world);
    for (int r = 0; r < c.world; ++r) {
      in[r] = random_floats(rng, plan.partial_elems());
      std::memcpy(ex.at<float>(r, partial), in[r].data(), pbytes);
    }
    std::vector<std::vector<float>> out(c.world, std::vector<float>(plan.out_elems()));
    for (auto& o : out) std::memset(o.data(), kPoison, o.size() * sizeof(float));
    ex.run({{"rs", c.blocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               reduce_scatter_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), e, op), ex.heap(r),
                                    ex.at<float>(r, partial), ex.at<float>(r, recv), out[r].data());
             }}});
    const std::string err = check_out(c, e, out, reference_sum(c, in));
    if (!err.empty()) return err;
  }
  return "";
}

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
  AllGatherPlan ag;
  ag.map = RowShardMapping{c.rows_per_rank, c.comm_rows, w};
  ag.row_bytes = c.k * 4;
  ag.pitch = ag.row_bytes;
  ag.method = c.method;
  ag.order = c.order;
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
          const float g = got[size_t(row) * c.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return describe(c) + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " C[" +
                   std::to_string(row) + "][" + std::to_string(col) + "] = " + std::to_string(g) +
                   ", expected " + std::to_string(want);
          }
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
  const uint32_t m = plan.world * plan.rows_per_rank;
  constexpr uint32_t kComputeBlocks = 3;
  cpu::Executor ex(w, 16 << 20, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("gemm_rs_fused");
  const size_t a_off = ex.allocate(size_t(m) * k * 4);
  const size_t b_off = ex.allocate(size_t(plan.n) * k * 4);
  const size_t partial_off = ex.allocate(size_t(m) * plan.n * 4);
  const size_t recv_off = ex.allocate(size_t(m) * plan.n * 4);
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
      std::memset(ex.at<float>(r, partial_off), kPoison, size_t(m) * plan.n * 4);
      std::memset(ex.at<float>(r, recv_off), kPoison, size_t(m) * plan.n * 4);
    }
    const uint64_t epoch = uint64_t(call);
    std::vector<cpu::Role> roles = {
        {"compute", kComputeBlocks,
         [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           gemm_rs_fused_compute_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op), ex.heap(r),
                                       m_order[r].data(), ex.at<float>(r, a_off), ex.at<float>(r, b_off), k,
                                       ex.at<float>(r, partial_off));
         }},
        {"reduce", reduce_blocks, [&](cpu::BlockCtx& ctx) {
           const int r = ctx.rank();
           const SymmetricView heap = ex.heap(r);
           const float* buf = ex.at<float>(r, partial_off);
           const float* recv = ex.at<float>(r, recv_off);
           float* out = ex.at<float>(r, out_off);
           gemm_rs_fused_reduce_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), epoch, op),
                                      [&](uint32_t, uint32_t row0, uint32_t col0, uint32_t cols) {
                                        for (uint32_t e = 0; e < plan.bm * cols; ++e) {
                                          const uint64_t at = uint64_t(row0 + e / cols) * plan.n + col0 + e % cols;
                                          float acc = 0.f;
                                          for (int s = 0; s < w; ++s) {
                                            acc += gemm_rs_sender_rows(plan, heap, uint32_t(r), uint32_t(s), buf, recv)[at];
                                          }
                                          out[at] = acc;
                                        }
                                      });
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

    for (int o = 0; o < w; ++o) {
      const float* got = ex.at<float>(o, out_off);
      for (uint32_t row = 0; row < plan.rows_per_rank; ++row) {
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
          const float g = got[size_t(row) * plan.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return "world " + std::to_string(w) + " scatter " + to_string(plan.scatter) + " granularity " +
                   std::to_string(int(plan.granularity)) +
                   ": call " + std::to_string(call) + ", owner " + std::to_string(o) + " out[" + std::to_string(row) +
                   "][" + std::to_string(col) + "] = " + std::to_string(g) + ", expected " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

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
  AllGatherPlan ag;
  ag.map = RowShardMapping{c.tokens_per_rank, c.comm_rows, w};
  ag.row_bytes = c.k * 4;
  ag.pitch = ag.row_bytes;
  ag.method = c.method;
  ag.order = c.order;

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
               moe_gather_block(ctx, ag, ag_sig(r), view, order[r].data(), gather_sig(r), 0, [&](uint32_t t) {
                 moe_gather_rows<uint32_t>(ctx.lanes(), ag, view, t, ex.at<char>(r, x_off),
                                           ex.at<char>(r, sorted_off), c.k * 4);
               });
             }},
            {"group_gemm", 3, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               moe_group_gemm_block(ctx, view, order[r].data(), gather_sig(r), 0, ex.at<float>(r, sorted_off), c.k,
                                    ex.at<float>(r, w_off), c.n, ex.at<float>(r, out_off));
             }}});

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
          const float g = got[size_t(row) * c.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return describe(c) + ": call " + std::to_string(call) + ", rank " + std::to_string(r) + " row " +
                   std::to_string(row) + " col " + std::to_string(col) + " = " + std::to_string(g) + ", expected " +
                   std::to_string(want);
          }
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
  cpu::Executor ex(c.world, 64 << 20, plan.num_channels(), stress_options(seed));
  const uint32_t op = ex.register_op("moe_group_gemm_rs");
  const size_t h_off = ex.allocate(size_t(max_rows) * c.k * 4);
  const size_t w_off = ex.allocate(size_t(c.experts) * c.k * c.n * 4);
  const size_t y_off = ex.allocate(size_t(max_rows) * c.n * 4);
  const size_t recv_off = ex.allocate(size_t(tokens) * c.n * 4);
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
      std::memset(ex.at<float>(r, out_off), kPoison, size_t(c.tokens_per_rank) * c.n * 4);
    }
    const uint64_t epoch = static_cast<uint64_t>(call);
    auto sig = [&](int r) { return ex.signals(r, 0, plan.num_channels(), epoch, op); };
    ex.run({{"group_gemm", 3,
             [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               moe_group_gemm_rs_compute_block(ctx, plan, view, sig(r), ex.at<float>(r, h_off), c.k,
                                               ex.at<float>(r, w_off), ex.at<float>(r, y_off));
             }},
            {"combine_reduce", c.combine_blocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               const float* y = ex.at<float>(r, y_off);
               const float* recv = ex.at<float>(r, recv_off);
               float* out = ex.at<float>(r, out_off);
               moe_combine_reduce_block(
                   ctx, plan, view, m.pair_row.data(), sig(r),
                   [&](uint32_t owner, RowRange rows) {
                     float* dst = w == 1 ? out
                                         : ex.heap(r).translate(plan.slot(ex.at<float>(r, recv_off), uint32_t(r)),
                                                                int(owner));
                     for (uint32_t t = rows.row0; t < rows.row0 + rows.rows; ++t) {
                       for (uint32_t col = 0; col < c.n; ++col) {
                         float acc = 0.f;
                         for (uint32_t j = 0; j < c.topk; ++j) {
                           const size_t pair = size_t(t) * c.topk + j;
                           acc += weights[pair] * y[size_t(m.pair_row[pair]) * c.n + col];
                         }
                         dst[size_t(t - owner * c.tokens_per_rank) * c.n + col] = acc;
                       }
                     }
                   },
                   [&](uint32_t, uint32_t row0, uint32_t rows) {
                     for (size_t e = size_t(row0) * c.n; e < size_t(row0 + rows) * c.n; ++e) {
                       float acc = 0.f;
                       for (uint32_t s = 0; s < w; ++s) acc += plan.slot(recv, s)[e];
                       out[e] = acc;
                     }
                   });
             }}});

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
          const float g = got[size_t(i) * c.n + col];
          if (std::memcmp(&g, &want, 4) != 0) {
            return describe(c) + ": call " + std::to_string(call) + ", owner " + std::to_string(q) + " token " +
                   std::to_string(token) + " col " + std::to_string(col) + " = " + std::to_string(g) +
                   ", expected " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

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
  SpAttentionPlan p;
  p.ag.map = RowShardMapping{c.seq_per_rank, c.comm_rows, uint32_t(c.world)};
  p.ag.method = c.method;
  p.ag.order = c.order;
  p.q_heads = c.q_heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.bq = c.bq;
  p.causal = c.causal;
  p.layout = c.layout;
  p.local_first = c.local_first;
  p.section_kv_heads = c.section_kv_heads;
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
