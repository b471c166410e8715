// A rank's work queue, as the protocols use it. Work that peers (or the rank's own spinning CTAs)
// wait on is not bound to block indices: under MPS a grid within the SM budget may be only partly
// resident, and a unit owned by a block that never runs would never be done. Instead the rank's
// blocks draw units 0, 1, 2, ... from one counter, each unit to one block, so any one resident
// block finishes all of them.
//
// Queue (a rank's counter for one kernel; zero when the kernel starts):
//   next(total)  the next unit, shared by the calling block's threads (GPU: BlockWorkQueue,
//                comm/block_work_queue.cuh; CPU executor: cpu::WorkQueue)
//   reset()      back to zero for the next kernel
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"

namespace tilelink {

// Runs unit(i) for each unit i < total this block draws from `queue`, then puts the counter back
// to zero for the rank's next kernel without a launch between them: a block draws until it gets a
// unit past the end -- exactly one such draw per block -- so the block that draws the last of them
// (total + blocks - 1) knows no block of this kernel draws again.
TL_PROTOCOL
template <class Ctx, class Queue, class Unit>
TL_HOST_DEVICE void for_each_queued_unit(Ctx& ctx, Queue& queue, uint32_t total, Unit&& unit) {
  uint32_t i = queue.next(total);
  for (; i < total; i = queue.next(total)) unit(i);
  if (i == total + static_cast<uint32_t>(ctx.num_blocks()) - 1) queue.reset();
}

}  // namespace tilelink
