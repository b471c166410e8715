// MoE part 1's gather stage as a protocol: the blocks between the all-gather and the grouped GEMM
// (whose TMA loads cannot gather rows). The GPU runs it in ops/moe/moe_gather.cu, the CPU executor
// in tests/cpu/moe_runners.hpp.
#pragma once

#include <cstdint>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/comm/work_queue.hpp"
#include "tilelink/ops/moe/moe_mapping.hpp"

namespace tilelink {

// Gather blocks of one rank. For each tile in `order`: wait for its token rows (the all-gather's
// channels), copy_tile(t) -- every pair's token row of the gathered x into the tile's rows of the
// expert-sorted A, zeros for padding rows (on the CPU executor: moe_gather_rows, testing/) -- then
// notify channel `channel0 + t` of `gsig`, on which the grouped GEMM's producer waits before it
// loads the tile.
//
// The blocks take positions of `order` from the rank's work queue (for_each_queued_unit: each
// position to one block, in increasing order, the counter back to 0 at the end), not by a fixed
// stride: the grouped GEMM's CTAs spin on these tiles, so a gather block that cannot become
// resident beside them (SMs held by other processes under MPS) must not own tiles; any one
// resident block gathers them all.
TL_PROTOCOL
template <class Ctx, class Queue, class CopyTile>
TL_HOST_DEVICE void moe_gather_block(Ctx& ctx, const AllGatherPlan& ag, const SignalView& ag_sig,
                                     const MoeMappingView& m, const uint32_t* order, const SignalView& gsig,
                                     uint32_t channel0, Queue& queue, CopyTile&& copy_tile) {
  for_each_queued_unit(ctx, queue, m.num_tiles, [&](uint32_t i) {
    const uint32_t t = order[i];
    if (m.tile_span[t] != 0) all_gather_wait_rows(ctx, ag, ag_sig, m.tile_token0[t], m.tile_span[t], int32_t(t));
    copy_tile(t);
    ctx.producer_tile_notify(gsig, channel0 + t);
  });
}

}  // namespace tilelink
