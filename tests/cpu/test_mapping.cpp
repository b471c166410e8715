// Mappings (mapping/mapping.hpp) against brute-force per-row tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tilelink/mapping/mapping.hpp"
#include "tilelink/mapping/split_tail.hpp"

namespace tilelink {
namespace {

// owner[row] = channel, built by walking ranks and their communication tiles in order, without
// the mapping's arithmetic.
std::vector<uint32_t> brute_force_owner(uint32_t rows_per_rank, uint32_t comm_rows, uint32_t world) {
  std::vector<uint32_t> owner;
  uint32_t ch = 0;
  for (uint32_t r = 0; r < world; ++r) {
    uint32_t in_tile = 0;
    for (uint32_t i = 0; i < rows_per_rank; ++i) {
      if (i > 0 && in_tile == comm_rows) {
        ++ch;
        in_tile = 0;
      }
      owner.push_back(ch);
      ++in_tile;
    }
    ++ch;  // the next rank starts a new tile
  }
  return owner;
}

ChannelRange brute_force_range(const std::vector<uint32_t>& owner, uint64_t row0, uint64_t rows) {
  const uint64_t end = std::min<uint64_t>(row0 + rows, owner.size());
  if (row0 >= end) return {0, 0};
  std::set<uint32_t> chans(owner.begin() + row0, owner.begin() + end);
  return {*chans.begin(), static_cast<uint32_t>(chans.size())};
}

TEST(RowShardMapping, ChannelsForRowsMatchBruteForce) {
  std::mt19937_64 rng(20261202);
  for (int iter = 0; iter < 3000; ++iter) {
    const uint32_t world = 1 + rng() % 8;
    const uint32_t rows_per_rank = 1 + rng() % 40;
    const uint32_t comm_rows = 1 + rng() % 50;  // also > rows_per_rank and not dividing it
    const RowShardMapping m{rows_per_rank, comm_rows, world};
    const auto owner = brute_force_owner(rows_per_rank, comm_rows, world);
    ASSERT_EQ(owner.size(), m.total_rows());
    ASSERT_EQ(owner.back() + 1, m.num_channels());
    for (int q = 0; q < 20; ++q) {
      const uint32_t row0 = rng() % (m.total_rows() + 4);
      const uint32_t rows = rng() % (m.total_rows() + 4);
      const ChannelRange got = m.channels_for_rows(row0, rows);
      const ChannelRange want = brute_force_range(owner, row0, rows);
      ASSERT_EQ(got.count, want.count) << "rpr " << rows_per_rank << " comm_rows " << comm_rows
                                       << " world " << world << " rows [" << row0 << ", +" << rows << ")";
      if (want.count > 0) {
        ASSERT_EQ(got.first, want.first) << "rpr " << rows_per_rank << " comm_rows " << comm_rows
                                         << " world " << world << " rows [" << row0 << ", +" << rows << ")";
      }
    }
  }
}

TEST(RowShardMapping, ComputeTileAcrossShardBoundary) {
  // 10 rows per rank in tiles of 4: rank 0 = ch 0 (rows 0-3), 1 (4-7), 2 (8-9); rank 1 = ch 3..5.
  const RowShardMapping m{10, 4, 3};
  EXPECT_EQ(m.chunks_per_rank(), 3u);
  const ChannelRange r = m.channels_for_rows(6, 8);  // rows 6..13: ch 1, 2 (rank 0), 3 (rank 1)
  EXPECT_EQ(r.first, 1u);
  EXPECT_EQ(r.count, 3u);
  const ChannelRange tail = m.channels_for_rows(28, 16);  // clipped to the last two rows
  EXPECT_EQ(tail.first, 8u);
  EXPECT_EQ(tail.count, 1u);
  EXPECT_EQ(m.channels_for_rows(30, 5).count, 0u);
  EXPECT_EQ(m.channels_for_rows(3, 0).count, 0u);
}

// A row count that reaches past 2^32 must be clipped to the tensor, not wrap to an empty range.
TEST(RowShardMapping, RowCountsThatOverflowAreClipped) {
  // "rows clipped to the tensor": a consumer asking for everything from row0 on.
  const RowShardMapping m{10, 4, 3};
  const ChannelRange r = m.channels_for_rows(5, UINT32_MAX);
  EXPECT_EQ(r.first, 1u);
  EXPECT_EQ(r.count, m.num_channels() - 1) << "row0 + rows wrapped around in channels_for_rows";
}

TEST(RowShardMapping, RowsOfChannelCoverEveryRowOnce) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    const uint32_t world = 1 + rng() % 8;
    const RowShardMapping m{static_cast<uint32_t>(1 + rng() % 40), static_cast<uint32_t>(1 + rng() % 50), world};
    const auto owner = brute_force_owner(m.rows_per_rank, m.comm_rows, world);
    std::vector<int> hits(m.total_rows(), 0);
    for (uint32_t ch = 0; ch < m.num_channels(); ++ch) {
      const RowRange rr = m.rows_of_channel(ch);
      ASSERT_GE(rr.rows, 1u);
      ASSERT_LE(rr.rows, m.comm_rows);
      ASSERT_EQ(m.rank_of_channel(ch), rr.row0 / m.rows_per_rank);
      ASSERT_EQ(m.rank_of_row(rr.row0 + rr.rows - 1), m.rank_of_channel(ch)) << "tile crosses a shard";
      for (uint32_t row = rr.row0; row < rr.row0 + rr.rows; ++row) {
        ASSERT_LT(row, m.total_rows());
        ++hits[row];
        ASSERT_EQ(owner[row], ch);
        ASSERT_EQ(m.channel_of_row(row), ch);
      }
    }
    for (uint32_t row = 0; row < m.total_rows(); ++row) ASSERT_EQ(hits[row], 1) << "row " << row;
  }
}

TEST(TableMapping, CsrLookups) {
  // tile 0 -> {4, 1}, tile 1 -> {}, tile 2 -> {0, 2, 3}
  const std::vector<uint32_t> offsets{0, 2, 2, 5};
  const std::vector<uint32_t> channels{4, 1, 0, 2, 3};
  const TableMapping t{offsets.data(), channels.data(), 3};
  EXPECT_EQ(t.count(0), 2u);
  EXPECT_EQ(t.count(1), 0u);
  EXPECT_EQ(t.count(2), 3u);
  EXPECT_EQ(t.channel(0, 0), 4u);
  EXPECT_EQ(t.channel(0, 1), 1u);
  EXPECT_EQ(t.channel(2, 0), 0u);
  EXPECT_EQ(t.channel(2, 2), 3u);
}

TEST(TableMapping, AgreesWithRowShardMappingWhenBuiltFromIt) {
  // A table built from the static mapping names the same channels, tile by tile.
  const RowShardMapping m{13, 5, 5};
  const uint32_t bm = 7;
  const uint32_t tiles = (m.total_rows() + bm - 1) / bm;
  std::vector<uint32_t> offsets{0}, channels;
  for (uint32_t t = 0; t < tiles; ++t) {
    for (uint32_t row = t * bm; row < std::min(m.total_rows(), (t + 1) * bm); ++row) {
      if (channels.size() == offsets.back() || channels.back() != m.channel_of_row(row)) {
        channels.push_back(m.channel_of_row(row));
      }
    }
    offsets.push_back(static_cast<uint32_t>(channels.size()));
  }
  const TableMapping table{offsets.data(), channels.data(), tiles};
  for (uint32_t t = 0; t < tiles; ++t) {
    const ChannelRange r = m.channels_for_rows(t * bm, bm);
    ASSERT_EQ(table.count(t), r.count) << "tile " << t;
    for (uint32_t i = 0; i < r.count; ++i) EXPECT_EQ(table.channel(t, i), r.first + i);
  }
}

TEST(CommOrder, SwizzledPeerIsAPermutationAtEveryStep) {
  for (uint32_t world = 1; world <= 9; ++world) {
    for (uint32_t step = 0; step < world; ++step) {
      std::set<uint32_t> targets;
      for (uint32_t rank = 0; rank < world; ++rank) {
        const uint32_t p = swizzled_peer(rank, step, world);
        ASSERT_LT(p, world);
        if (step == 0) {
          EXPECT_EQ(p, rank) << "step 0 is the rank itself";
        }
        targets.insert(p);
      }
      EXPECT_EQ(targets.size(), world) << "world " << world << " step " << step;
    }
    for (uint32_t rank = 0; rank < world; ++rank) {
      std::set<uint32_t> visited;
      for (uint32_t step = 0; step < world; ++step) visited.insert(swizzled_peer(rank, step, world));
      EXPECT_EQ(visited.size(), world) << "rank " << rank << " must visit every rank once";
    }
  }
}

TEST(CommOrder, RingOriginFollowsTheRing) {
  for (uint32_t world = 1; world <= 9; ++world) {
    for (uint32_t step = 0; step < world; ++step) {
      std::set<uint32_t> origins;
      for (uint32_t rank = 0; rank < world; ++rank) {
        const uint32_t o = ring_origin(rank, step, world);
        ASSERT_LT(o, world);
        if (step == 0) {
          EXPECT_EQ(o, rank);
        } else {
          // What this rank handles at step s, its predecessor handled at step s - 1.
          EXPECT_EQ(o, ring_origin((rank + world - 1) % world, step - 1, world));
        }
        origins.insert(o);
      }
      EXPECT_EQ(origins.size(), world) << "world " << world << " step " << step;
    }
    for (uint32_t rank = 0; rank < world; ++rank) {
      std::set<uint32_t> seen;
      for (uint32_t step = 0; step < world; ++step) seen.insert(ring_origin(rank, step, world));
      EXPECT_EQ(seen.size(), world);
    }
    // Steps past a full turn wrap around.
    EXPECT_EQ(ring_origin(0, world + 1, world), ring_origin(0, 1, world));
  }
}

// The grouped GEMM's banded walk: every cell exactly once, a band's rows before the next band,
// within a band column by column (each of the band's rows at one column before the next column).
TEST(BandedCell, WalksEveryCellOnceBandByBandColumnByColumn) {
  for (uint32_t rows = 1; rows <= 21; ++rows) {
    for (uint32_t cols = 1; cols <= 9; ++cols) {
      for (uint32_t band : {0u, 1u, 2u, 3u, 4u, 8u, 16u}) {
        std::set<std::pair<uint32_t, uint32_t>> seen;
        GridCell prev{};
        for (uint64_t c = 0; c < uint64_t(rows) * cols; ++c) {
          const GridCell cell = banded_cell(c, rows, cols, band);
          ASSERT_LT(cell.row, rows) << "c " << c << " band " << band;
          ASSERT_LT(cell.col, cols) << "c " << c << " band " << band;
          seen.insert({cell.row, cell.col});
          const uint32_t b = band <= 1 ? 1 : band;
          if (c == 0) {
            EXPECT_EQ(cell.row, 0u);
            EXPECT_EQ(cell.col, 0u);
          } else if (cell.row / b == prev.row / b) {  // same band: down its rows, then the next column
            const uint32_t band_rows = std::min(b, rows - cell.row / b * b);
            if (cell.col == prev.col) {
              EXPECT_EQ(cell.row, prev.row + 1) << "c " << c;
            } else {
              EXPECT_EQ(cell.col, prev.col + 1) << "c " << c;
              EXPECT_EQ(prev.row % b, band_rows - 1) << "c " << c;
              EXPECT_EQ(cell.row % b, 0u) << "c " << c;
            }
          } else {  // the next band starts at its first row, column 0, after the last column
            EXPECT_EQ(cell.row / b, prev.row / b + 1) << "c " << c;
            EXPECT_EQ(cell.row % b, 0u);
            EXPECT_EQ(cell.col, 0u);
            EXPECT_EQ(prev.col, cols - 1);
          }
          prev = cell;
        }
        EXPECT_EQ(seen.size(), size_t(rows) * cols) << rows << "x" << cols << " band " << band;
      }
    }
  }
  // Row by row is the plain row-major order.
  EXPECT_EQ(banded_cell(7, 4, 3, 1).row, 2u);
  EXPECT_EQ(banded_cell(7, 4, 3, 1).col, 1u);
}

// The split tail (Sm90SplitTailTileScheduler): the paper's AG+GEMM 8192 x 14336 x 4096 at world 1
// is 3584 CTA tiles on 132 CTAs -- 27 whole waves and 20 tail tiles, each cut into 6 runs of its 64
// K tiles; and the cases where nothing splits.
TEST(SplitTail, CutsOnlyAPartialLastWave) {
  const SplitTail paper = plan_split_tail(3584, 132, 64, 8, 4);
  EXPECT_EQ(paper.full, 3564u);
  EXPECT_EQ(paper.tail, 20u);
  EXPECT_EQ(paper.splits, 6u);  // 132 / 20
  EXPECT_EQ(paper.full + paper.tail, 3584u);
  EXPECT_LE(paper.tail * paper.splits, 132u);  // at most one run per CTA
  EXPECT_EQ(plan_split_tail(3584, 132, 64, 4, 4).splits, 4u);   // max_splits
  EXPECT_EQ(plan_split_tail(3584, 132, 12, 8, 4).splits, 3u);   // K tiles / min_k_tiles
  for (const SplitTail s : {plan_split_tail(264, 132, 64, 8, 4),     // whole waves
                            plan_split_tail(100, 132, 64, 8, 4),     // less than one wave
                            plan_split_tail(132 + 70, 132, 64, 8, 4),  // 132 / 70 = 1 run
                            plan_split_tail(3584, 132, 7, 8, 4),       // 7 K tiles: one run of 4
                            plan_split_tail(3584, 132, 64, 1, 4)}) {   // off
    EXPECT_EQ(s.splits, 1u);
    EXPECT_EQ(s.tail, 0u);
  }
  EXPECT_EQ(plan_split_tail(264, 132, 64, 8, 4).full, 264u);
}

// The runs of a tail tile cover its K tiles once, in order, each within one of the others' length.
TEST(SplitTail, RunsCoverEveryKTileOnce) {
  for (uint32_t k_tiles : {8u, 45u, 64u, 193u}) {
    for (uint32_t splits = 2; splits <= 8 && splits * 4 <= k_tiles; ++splits) {
      const SplitTail s = plan_split_tail(132 + 132 / splits, 132, k_tiles, splits, 4);
      ASSERT_EQ(s.splits, splits) << k_tiles;
      uint32_t next = 0, shortest = k_tiles, longest = 0;
      for (uint32_t i = 0; i < s.splits; ++i) {
        const uint32_t start = split_k_start(s, i), count = split_k_start(s, i + 1) - start;
        EXPECT_EQ(start, next);
        next = start + count;
        shortest = std::min(shortest, count);
        longest = std::max(longest, count);
      }
      EXPECT_EQ(next, k_tiles);
      EXPECT_LE(longest - shortest, 1u);
      EXPECT_GE(shortest, 4u);
    }
  }
}

// Every CTA position of the tail (as the scheduler walks them: a cluster's CTAs consecutive, the
// CTA's rank in its cluster = position mod cluster size) gets one run of one tail tile: every (tile,
// split) pair exactly once, a tile's slot its own, the tile's position keeping the CTA's offset in
// its cluster, and cluster mates on the same split.
TEST(SplitTail, EveryTailUnitOnceWithItsClusterMates) {
  for (uint32_t cluster : {1u, 2u, 4u}) {
    for (uint64_t grid : {132ull, 128ull, 64ull, 32ull}) {
      for (uint64_t waves = 1; waves <= 3; ++waves) {
        for (uint64_t rest = cluster; rest < grid; rest += cluster * 3) {
          const SplitTail s = plan_split_tail(waves * grid + rest, grid, 64, 8, 4);
          if (s.splits < 2) continue;
          const std::string at = "cluster " + std::to_string(cluster) + ", grid " + std::to_string(grid) + ", tail " +
                                 std::to_string(rest);
          std::set<std::pair<uint32_t, uint32_t>> seen;  // (slot, split)
          for (uint32_t idx = s.full; idx < s.full + grid; ++idx) {
            const TailUnit u = split_tail_unit(s, idx, cluster);
            if (idx - s.full >= s.tail * s.splits) {
              EXPECT_FALSE(u.valid) << at;
              continue;
            }
            ASSERT_TRUE(u.valid) << at;
            EXPECT_LT(u.slot, s.tail) << at;
            EXPECT_EQ(u.linear, s.full + u.slot) << at;
            EXPECT_EQ(u.linear % cluster, idx % cluster) << at;  // the CTA's offset in its cluster
            EXPECT_LT(u.split, s.splits) << at;
            EXPECT_TRUE(seen.insert({u.slot, u.split}).second) << at << ": slot " << u.slot << " split " << u.split;
            const TailUnit first = split_tail_unit(s, idx - idx % cluster, cluster);  // its cluster's first CTA
            EXPECT_EQ(u.split, first.split) << at;
            EXPECT_EQ(u.slot / cluster, first.slot / cluster) << at;
          }
          EXPECT_EQ(seen.size(), size_t(s.tail) * s.splits) << at;
          EXPECT_FALSE(split_tail_unit(s, s.full - 1, cluster).valid) << at;  // a whole tile's position
        }
      }
    }
  }
}

}  // namespace
}  // namespace tilelink
