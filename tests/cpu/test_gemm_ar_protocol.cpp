// GEMM+AR's protocol (ops/gemm_ar/gemm_ar_protocol.hpp) on the CPU executor with random delays:
// worlds 1..8, M in {1, 2, 7, 13} (M < world, tail tiles), N with a tail tile, K cut into 1..3
// slices, one-shot and two-shot, with and without the residual + RMSNorm boundary, the GEMM
// notifying per (tile, slice) or the partials in place before the call; several calls (epochs)
// in one executor, fresh inputs and poisoned outputs each. Every rank's sum must be, bit for bit,
// the fp32 sum in order (rank, slice) of the same partials; the norm within float rounding of the
// host's. A two-shot protocol that skips the wait for the owner's sum must be caught. The
// copy-engine path (a stream per rank puts the tile rows and, two-shot, the owners' sums; the
// reduction reads only its own memory; the exit barrier on the stream) gives the same bits. The
// reduce-scatter (`scatter`, GemmRs's small-M engine): each rank's block of rows, the same bits,
// at the top of its out, the rest of out untouched.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "tilelink/executor/cpu_executor.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar_protocol.hpp"

namespace tilelink {
namespace {

struct Case {
  int world = 3;
  uint32_t m = 7, n = 20, k = 6, splits = 2;
  uint32_t bm = 4, bn = 8, parts = 1;
  ArMethod method = ArMethod::kOneShot;
  bool norm = false, in_place = false, skip_owner_wait = false, copy_engine = false, scatter = false;
  // Only the last reduction block of the last rank starts with the others; that rank's other
  // blocks start once it has finished (blocks that MPS never made resident beside it).
  bool late_blocks = false;
  uint32_t gemm_blocks = 2, reduce_blocks = 3;

  GemmArPlan plan() const {
    GemmArPlan p;
    p.world = static_cast<uint32_t>(world);
    p.m = m;
    p.n = n;
    p.bm = bm;
    p.bn = bn;
    p.splits = splits;
    p.method = method;
    p.norm = norm;
    p.in_place = in_place;
    p.parts = parts;
    p.copy_engine = copy_engine;
    p.scatter = scatter;
    return p;
  }
  std::string name() const {
    std::ostringstream os;
    os << "world " << world << (scatter ? " reduce-scatter" : method == ArMethod::kOneShot ? " one-shot" : " two-shot")
       << " m " << m << " n " << n
       << " splits " << splits << " parts " << parts << (norm ? " norm" : "") << (in_place ? " in place" : " gemm-fed")
       << (copy_engine ? " copy-engine" : "") << (late_blocks ? " late blocks" : "");
    return os.str();
  }
};

constexpr float kEps = 1e-5f;

// Slice s of element (i, j) of A B^T: k / splits products accumulated in k order.
float slice_dot(const std::vector<float>& a, const std::vector<float>& b, const Case& c, uint32_t s, uint32_t i,
                uint32_t j) {
  const uint32_t ks = c.k / c.splits;
  float acc = 0.f;
  for (uint32_t kk = s * ks; kk < (s + 1) * ks; ++kk) acc += a[size_t(i) * c.k + kk] * b[size_t(j) * c.k + kk];
  return acc;
}

std::string run(const Case& c, uint64_t seed, int calls) {
  const GemmArPlan plan = c.plan();
  const size_t elems = plan.elems(), bytes = elems * 4;
  const size_t recv_bytes = size_t(c.world) * c.splits * bytes;
  cpu::Executor ex(c.world, (c.splits + 6) * bytes + recv_bytes + 4096, plan.num_channels(), test::stress_options(seed));
  const uint32_t op = ex.register_op("gemm_ar");
  const size_t partial = ex.allocate(c.splits * bytes), reduced = ex.allocate(bytes), out = ex.allocate(bytes);
  const size_t recv = ex.allocate(recv_bytes);
  const size_t residual = ex.allocate(bytes), residual_out = ex.allocate(bytes), weight = ex.allocate(c.n * 4);
  std::mt19937_64 rng(seed);
  std::vector<cpu::WorkQueue> queues(static_cast<size_t>(c.world));  // per rank, across the calls
  for (uint64_t e = 1; e <= uint64_t(calls); ++e) {
    std::vector<std::atomic<bool>> resident_done(static_cast<size_t>(c.world));
    std::vector<std::vector<float>> a(c.world), b(c.world);
    const std::vector<float> res = test::random_floats(rng, elems), g = test::random_floats(rng, c.n);
    for (int r = 0; r < c.world; ++r) {
      a[r] = test::random_floats(rng, size_t(c.m) * c.k);
      b[r] = test::random_floats(rng, size_t(c.n) * c.k);
      std::memset(ex.at<float>(r, partial), test::kPoison, c.splits * bytes);
      std::memset(ex.at<float>(r, recv), test::kPoison, recv_bytes);
      for (size_t off : {reduced, out, residual_out}) std::memset(ex.at<float>(r, off), test::kPoison, bytes);
      std::memcpy(ex.at<float>(r, residual), res.data(), bytes);
      std::memcpy(ex.at<float>(r, weight), g.data(), c.n * 4);
      if (c.in_place) {  // a GEMM that ran before the call and notified nothing
        for (uint32_t s = 0; s < c.splits; ++s) {
          for (size_t i = 0; i < elems; ++i) {
            ex.at<float>(r, partial)[s * elems + i] = slice_dot(a[r], b[r], c, s, uint32_t(i / c.n), uint32_t(i % c.n));
          }
        }
      }
    }
    std::vector<cpu::Role> roles;
    if (!c.in_place) {
      roles.push_back({"gemm", c.gemm_blocks, [&](cpu::BlockCtx& ctx) {
                         const int r = ctx.rank();
                         const SignalView sig = ex.signals(r, 0, plan.num_channels(), e, op);
                         const uint32_t units = plan.tiles() * c.splits;
                         for (uint32_t i = ctx.block(); i < units; i += ctx.num_blocks()) {
                           const uint32_t u = (i + uint32_t(r) * 3) % units;  // each rank its own order
                           const uint32_t t = u % plan.tiles(), s = u / plan.tiles();
                           const RowRange rows = plan.tile_rows(t), cols = plan.tile_cols(t);
                           for (uint32_t row = rows.row0; row < rows.row0 + rows.rows; ++row) {
                             for (uint32_t col = cols.row0; col < cols.row0 + cols.rows; ++col) {
                               ex.at<float>(r, partial)[s * elems + size_t(row) * c.n + col] =
                                   slice_dot(a[r], b[r], c, s, row, col);
                             }
                           }
                           ctx.jitter();
                           ctx.producer_tile_notify(sig, plan.ready_channel(t), NotifyMode::kAdd);
                         }
                       }});
    }
    // The copy-engine path runs on one stream per rank: the pushes, then the reduction kernel (one
    // block stands for it), the two-shot gather and finishing kernel, the exit barrier.
    roles.push_back({c.copy_engine ? "stream" : "reduce", c.copy_engine ? 1u : c.reduce_blocks, [&](cpu::BlockCtx& ctx) {
                       const int r = ctx.rank();
                       const bool late = c.late_blocks && r == c.world - 1;
                       if (late && ctx.block() + 1 != ctx.num_blocks()) {
                         test::hold_until([&] { return resident_done[static_cast<size_t>(r)].load(); });
                       }
                       const SignalView sig = ex.signals(r, 0, plan.num_channels(), e, op);
                       const SymmetricView heap = ex.heap(r);
                       cpu::WorkQueue& queue = queues[static_cast<size_t>(r)];
                       float* dest = ex.at<float>(r, c.norm ? residual_out : out);
                       const uint32_t out_row0 = plan.owned(uint32_t(r)).row0;  // 0 unless scatter
                       auto reduce_tile = [&](uint32_t, RowRange rows, RowRange cols) {
                         for (uint32_t row = rows.row0; row < rows.row0 + rows.rows; ++row) {
                           if (c.scatter && (row < out_row0 || row >= out_row0 + plan.owned(uint32_t(r)).rows)) {
                             ADD_FAILURE() << c.name() << ": rank " << r << " asked to sum row " << row
                                           << " outside its block";
                           }
                           for (uint32_t col = cols.row0; col < cols.row0 + cols.rows; ++col) {
                             const size_t at = size_t(row) * c.n + col;
                             float acc = 0.f;
                             for (int q = 0; q < c.world; ++q) {
                               const float* src = q == r          ? ex.at<float>(r, partial)
                                                  : c.copy_engine ? ex.at<float>(r, recv) + size_t(q) * c.splits * elems
                                                                  : heap.translate(ex.at<float>(r, partial), q);
                               for (uint32_t s = 0; s < c.splits; ++s) acc += src[s * elems + at];
                             }
                             if (c.norm) acc += ex.at<float>(r, residual)[at];
                             dest[at - size_t(out_row0) * c.n] = acc;
                             if (c.method == ArMethod::kTwoShot) ex.at<float>(r, reduced)[at] = acc;
                           }
                         }
                       };
                       auto fetch_tile = [&](uint32_t, uint32_t owner, RowRange rows, RowRange cols) {
                         const float* src = c.copy_engine ? ex.at<float>(r, reduced)
                                                          : heap.translate(ex.at<float>(r, reduced), int(owner));
                         for (uint32_t row = rows.row0; row < rows.row0 + rows.rows; ++row) {
                           for (uint32_t col = cols.row0; col < cols.row0 + cols.rows; ++col) {
                             dest[size_t(row) * c.n + col] = src[size_t(row) * c.n + col];
                           }
                         }
                       };
                       auto norm_row = [&](uint32_t row) {
                         float ss = 0.f;
                         for (uint32_t col = 0; col < c.n; ++col) ss += dest[size_t(row) * c.n + col] * dest[size_t(row) * c.n + col];
                         const float inv = 1.f / std::sqrt(ss / float(c.n) + kEps);
                         for (uint32_t col = 0; col < c.n; ++col) {
                           ex.at<float>(r, out)[size_t(row) * c.n + col] = dest[size_t(row) * c.n + col] * inv * g[col];
                         }
                       };
                       if (c.skip_owner_wait) {  // a broken two-shot: copies the owners' sums without waiting
                         const uint32_t rank = uint32_t(r);
                         for (uint32_t i = ctx.block(); i < plan.num_reduced(rank); i += ctx.num_blocks()) {
                           const uint32_t t = plan.reduced_tile(rank, i);
                           for (int q = 0; q < c.world; ++q) {
                             ctx.peer_tile_wait(sig, plan.ready_channel(t), q, plan.ready_arrivals(), int32_t(t));
                           }
                           reduce_tile(t, plan.tile_rows(t), plan.tile_cols(t));
                           ctx.producer_tile_notify(sig, plan.reduced_channel(t), NotifyMode::kAdd);
                         }
                         for (uint32_t i = ctx.block(); i < plan.num_fetched(rank); i += ctx.num_blocks()) {
                           const uint32_t t = plan.fetched_tile(rank, i);
                           fetch_tile(t, plan.owner(t), plan.tile_rows(t), plan.tile_cols(t));
                         }
                         rank_exit_barrier(ctx, sig, plan.exit_channel());
                         return;
                       }
                       if (!c.copy_engine) {
                         gemm_ar_reduce_block(ctx, plan, sig, queue, reduce_tile, fetch_tile, norm_row);
                         if (late) resident_done[static_cast<size_t>(r)].store(true);
                         return;
                       }
                       gemm_ar_copy_engine_push(ctx, plan, sig, heap, ex.at<float>(r, partial), ex.at<float>(r, recv), 4);
                       if (c.method == ArMethod::kOneShot) {
                         gemm_ar_reduce_block(ctx, plan, sig, queue, reduce_tile, fetch_tile, norm_row);
                       } else {
                         gemm_ar_reduce_block(ctx, plan, sig, queue, reduce_tile, fetch_tile, norm_row, GemmArPass::kReduce);
                         gemm_ar_copy_engine_gather(ctx, plan, sig, heap, ex.at<float>(r, reduced), 4);
                         gemm_ar_reduce_block(ctx, plan, sig, queue, reduce_tile, fetch_tile, norm_row, GemmArPass::kFinish);
                       }
                       if (c.world > 1) rank_exit_barrier_stream(ctx, sig, plan.exit_channel());
                     }});
    ex.run(roles);
    for (int r = 0; r < c.world; ++r) {
      if (queues[static_cast<size_t>(r)].value() != 0) {
        std::ostringstream os;
        os << c.name() << ": call " << e << ", rank " << r << " left its work queue at "
           << queues[static_cast<size_t>(r)].value() << " (the last drawer resets it to 0)";
        return os.str();
      }
    }

    // The sum in order (rank, slice), as the reduction computes it; then residual, then the norm.
    std::vector<float> h(elems);
    for (size_t i = 0; i < elems; ++i) {
      float acc = 0.f;
      for (int q = 0; q < c.world; ++q) {
        for (uint32_t s = 0; s < c.splits; ++s) acc += slice_dot(a[q], b[q], c, s, uint32_t(i / c.n), uint32_t(i % c.n));
      }
      h[i] = c.norm ? acc + res[i] : acc;
    }
    for (int r = 0; r < c.world; ++r) {
      const float* got_h = ex.at<float>(r, c.norm ? residual_out : out);
      const RowRange own = plan.owned(uint32_t(r));  // every row, unless scatter
      for (size_t i = 0; i < elems; ++i) {
        if (i >= size_t(own.rows) * c.n) {  // past the rank's block: untouched
          uint32_t poison;
          std::memset(&poison, test::kPoison, 4);
          if (std::memcmp(&got_h[i], &poison, 4) != 0) {
            std::ostringstream os;
            os << c.name() << ": call " << e << ", rank " << r << " wrote out's element " << i << " past its "
               << own.rows << " rows";
            return os.str();
          }
          continue;
        }
        const size_t want = i + size_t(own.row0) * c.n;
        if (std::memcmp(&got_h[i], &h[want], 4) != 0) {
          std::ostringstream os;
          os << c.name() << ": call " << e << ", rank " << r << " row " << want / c.n << " col " << i % c.n
             << ": got " << got_h[i] << ", expected " << h[want];
          return os.str();
        }
      }
      if (!c.norm) continue;
      for (uint32_t row = 0; row < c.m; ++row) {
        double ss = 0;
        for (uint32_t col = 0; col < c.n; ++col) ss += double(h[size_t(row) * c.n + col]) * h[size_t(row) * c.n + col];
        const double inv = 1.0 / std::sqrt(ss / c.n + kEps);
        for (uint32_t col = 0; col < c.n; ++col) {
          const double want = h[size_t(row) * c.n + col] * inv * g[col];
          const float got = ex.at<float>(r, out)[size_t(row) * c.n + col];
          if (!(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want)))) {
            std::ostringstream os;
            os << c.name() << ": call " << e << ", rank " << r << " norm row " << row << " col " << col << ": got "
               << got << ", expected " << want;
            return os.str();
          }
        }
      }
    }
  }
  return "";
}

class GemmArProtocol : public ::testing::TestWithParam<ArMethod> {};

TEST_P(GemmArProtocol, EveryWorldRowCountSliceAndBoundary) {
  for (int world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 2u, 7u, 13u}) {
      for (uint32_t splits : {1u, 3u}) {
        for (bool norm : {false, true}) {
          Case c;
          c.world = world;
          c.m = m;
          c.splits = splits;
          c.method = GetParam();
          c.norm = norm;
          EXPECT_EQ(run(c, 7000 * world + 10 * m + splits + (norm ? 5 : 0), 2), "");
        }
      }
    }
  }
}

TEST_P(GemmArProtocol, TilesCutIntoPartsAcrossBlocks) {
  // Parts of 8 columns (16-column tiles, n with a tail), more blocks than tiles.
  for (int world : {1, 3, 8}) {
    for (uint32_t m : {1u, 6u}) {
      for (uint32_t parts : {2u, 4u}) {
        Case c;
        c.world = world;
        c.m = m;
        c.n = 40;
        c.bn = 16;
        c.parts = parts == 4 ? 2 : parts;  // bn / parts columns must stay a multiple of 8
        c.method = GetParam();
        c.norm = m == 6;
        c.reduce_blocks = 5;
        EXPECT_EQ(run(c, 500 * world + 10 * m + parts, 2), "");
      }
    }
  }
}

TEST_P(GemmArProtocol, PartialsInPlaceBeforeTheCall) {
  for (int world : {1, 2, 5, 8}) {
    for (uint32_t m : {1u, 9u}) {
      Case c;
      c.world = world;
      c.m = m;
      c.method = GetParam();
      c.in_place = true;
      c.norm = m == 9;
      c.reduce_blocks = 1 + m % 3;
      EXPECT_EQ(run(c, 900 * world + m, 3), "");
    }
  }
}

TEST_P(GemmArProtocol, CopyEnginePathGivesTheSameBits) {
  // The put-with-signal transport's path: worlds 1-8, M < world and tail tile rows, slices, the
  // norm, fed by the GEMM's notifies or in place.
  for (int world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 7u, 13u}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.world = world;
        c.m = m;
        c.splits = 1 + m % 3;
        c.method = GetParam();
        c.norm = (m + world) % 2 == 0;
        c.in_place = in_place;
        c.copy_engine = true;
        EXPECT_EQ(run(c, 3100 * world + 10 * m + (in_place ? 1 : 0), 2), "");
      }
    }
  }
}

TEST_P(GemmArProtocol, OneResidentBlockDoesTheRanksWork) {
  // The last rank's blocks but one start only after that one has finished: the work is taken from
  // the rank's queue, not bound to block indices, so the one block sums, copies and normalises
  // everything, and announces the in-place partial, which peers wait for meanwhile.
  for (int world : {1, 2, 3, 5}) {
    for (uint32_t m : {1u, 7u, 13u}) {
      for (int variant = 0; variant < 3; ++variant) {
        Case c;
        c.world = world;
        c.m = m;
        c.method = GetParam();
        c.late_blocks = true;
        c.norm = variant != 1;
        c.in_place = variant >= 1;
        c.reduce_blocks = 4;
        EXPECT_EQ(run(c, 6100 * world + 10 * m + variant, 2), "");
      }
    }
  }
}

TEST(GemmArWork, UnitsAreTheTilesPartsAndRowGroupsOfEachPass) {
  for (uint32_t blocks : {1u, 3u, 8u}) {
    for (bool ce : {false, true}) {
      Case c;
      c.m = 13;
      c.n = 40;
      c.bn = 16;
      c.parts = 2;
      c.method = ArMethod::kTwoShot;
      c.norm = c.in_place = true;
      c.copy_engine = ce;
      const GemmArPlan plan = c.plan();
      for (uint32_t r = 0; r < 3; ++r) {
        const GemmArWork all = gemm_ar_work(plan, r, GemmArPass::kAll, blocks);
        EXPECT_EQ(all.announce, ce ? 0u : 1u);
        EXPECT_EQ(all.reduce, plan.num_reduced(r) * 2);
        EXPECT_EQ(all.fetch, ce ? 0u : plan.num_fetched(r) * 2);
        EXPECT_GE(all.norm * all.group_rows, plan.m);
        EXPECT_LT((all.norm - 1) * all.group_rows, plan.m);
        EXPECT_LE(all.norm, 2 * blocks);
        const GemmArWork reduce = gemm_ar_work(plan, r, GemmArPass::kReduce, blocks);
        EXPECT_EQ(reduce.total(), reduce.announce + plan.num_reduced(r) * 2);
        const GemmArWork finish = gemm_ar_work(plan, r, GemmArPass::kFinish, blocks);
        EXPECT_EQ(finish.announce + finish.reduce, 0u);
        EXPECT_EQ(finish.fetch, plan.num_fetched(r) * 2);
        EXPECT_EQ(finish.norm, all.norm);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, GemmArProtocol, ::testing::Values(ArMethod::kOneShot, ArMethod::kTwoShot),
                         [](const auto& info) { return std::string(info.param == ArMethod::kOneShot ? "OneShot" : "TwoShot"); });

TEST(GemmArProtocolScatter, EachRankGetsItsBlockOfRows) {
  // GemmRs's small-M engine: worlds 1-8, M < world (ranks with no rows), blocks that split a tile
  // row and blocks of several tile rows, slices, parts, fed by the GEMM or in place, both paths.
  for (int world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 5u, 13u, 30u}) {
      for (int variant = 0; variant < 4; ++variant) {
        Case c;
        c.world = world;
        c.m = m;
        c.scatter = true;
        c.splits = 1 + (m + variant) % 3;
        c.in_place = variant % 2 == 1;
        c.copy_engine = variant >= 2;
        if (variant == 1) {  // parts of 8 columns, more blocks than tiles
          c.n = 40;
          c.bn = 16;
          c.parts = 2;
          c.reduce_blocks = 5;
        }
        EXPECT_EQ(run(c, 4200 * world + 10 * m + variant, 2), "");
      }
    }
  }
}

TEST(GemmArProtocolScatter, RandomTilesPartsAndBlocks) {
  // Drawn shapes: tile sizes that cut the owners' blocks anywhere, parts, slices, block counts of
  // both roles, in place or fed by the GEMM, both paths; the draw is printed with any failure.
  std::mt19937_64 draw(0x5CA77E5);
  auto pick = [&](uint32_t lo, uint32_t hi) { return lo + uint32_t(draw() % (hi - lo + 1)); };
  for (int i = 0; i < 60; ++i) {
    Case c;
    c.scatter = true;
    c.world = int(pick(1, 8));
    c.m = pick(1, 40);
    c.bm = pick(1, 12);
    c.parts = 1u << pick(0, 2);
    c.bn = 8 * c.parts * pick(1, 2);  // a part is a multiple of 8 columns
    c.n = 8 * pick(1, 6);
    c.splits = pick(1, 3);
    c.k = 2 * c.splits;
    c.in_place = pick(0, 1) == 1;
    c.copy_engine = pick(0, 2) == 0;
    c.gemm_blocks = pick(1, 4);
    c.reduce_blocks = pick(1, 6);
    EXPECT_EQ(run(c, 9000 + i, 2), "") << "draw " << i << ": " << c.name() << ", bm " << c.bm << " bn " << c.bn;
  }
}

TEST(GemmArProtocolCheck, ATwoShotCopyBeforeTheOwnersSumIsCaught) {
  // Copying an owner's tile without waiting reads poison (or the previous call's sum) on some run.
  int caught = 0;
  for (uint64_t seed = 1; seed <= 6 && caught == 0; ++seed) {
    Case c;
    c.world = 4;
    c.m = 13;
    c.method = ArMethod::kTwoShot;
    c.skip_owner_wait = true;
    caught += run(c, seed, 2).empty() ? 0 : 1;
  }
  EXPECT_GT(caught, 0) << "a two-shot copy that does not wait for the owner's sum went unnoticed";
}

TEST(GemmArPlan, EveryTileIsReducedOnceAndFetchedByEveryOtherRank) {
  for (uint32_t world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 5u, 40u, 41u}) {
      GemmArPlan plan;
      plan.world = world;
      plan.m = m;
      plan.n = 24;
      plan.bm = 4;
      plan.bn = 8;
      plan.method = ArMethod::kTwoShot;
      plan.copy_engine = m >= 40;  // by tile row (10 or 11 of them) instead of by tile
      std::vector<int> reduced(plan.tiles(), 0);
      for (uint32_t r = 0; r < world; ++r) {
        std::vector<int> seen(plan.tiles(), 0);
        for (uint32_t i = 0; i < plan.num_reduced(r); ++i) {
          const uint32_t t = plan.reduced_tile(r, i);
          ASSERT_LT(t, plan.tiles());
          EXPECT_EQ(plan.owner(t), r);
          ++reduced[t];
          ++seen[t];
        }
        for (uint32_t i = 0; i < plan.num_fetched(r); ++i) {
          const uint32_t t = plan.fetched_tile(r, i);
          ASSERT_LT(t, plan.tiles());
          EXPECT_NE(plan.owner(t), r);
          ++seen[t];
        }
        for (uint32_t t = 0; t < plan.tiles(); ++t) EXPECT_EQ(seen[t], 1) << "world " << world << " rank " << r << " tile " << t;
      }
      for (uint32_t t = 0; t < plan.tiles(); ++t) EXPECT_EQ(reduced[t], 1);
    }
  }
}

TEST(GemmArPlan, TheScatterBlocksCoverEveryRowOnce) {
  for (uint32_t world = 1; world <= 8; ++world) {
    for (uint32_t m : {1u, 3u, 8u, 13u, 64u, 100u}) {
      GemmArPlan plan;
      plan.world = world;
      plan.m = m;
      plan.n = 24;
      plan.bm = 8;
      plan.bn = 8;
      plan.scatter = true;
      std::vector<int> summed(m, 0);
      for (uint32_t r = 0; r < world; ++r) {
        const RowRange own = plan.owned(r);
        EXPECT_LE(own.rows, plan.rows_per_rank());
        for (uint32_t i = 0; i < plan.num_reduced(r); ++i) {
          const uint32_t t = plan.reduced_tile(r, i);
          ASSERT_LT(t, plan.tiles());
          const RowRange rows = plan.reduced_rows(r, t);
          EXPECT_GT(rows.rows, 0u) << "world " << world << " m " << m << " rank " << r << " tile " << t;
          EXPECT_GE(rows.row0, own.row0);
          EXPECT_LE(rows.row0 + rows.rows, own.row0 + own.rows);
          if (t % plan.n_tiles() == 0) {
            for (uint32_t row = rows.row0; row < rows.row0 + rows.rows; ++row) ++summed[row];
          }
        }
        EXPECT_EQ(plan.num_fetched(r), 0u);
      }
      for (uint32_t row = 0; row < m; ++row) EXPECT_EQ(summed[row], 1) << "world " << world << " m " << m << " row " << row;
    }
  }
}

}  // namespace
}  // namespace tilelink
