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
  const Lanes lanes = ctx.lanes();
  for (uint32_t i = ctx.block(); i < s.num_tiles(); i += ctx.num_blocks()) {
    const TileCoord t = s.tile(i);
    const RowRange rows = s.rows(t.m);
    all_gather_wait_rows(ctx, ag, sig, rows.row0, rows.rows, static_cast<int32_t>(i));
    const uint32_t col0 = t.n * s.bn;
    const uint32_t cols = s.n - col0 < s.bn ? s.n - col0 : s.bn;
    for (uint32_t e = lanes.id; e < rows.rows * cols; e += lanes.count) {
      const uint32_t row = rows.row0 + e / cols;
      const uint32_t col = col0 + e % cols;
      const float* a_row = reinterpret_cast<const float*>(static_cast<const char*>(a) + uint64_t(row) * ag.pitch);
      c[uint64_t(row) * s.n + col] = naive_dot(a_row, b, k, s.n, col);
    }
  }
}

}  // namespace tilelink
