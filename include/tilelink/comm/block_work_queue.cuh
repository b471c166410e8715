// A rank's queue of work units for one kernel: a counter in device memory from which the blocks
// take units 0, 1, 2, ... in order, each unit to one block (the protocols' Queue: next(bound),
// reset()). Work is not bound to block indices, so any one resident block finishes a rank's work
// whichever others are resident (under MPS a grid within the budget may be only partly so).
//
// Thread 0 draws for the whole block, and draws the unit after the one it hands out at once, so the
// atomic's round trip overlaps that unit's work. It draws only after a unit below `bound`, so each
// block draws exactly one unit past the end -- which lets the protocol's last drawer reset the
// counter for the next kernel (for_each_queued_unit, comm/work_queue.hpp). A block holding a unit
// it has not started only delays it: the unit it works on meanwhile waits on earlier units, never
// on later ones.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink::detail {

class BlockWorkQueue {
 public:
  // `counter`: zero when the kernel starts; `slot`: a __shared__ word of the block.
  TL_DEVICE BlockWorkQueue(uint32_t* counter, uint32_t* slot) : counter_(counter), slot_(slot) {}

  // Every thread of the block calls it; all get the same unit.
  TL_DEVICE uint32_t next(uint32_t bound) {
    __syncthreads();  // every thread has read the previous unit from the slot
    if (threadIdx.x == 0) {
      const uint32_t unit = have_ahead_ ? ahead_ : atomicAdd(counter_, 1u);
      have_ahead_ = unit < bound;
      if (have_ahead_) ahead_ = atomicAdd(counter_, 1u);
      *slot_ = unit;
    }
    __syncthreads();
    return *slot_;
  }

  // Back to 0 for the next kernel; only once no block of this one draws again.
  TL_DEVICE void reset() {
    if (threadIdx.x == 0) atomicExch(counter_, 0u);
  }

 private:
  uint32_t* counter_;
  uint32_t* slot_;
  uint32_t ahead_ = 0;
  bool have_ahead_ = false;
};

}  // namespace tilelink::detail
