// The MoE protocols' stand-ins for the GPU's gather copy and grouped GEMMs (moe_mapping.hpp: part
// 1; moe_rs_protocol.hpp: part 2), run by the CPU protocol executor in CI.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink {

// copy_tile of moe_gather_block, lane by lane in elements of type V: tile t's rows of `sorted`
// (row pitch row_bytes, a multiple of sizeof(V)) from the rows of x (pitch ag.pitch).
template <class V>
TL_HOST_DEVICE void moe_gather_rows(Lanes lanes, const AllGatherPlan& ag, const MoeMappingView& m, uint32_t t,
                                    const void* x, void* sorted, uint32_t row_bytes) {
  const uint32_t per_row = row_bytes / sizeof(V);
  for (uint32_t e = lanes.id; e < m.bm * per_row; e += lanes.count) {
    const uint32_t row = t * m.bm + e / per_row;
    const uint32_t pair = m.row_pair[row];
    V* dst = reinterpret_cast<V*>(static_cast<char*>(sorted) + uint64_t(row) * row_bytes) + e % per_row;
    if (pair == kPadRow) {
      *dst = V{};
    } else {
      *dst = reinterpret_cast<const V*>(static_cast<const char*>(x) + uint64_t(pair / m.topk) * ag.pitch)[e % per_row];
    }
  }
}

// Compute blocks of one rank (the grouped GEMM with a naive inner product standing in for the
// CUTLASS mainloop, whose producer does the same waits): for each tile in `order`, wait on its
// gather channel, then out[row] = sorted[row] * W_e for each of its rows (padding rows are zero
// in `sorted`, so they come out zero). sorted: m.rows() x k floats; w: experts x k x n floats
// (expert e's k x n slice of this rank); out: m.rows() x n floats.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void moe_group_gemm_block(Ctx& ctx, const MoeMappingView& m, const uint32_t* order,
                                         const SignalView& gsig, uint32_t channel0, const float* sorted, uint32_t k,
                                         const float* w, uint32_t n, float* out) {
  for (uint32_t i = ctx.block(); i < m.num_tiles; i += ctx.num_blocks()) {
    const uint32_t t = order[i];
    ctx.consumer_tile_wait(gsig, channel0 + t, 1, 1, int32_t(t));
    const float* w_e = w + uint64_t(m.tile_expert[t]) * k * n;
    for_each_tile_element(ctx.lanes(), t * m.bm, m.bm, ColRange{0, n}, [&](uint32_t row, uint32_t col) {
      out[uint64_t(row) * n + col] = naive_dot(sorted + uint64_t(row) * k, w_e, k, n, col);
    });
  }
}

// Tile (t, c) of part 2's grouped GEMM by `lanes`: y's rows of tile row t, columns of tile c =
// h's rows times the tile's expert's slice of w2. h: m.rows() x k floats (sorted rows), w2:
// experts x k x n floats, y: m.rows() x n floats; padding rows are left unwritten (no token reads
// them).
TL_HOST_DEVICE void moe_group_gemm_rs_tile(Lanes lanes, const MoeRsPlan& plan, const MoeMappingView& m, uint32_t t,
                                           uint32_t c, const float* h, uint32_t k, const float* w2, float* y) {
  const float* w_e = w2 + uint64_t(m.tile_expert[t]) * k * plan.n;
  for_each_tile_element(lanes, t * m.bm, m.bm, tile_cols(c, plan.bn, plan.n), [&](uint32_t row, uint32_t col) {
    if (m.row_pair[row] == kPadRow) return;
    y[uint64_t(row) * plan.n + col] = naive_dot(h + uint64_t(row) * k, w_e, k, plan.n, col);
  });
}

// Compute blocks of one rank: the grouped GEMM, tiles in index order (any order is correct: the
// combine waits per tile), each notified on its channel.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void moe_group_gemm_rs_compute_block(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                                    const SignalView& sig, const float* h, uint32_t k,
                                                    const float* w2, float* y) {
  for (uint32_t i = ctx.block(); i < m.num_tiles * plan.n_tiles(); i += ctx.num_blocks()) {
    const uint32_t t = i / plan.n_tiles(), c = i % plan.n_tiles();
    moe_group_gemm_rs_tile(ctx.lanes(), plan, m, t, c, h, k, w2, y);
    ctx.producer_tile_notify(sig, plan.tile_channel(t, c));
  }
}

// Compute blocks of one rank with the combine in the epilogue (MoeCombine::kEpilogue): each
// finished tile (t, c), as moe_group_gemm_rs_compute_block computes it, runs
// moe_epilogue_combine_tile with `arrive` and `combine` (no tile notifies: nothing waits for them).
TL_PROTOCOL
template <class Ctx, class Arrive, class Combine>
TL_HOST_DEVICE void moe_group_gemm_epilogue_combine_block(Ctx& ctx, const MoeRsPlan& plan, const MoeMappingView& m,
                                                          const SignalView& sig, const float* h, uint32_t k,
                                                          const float* w2, float* y, Arrive&& arrive,
                                                          Combine&& combine) {
  for (uint32_t i = ctx.block(); i < m.num_tiles * plan.n_tiles(); i += ctx.num_blocks()) {
    const uint32_t t = i / plan.n_tiles(), c = i % plan.n_tiles();
    moe_group_gemm_rs_tile(ctx.lanes(), plan, m, t, c, h, k, w2, y);
    ctx.sync();  // the tile's rows before its arrivals (one thread's release covers the block's stores)
    moe_epilogue_combine_tile(ctx, plan, m, sig, t, c, arrive, combine);
  }
}

}  // namespace tilelink
