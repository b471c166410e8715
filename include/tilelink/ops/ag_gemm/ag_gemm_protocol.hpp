// AG+GEMM protocol: C = allgather(A) * B on every rank, column-parallel (C is M x N_local).
//
// The communication half is the all-gather protocol (comm/all_gather.hpp) on A's rows; the
// compute half walks C's BM x BN tiles in the order the rows arrive and, before a tile's A rows
// are read, waits on exactly the channels the mapping names for them. Compute tiles (BM) and
// communication tiles (comm_rows) are sized independently.
//
// The fused CUTLASS kernel's producer warp uses AgGemmSchedule and all_gather_wait_rows as they
// are; the CPU protocol executor runs the same schedule with a naive GEMM in CI
// (ag_gemm_tiles_block, testing/include/tilelink/testing/ag_gemm_naive_blocks.hpp).
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather.hpp"

namespace tilelink {

struct TileCoord {
  uint32_t m;  // tile row (rows [m * BM, ...))
  uint32_t n;  // tile column
};

// Arrival-ordered tile schedule. `m_order[j]` is the j-th tile row to compute: tile rows sorted by
// the all-gather step at which their last row arrives on this rank (arrival_step; its own shard
// first), ties by index. Built on the host (make_m_order) -- one small table per rank -- and read
// by kernels.
struct AgGemmSchedule {
  uint32_t m = 0;           // rows of C (= world * rows_per_rank)
  uint32_t n = 0;           // columns of C on this rank
  uint32_t bm = 0;
  uint32_t bn = 0;
  const uint32_t* m_order = nullptr;  // [m_tiles()]

  TL_HOST_DEVICE uint32_t m_tiles() const { return (m + bm - 1) / bm; }
  TL_HOST_DEVICE uint32_t n_tiles() const { return (n + bn - 1) / bn; }
  TL_HOST_DEVICE uint32_t num_tiles() const { return m_tiles() * n_tiles(); }
  // Tile i of the schedule: all n tiles of one tile row before the next row.
  TL_HOST_DEVICE TileCoord tile(uint32_t i) const { return {m_order[i / n_tiles()], i % n_tiles()}; }
  TL_HOST_DEVICE RowRange rows(uint32_t m_tile) const {
    const uint32_t row0 = m_tile * bm;
    return {row0, m - row0 < bm ? m - row0 : bm};
  }
};

// Fills m_order (m_tiles entries) for `rank`: a stable sort of tile rows by arrival step.
inline void make_m_order(const AllGatherPlan& ag, uint32_t rank, uint32_t bm, uint32_t* m_order) {
  const uint32_t m = ag.map.total_rows();
  const uint32_t m_tiles = (m + bm - 1) / bm;
  uint32_t j = 0;
  for (uint32_t step = 0; step < ag.world(); ++step) {
    for (uint32_t t = 0; t < m_tiles; ++t) {
      const uint32_t row0 = t * bm;
      const uint32_t rows = m - row0 < bm ? m - row0 : bm;
      if (arrival_step(ag, rank, row0, rows) == step) m_order[j++] = t;
    }
  }
}

}  // namespace tilelink
