// The all-gather and reduce-scatter protocols on the CPU executor (protocol_runners.hpp).
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
#include "tilelink/comm/all_gather.hpp"
#include "tilelink/comm/reduce_scatter.hpp"

namespace tilelink::test {

// The all-gather of rows_per_rank contiguous rows of row_bytes from each rank, comm_rows at a time
// (the runners of the ops that gather their rows build theirs with it too).
inline AllGatherPlan all_gather_plan(int world, uint32_t rows_per_rank, uint32_t comm_rows, uint32_t row_bytes,
                                     AgMethod method, CommOrder order) {
  return {.map = RowShardMapping{rows_per_rank, comm_rows, static_cast<uint32_t>(world)},
          .row_bytes = row_bytes,
          .pitch = row_bytes,
          .method = method,
          .order = order};
}

// ---- all-gather (comm/all_gather.hpp): SM blocks or the copy-engine stream, and a consumer ----------

struct AgCase {
  int world = 4;
  uint32_t rows_per_rank = 10;
  uint32_t comm_rows = 4;
  uint32_t row_bytes = 48;
  AgMethod method = AgMethod::kPull;
  CommOrder order = CommOrder::kFullMesh;
  bool copy_engine = false;  // all_gather_stream on one "stream" thread per rank
  bool own_rows = false;     // each rank's shard outside the heap, copied in by the call (own_rows)
  uint32_t comm_blocks = 3;
  uint32_t consumer_blocks = 2;
  uint32_t bm = 6;  // consumer tile rows, independent of comm_rows

  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (copy_engine ? " copy-engine" : method == AgMethod::kPull ? " pull" : " push")
       << (order == CommOrder::kRing ? " ring" : " mesh") << (own_rows ? " own_rows" : "") << " rows/rank "
       << rows_per_rank
       << " comm_rows " << comm_rows << " bm " << bm;
    return os.str();
  }
  AllGatherPlan plan() const { return all_gather_plan(world, rows_per_rank, comm_rows, row_bytes, method, order); }
};

// The communication role's body: the real protocol, or a broken variant under test. The last
// argument is the rank's own rows outside the heap (AgCase::own_rows), else nullptr.
using AgComm = std::function<void(cpu::BlockCtx&, const AllGatherPlan&, const SignalView&,
                                  const SymmetricView&, void*, const void*)>;

inline void real_all_gather(cpu::BlockCtx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                            const SymmetricView& heap, void* gathered, const void* own_rows) {
  all_gather_block(ctx, plan, sig, heap, gathered, own_rows);
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
      if (!c.own_rows) std::memcpy(g + uint64_t(r) * c.rows_per_rank * plan.pitch, shards[r].data(), shards[r].size());
    }
    auto own_rows = [&](int r) -> const void* { return c.own_rows ? shards[r].data() : nullptr; };
    std::vector<cpu::Role> roles;
    roles.push_back({"comm", c.copy_engine ? 1u : c.comm_blocks, [&](cpu::BlockCtx& ctx) {
                       const SignalView sig = ex.signals(ctx.rank(), 0, plan.num_channels(), e, op);
                       void* g = ex.at<char>(ctx.rank(), gathered);
                       if (c.copy_engine) {
                         all_gather_stream(ctx, plan, sig, ex.heap(ctx.rank()), g, own_rows(ctx.rank()));
                       } else {
                         comm(ctx, plan, sig, ex.heap(ctx.rank()), g, own_rows(ctx.rank()));
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
      // SM path: every block counted itself in on the started channel (AllGather::wait_started
      // holds the consumer's launch until the call's count is there).
      const uint64_t started = *ex.signals(r, 0, plan.num_channels(), e, op).local(plan.started_channel());
      if (!c.copy_engine && started != e * c.comm_blocks) {
        return c.name() + ": call " + std::to_string(e) + ", rank " + std::to_string(r) + ": started channel at " +
               std::to_string(started) + ", expected " + std::to_string(e * c.comm_blocks) + " (every block, every call)";
      }
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
  // Only the last block of the last rank starts with the others; that rank's other blocks start
  // once it has finished (blocks that MPS never made resident beside it).
  bool late_blocks = false;

  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (method == RsMethod::kPush ? " push" : " pull") << " rows/rank "
       << rows_per_rank << " comm_rows " << comm_rows << " cols " << cols << " blocks " << blocks
       << (late_blocks ? " late blocks" : "");
    return os.str();
  }
  ReduceScatterPlan plan() const {
    return {.map = RowShardMapping{rows_per_rank, comm_rows, static_cast<uint32_t>(world)},
            .cols = cols,
            .method = method,
            .reduce_rows = reduce_rows};
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
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));  // per rank, kept across calls
  for (uint64_t e = 1; e <= static_cast<uint64_t>(calls); ++e) {
    std::vector<std::vector<float>> in(c.world);
    for (int r = 0; r < c.world; ++r) {
      in[r] = random_floats(rng, plan.partial_elems());
      std::memcpy(ex.at<float>(r, partial), in[r].data(), pbytes);
    }
    std::vector<std::vector<float>> out(c.world, std::vector<float>(plan.out_elems()));
    for (auto& o : out) std::memset(o.data(), kPoison, o.size() * sizeof(float));
    std::atomic<bool> resident_done{false};  // late_blocks: the last rank's one resident block has finished
    ex.run({{"rs", c.blocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               const bool late = c.late_blocks && r == c.world - 1;
               if (late && ctx.block() + 1 != ctx.num_blocks()) hold_until([&] { return resident_done.load(); });
               reduce_scatter_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), e, op), ex.heap(r),
                                    ex.at<float>(r, partial), ex.at<float>(r, recv), out[r].data(),
                                    queues[static_cast<size_t>(r)]);
               if (late) resident_done.store(true);
             }}});
    const std::string err = check_out(c, e, out, reference_sum(c, in));
    if (!err.empty()) return err;
    if (std::string q = check_queues_reset(queues, "reduce-scatter call " + std::to_string(e)); !q.empty()) return q;
  }
  return "";
}

}  // namespace tilelink::test
