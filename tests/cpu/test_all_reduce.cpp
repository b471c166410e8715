// The all-reduce protocol (comm/all_reduce.hpp) on the CPU executor: one-shot and two-shot at
// worlds 1..8, row counts that divide by neither the world nor the chunk (1, 2, 7, 13, 64 rows:
// decode's token counts), one or several blocks, random delays. Every rank's out must equal, bit
// for bit, the fp32 sum in rank order of fresh random partials; outputs are poisoned first, and
// calls repeat (each with its epoch). A two-shot variant that skips the wait for the owner's sum
// must be caught. GEMM + all-reduce: the partial comes tile by tile from a GEMM role and each row
// band is reduced as soon as every rank's tiles of it are in.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/comm/all_reduce.hpp"
#include "tilelink/executor/cpu_executor.hpp"

namespace tilelink {
namespace {

struct ArCase {
  int world = 4;
  uint32_t rows = 13;
  uint32_t comm_rows = 4;
  uint32_t cols = 8;
  ArMethod method = ArMethod::kOneShot;
  uint32_t blocks = 3;
  bool producer_fed = false;  // not in_place: the partial is announced chunk by chunk by its writer
  // Only the last block of the last rank starts with the others; that rank's other blocks start
  // once it has finished (blocks that MPS never made resident beside it).
  bool late_blocks = false;

  AllReducePlan plan() const {
    return {.rows = rows, .cols = cols, .comm_rows = comm_rows, .world = static_cast<uint32_t>(world), .method = method,
            .in_place = !producer_fed, .ready_arrivals = 1};
  }
  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (method == ArMethod::kOneShot ? " one-shot" : " two-shot") << " rows " << rows
       << " comm_rows " << comm_rows << " blocks " << blocks << (late_blocks ? " late blocks" : "");
    return os.str();
  }
};

using Protocol = std::function<void(cpu::BlockCtx&, const AllReducePlan&, const SignalView&, const SymmetricView&,
                                    float*, float*, float*, cpu::WorkQueue&)>;

void real_all_reduce(cpu::BlockCtx& ctx, const AllReducePlan& plan, const SignalView& sig, const SymmetricView& heap,
                     float* partial, float* recv, float* out, cpu::WorkQueue& queue) {
  all_reduce_block(ctx, plan, sig, heap, partial, recv, out, queue);
}

// An executor of `world` ranks with the protocol's symmetric buffers: partial, out (rows x cols
// floats) and recv (world slots), and `extra` channels after the plan's.
struct ArWorld {
  cpu::Executor ex;
  uint32_t op;
  size_t partial, out, recv;
  ArWorld(int world, const AllReducePlan& plan, const char* name, uint64_t seed, uint32_t extra = 0)
      : ex(world, (2 + world) * plan.elems() * sizeof(float) + 4096, plan.num_channels() + extra,
           test::stress_options(seed)),
        op(ex.register_op(name)),
        partial(ex.allocate(plan.elems() * sizeof(float))),
        out(ex.allocate(plan.elems() * sizeof(float))),
        recv(ex.allocate(plan.recv_elems() * sizeof(float))) {}
};

// The first element of any rank's out that is not, bit for bit, want(i) (i over the rows x cols
// elements); "" if none. `what` names the case and call in the message.
template <class Want, class Got>
std::string first_mismatch(const std::string& what, int world, uint64_t elems, uint32_t cols, Want&& want, Got&& got) {
  for (uint64_t i = 0; i < elems; ++i) {
    const float w = want(i);
    for (int r = 0; r < world; ++r) {
      const float g = got(r, i);
      if (std::memcmp(&g, &w, sizeof(float)) != 0) {
        std::ostringstream os;
        os << what << ", rank " << r << " row " << i / cols << " col " << i % cols << ": got " << g << ", expected " << w;
        return os.str();
      }
    }
  }
  return "";
}

// `calls` calls (epochs 1..calls) in one executor, one run() each; the first wrong element, or "".
std::string run_all_reduce(const ArCase& c, uint64_t seed, int calls, const Protocol& protocol = real_all_reduce) {
  const AllReducePlan plan = c.plan();
  const size_t bytes = plan.elems() * sizeof(float);
  ArWorld w(c.world, plan, "all_reduce", seed);
  auto& [ex, op, partial, out, recv] = w;
  std::mt19937_64 rng(seed);
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));  // per rank, kept across calls
  for (uint64_t e = 1; e <= uint64_t(calls); ++e) {
    std::vector<std::vector<float>> in(c.world);
    for (int r = 0; r < c.world; ++r) {
      in[r] = test::random_floats(rng, plan.elems());
      std::memcpy(ex.at<float>(r, partial), in[r].data(), bytes);
      std::memset(ex.at<float>(r, out), test::kPoison, bytes);
      std::memset(ex.at<float>(r, recv), test::kPoison, plan.recv_elems() * sizeof(float));
    }
    std::atomic<bool> resident_done{false};  // late_blocks: the last rank's one resident block has finished
    ex.run({{"all_reduce", c.blocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               const bool late = c.late_blocks && r == c.world - 1;
               if (late && ctx.block() + 1 != ctx.num_blocks()) test::hold_until([&] { return resident_done.load(); });
               protocol(ctx, plan, ex.signals(r, 0, plan.num_channels(), e, op), ex.heap(r), ex.at<float>(r, partial),
                        ex.at<float>(r, recv), ex.at<float>(r, out), queues[static_cast<size_t>(r)]);
               if (late) resident_done.store(true);
             }}});
    const std::string err = first_mismatch(
        c.name() + ": call " + std::to_string(e), c.world, plan.elems(), c.cols,
        [&](uint64_t i) {
          float want = 0.f;
          for (int q = 0; q < c.world; ++q) want += in[q][i];
          return want;
        },
        [&](int r, uint64_t i) { return ex.at<float>(r, out)[i]; });
    if (!err.empty()) return err;
    if (std::string q = test::check_queues_reset(queues, c.name() + ": call " + std::to_string(e)); !q.empty()) {
      return q;
    }
  }
  return "";
}

class AllReduceProtocol : public ::testing::TestWithParam<ArMethod> {};

TEST_P(AllReduceProtocol, EveryWorldAndRowCount) {
  for (int world = 1; world <= 8; ++world) {
    for (uint32_t rows : {1u, 2u, 7u, 13u, 64u}) {
      for (uint32_t blocks : {1u, 3u}) {
        ArCase c;
        c.world = world;
        c.rows = rows;
        c.comm_rows = rows >= 64 ? 16 : 4;
        c.method = GetParam();
        c.blocks = blocks;
        EXPECT_EQ(run_all_reduce(c, 1000 * world + 10 * rows + blocks, 2), "");
      }
    }
  }
}

TEST_P(AllReduceProtocol, ChunkSizes) {
  // One row per chunk, a chunk larger than the tensor, chunks that do not divide it; fewer
  // chunks than ranks (two-shot: some ranks own nothing).
  for (int world : {3, 5, 8}) {
    for (uint32_t comm_rows : {1u, 3u, 5u, 40u}) {
      ArCase c;
      c.world = world;
      c.rows = 17;
      c.comm_rows = comm_rows;
      c.method = GetParam();
      EXPECT_EQ(run_all_reduce(c, 77 * world + comm_rows, 2), "");
    }
  }
}

TEST_P(AllReduceProtocol, OneResidentBlockDoesTheRanksWork) {
  // The last rank's blocks but one start only after that one has finished: the announcements,
  // reductions and fetches come from the rank's queue, not bound to block indices, so the one
  // block does all of them while the peers wait for its chunks.
  for (int world : {1, 2, 3, 5}) {
    for (uint32_t rows : {1u, 7u, 13u}) {
      ArCase c;
      c.world = world;
      c.rows = rows;
      c.comm_rows = 2;
      c.method = GetParam();
      c.blocks = 4;
      c.late_blocks = true;
      EXPECT_EQ(run_all_reduce(c, 6700 * world + rows, 2), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, AllReduceProtocol, ::testing::Values(ArMethod::kOneShot, ArMethod::kTwoShot),
                         [](const ::testing::TestParamInfo<ArMethod>& info) {
                           return std::string(info.param == ArMethod::kOneShot ? "OneShot" : "TwoShot");
                         });

// Several calls inside one run(), each rank synchronised only with itself between calls (as
// consecutive kernels on one stream): a rank writes its next partial at the start of a call while
// a slower peer may still be in the previous one. The exit barrier keeps each call open until the
// peers have read this rank's partial (and, two-shot, its out).
std::string run_back_to_back(const ArCase& c, uint64_t seed, int calls) {
  const AllReducePlan plan = c.plan();
  const size_t bytes = plan.elems() * sizeof(float);
  ArWorld w(c.world, plan, "all_reduce", seed, 1);
  auto& [ex, op, partial, out, recv] = w;
  const test::RankFence fence{&ex, plan.num_channels(), ex.register_op("rank_fence"), c.blocks};
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::vector<float>>> in(calls);
  std::vector<std::vector<std::vector<float>>> got(calls, std::vector<std::vector<float>>(c.world));
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));  // per rank, across the calls
  for (int k = 0; k < calls; ++k) {
    for (int r = 0; r < c.world; ++r) in[k].push_back(test::random_floats(rng, plan.elems()));
  }
  ex.run({{"all_reduce", c.blocks, [&](cpu::BlockCtx& ctx) {
             const int r = ctx.rank();
             for (int k = 0; k < calls; ++k) {
               fence.arrive_and_wait(ctx, 3 * uint64_t(k) + 1);
               const SignalView sig = ex.signals(r, 0, plan.num_channels(), k + 1, op);
               if (ctx.block() == 0) {
                 std::memcpy(ex.at<float>(r, partial), in[k][r].data(), bytes);
                 std::memset(ex.at<float>(r, out), test::kPoison, bytes);
                 if (c.producer_fed) {  // the writer announces each chunk, as a GEMM epilogue would
                   for (uint32_t ch = 0; ch < plan.num_chunks(); ++ch) {
                     ctx.producer_tile_notify(sig, plan.ready_channel(ch), NotifyMode::kAdd);
                   }
                 }
               }
               fence.arrive_and_wait(ctx, 3 * uint64_t(k) + 2);
               all_reduce_block(ctx, plan, sig, ex.heap(r), ex.at<float>(r, partial), ex.at<float>(r, recv),
                                ex.at<float>(r, out), queues[static_cast<size_t>(r)]);
               fence.arrive_and_wait(ctx, 3 * uint64_t(k) + 3);
               if (ctx.block() == 0) {
                 const float* o = ex.at<float>(r, out);
                 got[k][r].assign(o, o + plan.elems());
               }
             }
           }}});
  for (int k = 0; k < calls; ++k) {
    const std::string err = first_mismatch(
        c.name() + ": back-to-back call " + std::to_string(k + 1), c.world, plan.elems(), c.cols,
        [&](uint64_t i) {
          float want = 0.f;
          for (int q = 0; q < c.world; ++q) want += in[k][q][i];
          return want;
        },
        [&](int r, uint64_t i) { return got[k][r][i]; });
    if (!err.empty()) return err;
  }
  return test::check_queues_reset(queues, c.name() + ": after " + std::to_string(calls) + " back-to-back calls");
}

TEST_P(AllReduceProtocol, ConsecutiveCallsWithoutHostSync) {
  for (bool producer_fed : {false, true}) {
    for (int world : {2, 3, 5}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        ArCase c;
        c.world = world;
        c.rows = 9;
        c.comm_rows = 2;
        c.method = GetParam();
        c.producer_fed = producer_fed;
        EXPECT_EQ(run_back_to_back(c, seed * 19 + world, 4), "") << (producer_fed ? "producer-fed" : "in place");
      }
    }
  }
}

// ---- GEMM + all-reduce: C = sum_r A_r B_r^T on every rank ------------------------------------------

struct GemmArCase {
  int world = 3;
  uint32_t m = 7, n = 24, k = 5;  // any m: decode's token counts
  uint32_t bm = 4, bn = 8;        // the GEMM's tile; chunks are its row bands
  ArMethod method = ArMethod::kOneShot;
  uint32_t gemm_blocks = 2, ar_blocks = 2;

  uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  uint32_t m_tiles() const { return (m + bm - 1) / bm; }
  AllReducePlan plan() const {
    return {.rows = m, .cols = n, .comm_rows = bm, .world = static_cast<uint32_t>(world), .method = method,
            .in_place = false, .ready_arrivals = n_tiles()};
  }
  std::string name() const {
    std::ostringstream os;
    os << "GEMM+AR world " << world << (method == ArMethod::kOneShot ? " one-shot" : " two-shot") << " m " << m
       << " n " << n << " k " << k << " tile " << bm << "x" << bn;
    return os.str();
  }
};

// Element (i, j) of A B^T, A m x k and B n x k row-major, accumulated in k order in fp32: the
// "GEMM" and the reference compute it alike, so the sums can be compared bit for bit.
float dot(const std::vector<float>& a, const std::vector<float>& b, uint32_t k, uint32_t i, uint32_t j) {
  float acc = 0.f;
  for (uint32_t kk = 0; kk < k; ++kk) acc += a[size_t(i) * k + kk] * b[size_t(j) * k + kk];
  return acc;
}

std::string run_gemm_ar(const GemmArCase& c, uint64_t seed, int calls) {
  const AllReducePlan plan = c.plan();
  const size_t bytes = plan.elems() * sizeof(float);
  ArWorld w(c.world, plan, "gemm_ar", seed);
  auto& [ex, op, partial, out, recv] = w;
  std::mt19937_64 rng(seed);
  for (uint64_t e = 1; e <= uint64_t(calls); ++e) {
    std::vector<std::vector<float>> a(c.world), b(c.world);
    for (int r = 0; r < c.world; ++r) {
      a[r] = test::random_floats(rng, size_t(c.m) * c.k);
      b[r] = test::random_floats(rng, size_t(c.n) * c.k);
      std::memset(ex.at<float>(r, partial), test::kPoison, bytes);  // a band reduced early reads poison
      std::memset(ex.at<float>(r, out), test::kPoison, bytes);
    }
    const uint32_t tiles = c.m_tiles() * c.n_tiles();
    std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));
    ex.run({{"gemm", c.gemm_blocks,
             [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               const SignalView sig = ex.signals(r, 0, plan.num_channels(), e, op);
               float* p = ex.at<float>(r, partial);
               for (uint32_t i = ctx.block(); i < tiles; i += ctx.num_blocks()) {
                 const uint32_t t = (i + uint32_t(r) * 5) % tiles;  // each rank its own order
                 const uint32_t band = t / c.n_tiles(), col0 = (t % c.n_tiles()) * c.bn;
                 const RowRange rows = plan.chunk_rows(band);
                 for (uint32_t row = rows.row0; row < rows.row0 + rows.rows; ++row) {
                   for (uint32_t col = col0; col < std::min(c.n, col0 + c.bn); ++col) {
                     p[size_t(row) * c.n + col] = dot(a[r], b[r], c.k, row, col);
                   }
                 }
                 ctx.jitter();
                 ctx.producer_tile_notify(sig, plan.ready_channel(band), NotifyMode::kAdd);  // the epilogue's notify
               }
             }},
            {"all_reduce", c.ar_blocks, [&](cpu::BlockCtx& ctx) {
               const int r = ctx.rank();
               all_reduce_block(ctx, plan, ex.signals(r, 0, plan.num_channels(), e, op), ex.heap(r),
                                ex.at<float>(r, partial), ex.at<float>(r, recv), ex.at<float>(r, out),
                                queues[static_cast<size_t>(r)]);
             }}});
    const std::string err = first_mismatch(
        c.name() + ": call " + std::to_string(e), c.world, plan.elems(), c.n,
        [&](uint64_t i) {
          float want = 0.f;
          for (int q = 0; q < c.world; ++q) want += dot(a[q], b[q], c.k, uint32_t(i / c.n), uint32_t(i % c.n));
          return want;
        },
        [&](int r, uint64_t i) { return ex.at<float>(r, out)[i]; });
    if (!err.empty()) return err;
  }
  return "";
}

TEST_P(AllReduceProtocol, GemmTilesAreReducedAsTheyArrive) {
  for (int world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 2u, 7u, 64u}) {
      GemmArCase c;
      c.world = world;
      c.m = m;
      c.bm = m >= 64 ? 16 : 4;
      c.method = GetParam();
      EXPECT_EQ(run_gemm_ar(c, 300 * world + m, 2), "");
    }
  }
}

TEST(AllReducePlan, TwoShotFetchesExactlyTheChunksOthersOwn) {
  for (uint32_t world = 1; world <= 8; ++world) {
    for (uint32_t chunks : {1u, 2u, 7u, 9u, 16u}) {
      const AllReducePlan plan{.rows = chunks, .cols = 4, .comm_rows = 1, .world = world, .method = ArMethod::kTwoShot};
      std::vector<int> seen(chunks, 0);
      for (uint32_t r = 0; r < world; ++r) {
        std::vector<int> mine(chunks, 0);
        for (uint32_t i = 0; i < plan.num_reduced(r); ++i) {
          const uint32_t c = plan.reduced_chunk(r, i);
          ASSERT_LT(c, chunks);
          EXPECT_EQ(plan.owner(c), r);
          ++seen[c];
          ++mine[c];
        }
        for (uint32_t i = 0; i < plan.num_fetched(r); ++i) {
          const uint32_t c = plan.fetched_chunk(r, i);
          ASSERT_LT(c, chunks) << "world " << world << " rank " << r << " fetch " << i;
          EXPECT_NE(plan.owner(c), r);
          ++mine[c];
        }
        for (uint32_t c = 0; c < chunks; ++c) EXPECT_EQ(mine[c], 1) << "world " << world << " rank " << r << " chunk " << c;
      }
      for (uint32_t c = 0; c < chunks; ++c) EXPECT_EQ(seen[c], 1) << "world " << world << " chunk " << c;
    }
  }
}

// Mutation check: a two-shot rank that fetches the owners' sums before it reduces its own chunks,
// without waiting for their "reduced" signals. With one block per rank, the first rank to finish
// fetching did so before any rank began reducing, so it read poison: the comparison must say so.
void fetch_without_waiting(cpu::BlockCtx& ctx, const AllReducePlan& plan, const SignalView& sig,
                           const SymmetricView& heap, float* partial, float* recv, float* out, cpu::WorkQueue&) {
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  for (uint32_t c = 0; c < plan.num_chunks(); ++c) ctx.producer_tile_notify(sig, plan.ready_channel(c));
  for (uint32_t i = 0; i < plan.num_fetched(rank); ++i) {
    const uint32_t c = plan.fetched_chunk(rank, i);
    ctx.tile_pull_data(plan.tile(out, c), heap, plan.tile(out, c), static_cast<int>(plan.owner(c)), plan.chunk_shape(c));
  }
  for (uint32_t i = 0; i < plan.num_reduced(rank); ++i) {
    const uint32_t c = plan.reduced_chunk(rank, i);
    for (uint32_t s = 1; s < plan.world; ++s) {
      const uint32_t q = swizzled_peer(rank, s, plan.world);
      ctx.peer_tile_wait(sig, plan.ready_channel(c), static_cast<int>(q));
      ctx.tile_pull_data(plan.recv_tile(recv, q, c), heap, plan.tile(partial, c), static_cast<int>(q), plan.chunk_shape(c));
    }
    const uint64_t n = uint64_t(plan.chunk_shape(c).rows) * plan.cols;
    float* dst = static_cast<float*>(plan.tile(out, c).ptr);
    for (uint64_t e = 0; e < n; ++e) {
      float acc = 0.f;
      for (uint32_t q = 0; q < plan.world; ++q) {
        const TileRef t = q == rank ? plan.tile(partial, c) : plan.recv_tile(recv, q, c);
        acc += static_cast<const float*>(t.ptr)[e];
      }
      dst[e] = acc;
    }
  }
  rank_exit_barrier(ctx, sig, plan.exit_channel());
}

TEST(AllReduceProtocolMutation, TwoShotWithoutTheOwnersSignalIsCaught) {
  ArCase c;
  c.world = 4;
  c.rows = 32;
  c.comm_rows = 2;
  c.method = ArMethod::kTwoShot;
  c.blocks = 1;
  EXPECT_NE(run_all_reduce(c, 5, 2, fetch_without_waiting), "");
}

}  // namespace
}  // namespace tilelink
