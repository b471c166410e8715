// The split tail of a persistent GEMM (Sm90SplitTailTileScheduler, sm90_split_tail_scheduler.cuh):
// which tiles run whole and how the last, partial wave's tiles are cut along K. __host__ __device__:
// the scheduler, its host setup and the CPU tests share it.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink {

// A persistent GEMM's tiles over its grid with the last, partial wave split along K
// (Sm90SplitTailTileScheduler): of `tiles` CTA tiles (whole clusters) on a grid of `grid` CTAs,
// positions [0, full) run whole tiles; when tiles mod grid = tail != 0 and at least two runs of
// `min_k_tiles` fit, the tail tiles [full, full + tail) are each cut into `splits` runs of
// consecutive K tiles (of `k_tiles`), one per otherwise idle CTA: splits = min(grid / tail,
// k_tiles / min_k_tiles, max_splits). Otherwise nothing splits (full = tiles).
struct SplitTail {
  uint32_t full = 0;
  uint32_t tail = 0;
  uint32_t splits = 1;
  uint32_t k_tiles = 0;
};
TL_HOST_DEVICE SplitTail plan_split_tail(uint64_t tiles, uint64_t grid, uint32_t k_tiles, uint32_t max_splits,
                                         uint32_t min_k_tiles) {
  SplitTail s;
  s.full = static_cast<uint32_t>(tiles);
  s.k_tiles = k_tiles;
  if (max_splits < 2 || grid == 0 || tiles <= grid || tiles % grid == 0) return s;
  const uint64_t tail = tiles % grid;
  uint64_t splits = grid / tail;
  const uint64_t by_k = k_tiles / (min_k_tiles > 0 ? min_k_tiles : 1u);
  if (by_k < splits) splits = by_k;
  if (max_splits < splits) splits = max_splits;
  if (splits < 2) return s;
  s.full = static_cast<uint32_t>(tiles - tail);
  s.tail = static_cast<uint32_t>(tail);
  s.splits = static_cast<uint32_t>(splits);
  return s;
}
// K tiles [start, start + count) of split `split` of a tail tile: the K tiles shared out evenly
// (counts differ by at most one).
// (32-bit: K < 2^30 gives fewer than 2^24 K tiles of 64, and splits <= 255, so the product fits; the
// scheduler runs this in the 40 registers of a producer warp.)
TL_HOST_DEVICE uint32_t split_k_start(const SplitTail& s, uint32_t split) { return split * s.k_tiles / s.splits; }

// The unit at CTA position `idx` of the grid (idx = the CTA's first position + k * grid) at or past
// s.full: the position of the whole-tile order whose tile it computes part of (`linear`; the
// scheduler maps it to the tile), which run of K tiles (`split`) and the tile's workspace slot. A
// cluster's CTAs hold consecutive positions (the CTA's rank in its cluster = idx mod cluster_size):
// they take the same split of the tiles of one cluster, `linear` keeping the CTA's offset within
// the cluster. `valid` is false past the tail's units.
struct TailUnit {
  uint32_t linear = 0;
  uint32_t split = 0;
  uint32_t slot = 0;
  bool valid = false;
};
TL_HOST_DEVICE TailUnit split_tail_unit(const SplitTail& s, uint32_t idx, uint32_t cluster_size) {
  TailUnit u;
  const uint32_t unit = idx - s.full;
  if (idx < s.full || s.splits < 2 || unit >= s.tail * s.splits) return u;
  const uint32_t tail_clusters = s.tail / cluster_size, cluster_unit = unit / cluster_size;
  const uint32_t tail_cluster = cluster_unit % tail_clusters, within = unit % cluster_size;
  u.slot = tail_cluster * cluster_size + within;
  u.linear = s.full + u.slot;
  u.split = cluster_unit / tail_clusters;
  u.valid = true;
  return u;
}

}  // namespace tilelink
