// Mappings: which communication channels a compute tile depends on.
//
// Compute tiles and communication tiles are sized independently: a compute tile of BM rows may
// cover part of one communication tile or several of them. Mapping code is __host__ __device__;
// the GPU kernels and the CPU protocol executor run the same functions.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink {

// A contiguous run of channels [first, first + count).
struct ChannelRange {
  uint32_t first = 0;
  uint32_t count = 0;
};

// A run of rows [row0, row0 + rows).
struct RowRange {
  uint32_t row0 = 0;
  uint32_t rows = 0;
};

// M rows over `world` owners as torch.chunk splits them: owner o gets [o R, min((o + 1) R, M)) with
// R = owner_pitch(M, world) = ceil(M / world) (the last block shorter; owners past M none). The
// reduce-scatters' owner blocks (GEMM+RS's, GEMM+AR's scatter); owner_block takes R, which plans
// keep rather than divide again per tile.
TL_HOST_DEVICE uint32_t owner_pitch(uint32_t m, uint32_t world) { return (m + world - 1) / world; }
TL_HOST_DEVICE RowRange owner_block(uint32_t m, uint32_t pitch, uint32_t owner) {
  const uint64_t row0 = uint64_t(owner) * pitch;
  if (row0 >= m) return {m, 0};
  const uint32_t r0 = static_cast<uint32_t>(row0);
  return {r0, m - r0 < pitch ? m - r0 : pitch};
}

// Columns [col0, col0 + cols) of N tile `tile` of an n-column output in tiles of bn (the last one
// narrower).
struct ColRange {
  uint32_t col0 = 0;
  uint32_t cols = 0;
};
TL_HOST_DEVICE ColRange tile_cols(uint32_t tile, uint32_t bn, uint32_t n) {
  const uint32_t col0 = tile * bn;
  return {col0, n - col0 < bn ? n - col0 : bn};
}

// A position in a banded walk of a rows x cols grid: bands of `band` rows (the last holds the
// rows left), each walked column by column -- every row of the band at column 0, then column 1.
// Position c (< rows * cols) lands on {row, col}; band <= 1 is row by row (c = row * cols + col).
// The grouped GEMM's scheduler walks its clusters so (sm90_row_ordered_scheduler.cuh).
struct GridCell {
  uint32_t row = 0;
  uint32_t col = 0;
};
TL_HOST_DEVICE GridCell banded_cell(uint64_t c, uint32_t rows, uint32_t cols, uint32_t band) {
  if (band <= 1) return {static_cast<uint32_t>(c / cols), static_cast<uint32_t>(c % cols)};
  const uint64_t per_band = uint64_t(band) * cols;
  const uint32_t b = static_cast<uint32_t>(c / per_band), r = static_cast<uint32_t>(c % per_band);
  const uint32_t left = rows - b * band, in_band = left < band ? left : band;
  return {b * band + r % in_band, r / in_band};
}

// Static affine mapping for row-sharded tensors (all-gather of A, reduce-scatter of C): a tensor
// of world * rows_per_rank rows; rank r owns rows [r * rows_per_rank, (r + 1) * rows_per_rank).
// Each rank's shard is cut into communication tiles of `comm_rows` rows (the last one may be
// shorter); channel = rank * chunks_per_rank + chunk. Channels grow with rows, so any row range
// maps to one contiguous channel range, also across shard boundaries.
struct RowShardMapping {
  uint32_t rows_per_rank = 0;
  uint32_t comm_rows = 0;
  uint32_t world = 0;

  TL_HOST_DEVICE uint32_t chunks_per_rank() const {
    return (rows_per_rank + comm_rows - 1) / comm_rows;
  }
  TL_HOST_DEVICE uint32_t num_channels() const { return world * chunks_per_rank(); }
  TL_HOST_DEVICE uint32_t total_rows() const { return world * rows_per_rank; }
  TL_HOST_DEVICE uint32_t channel(uint32_t rank, uint32_t chunk) const {
    return rank * chunks_per_rank() + chunk;
  }
  TL_HOST_DEVICE uint32_t rank_of_row(uint32_t row) const { return row / rows_per_rank; }
  TL_HOST_DEVICE uint32_t channel_of_row(uint32_t row) const {
    const uint32_t r = row / rows_per_rank;
    return channel(r, (row - r * rows_per_rank) / comm_rows);
  }
  TL_HOST_DEVICE uint32_t rank_of_channel(uint32_t ch) const { return ch / chunks_per_rank(); }
  // Rows covered by a channel, in global row numbering.
  TL_HOST_DEVICE RowRange rows_of_channel(uint32_t ch) const {
    const uint32_t r = ch / chunks_per_rank();
    const uint32_t chunk = ch - r * chunks_per_rank();
    const uint32_t row0 = chunk * comm_rows;
    const uint32_t end = row0 + comm_rows < rows_per_rank ? row0 + comm_rows : rows_per_rank;
    return {r * rows_per_rank + row0, end - row0};
  }
  // Channels a compute tile of rows [row0, row0 + rows) waits on (rows clipped to the tensor).
  TL_HOST_DEVICE ChannelRange channels_for_rows(uint32_t row0, uint32_t rows) const {
    if (row0 >= total_rows() || rows == 0) return {0, 0};
    const uint32_t end = rows < total_rows() - row0 ? row0 + rows : total_rows();
    const uint32_t first = channel_of_row(row0);
    return {first, channel_of_row(end - 1) - first + 1};
  }
};

// Dynamic table mapping (CSR): tile t depends on channels[offsets[t] .. offsets[t + 1]). Built at
// run time (on the device for MoE routing, or on the host); the tables live wherever the code
// that reads them runs.
struct TableMapping {
  const uint32_t* offsets = nullptr;   // [num_tiles + 1]
  const uint32_t* channels = nullptr;  // [offsets[num_tiles]]
  uint32_t num_tiles = 0;

  TL_HOST_DEVICE uint32_t count(uint32_t tile) const { return offsets[tile + 1] - offsets[tile]; }
  TL_HOST_DEVICE uint32_t channel(uint32_t tile, uint32_t i) const {
    return channels[offsets[tile] + i];
  }
};

// Rank-swizzled peer order: step 0 is this rank itself, then the others. Full mesh visits
// rank+1, rank+2, ... (every rank starts on a different peer, spreading load over links);
// a ring's step s handles data that originated at rank - s, received from rank - 1.
enum class CommOrder : uint32_t { kFullMesh = 0, kRing = 1 };

TL_HOST_DEVICE uint32_t swizzled_peer(uint32_t rank, uint32_t step, uint32_t world) {
  return (rank + step) % world;
}
TL_HOST_DEVICE uint32_t ring_origin(uint32_t rank, uint32_t step, uint32_t world) {
  return (rank + world - step % world) % world;
}

}  // namespace tilelink
