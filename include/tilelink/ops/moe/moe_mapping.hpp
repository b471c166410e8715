// MoE, part 1 (all-gather + gather + grouped GEMM): the dynamic mapping from routing to tiles.
//
// Tokens X (M x H) are sharded by rank in row blocks (rank r holds rows [r M/P, (r+1) M/P)) and
// all-gathered with the all-gather protocol (comm/all_gather.hpp); gather blocks copy each
// tile's token rows into expert-sorted order as they arrive (moe_gather_block,
// moe_gather_protocol.hpp) and the grouped GEMM waits per tile on the gather (on the CPU executor:
// moe_group_gemm_block, testing/).
// Routing gives each token its top-k experts. The grouped GEMM computes, for every (token, k)
// pair, the row x_token * W_e of the pair's expert e, in expert-sorted order:
//
//   rows [row_offset[e], row_offset[e + 1]) belong to expert e: its pairs sorted by token (so by
//   source rank), then padding up to a multiple of the tile height bm (row_pair = kPadRow).
//
// A tile is bm consecutive sorted rows of one expert. Its tokens span the contiguous token range
// [token0, token0 + span), so it waits on the all-gather channels of that row range (a superset
// of the rows it reads -- safe, and one contiguous channel range); tiles run in the order their
// last needed row arrives on the rank (its own shard's tiles first), which make_moe_tile_order
// builds per rank. Tables are plain arrays: the CPU executor and the GPU kernels read the same
// MoeMappingView.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tilelink/comm/all_gather.hpp"

namespace tilelink {

constexpr uint32_t kPadRow = 0xFFFFFFFFu;

// The routing of M tokens: expert ids (M x topk, each in [0, experts), distinct per token) and
// their weights (M x topk; used by part 2's top-k reduction).
struct MoeRouting {
  uint32_t tokens = 0;
  uint32_t topk = 0;
  uint32_t experts = 0;
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
};

// The mapping tables, read by kernels and by the CPU protocol.
struct MoeMappingView {
  uint32_t bm = 0;
  uint32_t topk = 0;
  uint32_t experts = 0;
  uint32_t num_tiles = 0;
  const uint32_t* row_offset = nullptr;  // [experts + 1], multiples of bm
  const uint32_t* row_pair = nullptr;    // [num_tiles * bm]: token * topk + k, or kPadRow
  const uint32_t* tile_expert = nullptr;  // [num_tiles]
  const uint32_t* tile_token0 = nullptr;  // [num_tiles]: first token the tile reads
  const uint32_t* tile_span = nullptr;    // [num_tiles]: tokens [token0, token0 + span); 0 = padding only
  const uint32_t* pair_row = nullptr;     // [tokens * topk]: the sorted row of each pair (part 2's combine)

  TL_HOST_DEVICE uint32_t rows() const { return num_tiles * bm; }
};

// Host-side tables (the reference the device builder is checked against).
struct MoeMapping {
  uint32_t bm = 0, topk = 0, experts = 0;
  std::vector<uint32_t> row_offset, row_pair, tile_expert, tile_token0, tile_span;
  std::vector<uint32_t> pair_row;  // tokens x topk: the sorted row of each pair (part 2's combine)

  uint32_t num_tiles() const { return static_cast<uint32_t>(tile_expert.size()); }
  MoeMappingView view() const {
    return {bm, topk, experts, num_tiles(), row_offset.data(), row_pair.data(), tile_expert.data(),
            tile_token0.data(), tile_span.data(), pair_row.data()};
  }
};

// The most tiles any routing of `pairs` (token, k) pairs over `experts` can need: every expert
// may pad up to bm - 1 rows. Sizes the device tables and the ops' buffers.
inline uint32_t moe_max_tiles(uint64_t pairs, uint32_t experts, uint32_t bm) {
  return static_cast<uint32_t>((pairs + uint64_t(experts) * (bm - 1)) / bm);
}

// "" if the routing is well formed, else what is wrong (which token, which k, which value).
inline std::string check_moe_routing(const MoeRouting& r) {
  if (r.topk == 0 || r.topk > r.experts) {
    return "argument 'topk' = " + std::to_string(r.topk) + ": expected 1 to the number of experts (" +
           std::to_string(r.experts) + ")";
  }
  for (uint32_t t = 0; t < r.tokens; ++t) {
    for (uint32_t k = 0; k < r.topk; ++k) {
      const int32_t e = r.ids[uint64_t(t) * r.topk + k];
      if (e < 0 || uint32_t(e) >= r.experts) {
        return "routing ids[" + std::to_string(t) + "][" + std::to_string(k) + "] = " + std::to_string(e) +
               ": expected an expert in [0, " + std::to_string(r.experts) + ")";
      }
      for (uint32_t j = 0; j < k; ++j) {
        if (r.ids[uint64_t(t) * r.topk + j] == e) {
          return "routing ids[" + std::to_string(t) + "]: expert " + std::to_string(e) + " chosen twice";
        }
      }
    }
  }
  return "";
}

// Builds the tables: counting sort of the pairs by expert (stable: by token, then k), padding
// each expert to whole tiles; experts without tokens get no tile.
inline MoeMapping build_moe_mapping(const MoeRouting& r, uint32_t bm) {
  MoeMapping m;
  m.bm = bm;
  m.topk = r.topk;
  m.experts = r.experts;
  std::vector<uint32_t> count(r.experts, 0);
  for (uint64_t p = 0; p < uint64_t(r.tokens) * r.topk; ++p) ++count[uint32_t(r.ids[p])];
  m.row_offset.assign(r.experts + 1, 0);
  for (uint32_t e = 0; e < r.experts; ++e) m.row_offset[e + 1] = m.row_offset[e] + (count[e] + bm - 1) / bm * bm;
  m.row_pair.assign(m.row_offset[r.experts], kPadRow);
  m.pair_row.assign(size_t(r.tokens) * r.topk, 0);
  std::vector<uint32_t> next(m.row_offset.begin(), m.row_offset.end() - 1);
  for (uint32_t t = 0; t < r.tokens; ++t) {
    for (uint32_t k = 0; k < r.topk; ++k) {
      const uint32_t e = uint32_t(r.ids[uint64_t(t) * r.topk + k]);
      m.pair_row[size_t(t) * r.topk + k] = next[e];
      m.row_pair[next[e]++] = t * r.topk + k;
    }
  }
  const uint32_t tiles = m.row_offset[r.experts] / bm;
  for (uint32_t i = 0; i < tiles; ++i) {
    const uint32_t e = uint32_t(std::upper_bound(m.row_offset.begin(), m.row_offset.end(), i * bm) -
                                m.row_offset.begin()) - 1;
    uint32_t first = kPadRow, last = 0;
    for (uint32_t row = i * bm; row < (i + 1) * bm; ++row) {
      if (m.row_pair[row] == kPadRow) continue;
      const uint32_t token = m.row_pair[row] / r.topk;
      first = std::min(first, token);
      last = std::max(last, token);
    }
    m.tile_expert.push_back(e);
    m.tile_token0.push_back(first == kPadRow ? 0 : first);
    m.tile_span.push_back(first == kPadRow ? 0 : last - first + 1);
  }
  return m;
}

// Rank `rank`'s tile order: a stable sort of the tiles by the all-gather step at which the last
// of their token rows arrives (arrival_step; a padding-only tile needs nothing: step 0).
inline void make_moe_tile_order(const AllGatherPlan& ag, uint32_t rank, const MoeMappingView& m, uint32_t* order) {
  std::vector<uint32_t> step(m.num_tiles);
  for (uint32_t t = 0; t < m.num_tiles; ++t) {
    step[t] = m.tile_span[t] == 0 ? 0 : arrival_step(ag, rank, m.tile_token0[t], m.tile_span[t]);
  }
  uint32_t j = 0;
  for (uint32_t s = 0; s < ag.world(); ++s) {
    for (uint32_t t = 0; t < m.num_tiles; ++t) {
      if (step[t] == s) order[j++] = t;
    }
  }
}

}  // namespace tilelink
