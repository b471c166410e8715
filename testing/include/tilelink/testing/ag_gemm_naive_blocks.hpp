// AG+GEMM's compute blocks with a naive GEMM: the schedule and waits of ag_gemm_protocol.hpp,
// which the fused kernel's producer warp follows, run by the CPU protocol executor in CI.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/testing/naive_dot.hpp"

namespace tilelink {

// Compute blocks of one rank: C tiles in schedule order, each after the wait on its A rows.
// A: gathered, M x K floats (row pitch ag.pitch bytes); B: K x N floats; C: M x N floats.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void ag_gemm_tiles_block(Ctx& ctx, const AllGatherPlan& ag, const AgGemmSchedule& s,
                                        const SignalView& sig, const void* a, uint32_t k,
                                        const float* b, float* c) {
  for (uint32_t i = ctx.block(); i < s.num_tiles(); i += ctx.num_blocks()) {
    const TileCoord t = s.tile(i);
    const RowRange rows = s.rows(t.m);
    all_gather_wait_rows(ctx, ag, sig, rows.row0, rows.rows, static_cast<int32_t>(i));
    for_each_tile_element(ctx.lanes(), rows.row0, rows.rows, tile_cols(t.n, s.bn, s.n), [&](uint32_t row, uint32_t col) {
      const float* a_row = reinterpret_cast<const float*>(static_cast<const char*>(a) + uint64_t(row) * ag.pitch);
      c[uint64_t(row) * s.n + col] = naive_dot(a_row, b, k, s.n, col);
    });
  }
}

}  // namespace tilelink
