// The gather stage of MoE part 1 on the GPU: moe_gather_block (moe_gather_protocol.hpp) in `blocks`
// CTAs of one rank. Internal to the MoE ops.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/ops/moe/moe_gather_protocol.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

// Copies every tile's token rows of `x` (the gathered tokens, rows of ag.pitch bytes) into
// `sorted` (rows of row_bytes, a multiple of 16) in the rank's tile order, waiting for the rows
// on the all-gather's channels, and notifies tile t on channel channel0 + t of `gsig`. The tile
// count is read on the device (`num_tiles`, written before the launch); m.num_tiles is ignored.
// `queue`: the rank's work counter the CTAs take tiles from (BlockWorkQueue), zero when the kernel
// starts and put back to zero by its last draw (for_each_queued_unit); the op zeroes it once, at
// allocation. One per rank, not shared with another stream's gather. With `trace` on, thread 0 of
// each CTA records its waits, copies and notifies.
void launch_moe_gather(const AllGatherPlan& ag, const SignalView& ag_sig, const MoeMappingView& m,
                       const uint32_t* num_tiles, const uint32_t* order, uint32_t* queue, const SignalView& gsig,
                       uint32_t channel0, const void* x, void* sorted, uint32_t row_bytes, uint32_t blocks,
                       cudaStream_t stream, const TraceView& trace = {});
void preload_moe_gather();

}  // namespace tilelink::detail
