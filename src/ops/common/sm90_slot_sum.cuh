// One tile's K runs summed through a workspace, by a consumer warp group of 128 threads that holds
// (its share of) the tile's fp32 accumulators after a run's mainloop. Used by the split-tail
// scheduler's fixup (sm90_split_tail_scheduler.cuh) and GEMM+AR's K slices summed in the GEMM
// (sm90_gemm_ar.cuh).
//
// `slots`: runs - 1 slots of the warp group's accumulators (slot r at r x 128 x kElems floats,
// each thread's float4s 128 apart, so that a warp's stores are contiguous); `flag`: the runs stored
// so far (0 between launches). Run r < runs - 1 stores its accumulators into slot r and counts
// itself on the flag (release, after a named barrier of the warp group: every thread's slot is in);
// the last run waits for the runs - 1 counts (acquire), adds the earlier runs' slots to its own
// accumulators in run order -- a fixed order: the same bits call after call -- and puts the flag
// back to 0. Returns
// whether this was the last run (the one that holds the tile's sum).
//
// The last run's wait is unbounded: callers guarantee that it waits only for CTAs of its own grid,
// all resident, whose runs of the tile never wait on it (earlier runs wait for nobody).
// `barrier`: a hardware named barrier no other code of the kernel uses concurrently, one per
// consumer warp group.
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include <cstdint>
#include <type_traits>

#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {

constexpr int kSlotSumThreads = 128;  // a consumer warp group

template <class FrgTensorC>
CUTLASS_DEVICE bool sum_runs_through_slots(float* slots, uint64_t* flag, FrgTensorC& accumulators, uint32_t run,
                                           uint32_t runs, cutlass::arch::ReservedNamedBarriers barrier) {
  static_assert(std::is_same_v<typename FrgTensorC::value_type, float>, "fp32 accumulators");
  constexpr int kElems = decltype(cute::size(accumulators))::value;
  static_assert(kElems % 4 == 0, "whole float4s of accumulators per thread");
  const int t = static_cast<int>(threadIdx.x % kSlotSumThreads);
  const size_t slot_floats = size_t(kElems) * kSlotSumThreads;
  if (run + 1 < runs) {
    float4* slot = reinterpret_cast<float4*>(slots + size_t(run) * slot_floats);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElems / 4; ++i) {
      slot[size_t(i) * kSlotSumThreads + t] =
          make_float4(accumulators(4 * i), accumulators(4 * i + 1), accumulators(4 * i + 2), accumulators(4 * i + 3));
    }
    asm volatile("" ::: "memory");
    cutlass::arch::NamedBarrier::sync(kSlotSumThreads, barrier);  // every thread's slot stored
    asm volatile("" ::: "memory");
    if (t == 0) red_release_add(flag, 1, MemScope::kGpu);
    return false;
  }
  // The named, bounded wait (spin_until with an op's SignalView) was tried in the split-tail
  // fixup: inlined in the consumer warps it spilled 124 bytes of registers (4 without).
  if (t == 0) {
    while (ld_acquire(flag, MemScope::kGpu) < runs - 1) {
    }
  }
  asm volatile("" ::: "memory");
  cutlass::arch::NamedBarrier::sync(kSlotSumThreads, barrier);  // every earlier run's slot is in
  asm volatile("" ::: "memory");
  for (uint32_t s = 0; s + 1 < runs; ++s) {  // run order: the same sums every call
    const float4* slot = reinterpret_cast<const float4*>(slots + size_t(s) * slot_floats);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kElems / 4; ++i) {
      const float4 v = slot[size_t(i) * kSlotSumThreads + t];
      accumulators(4 * i) += v.x;
      accumulators(4 * i + 1) += v.y;
      accumulators(4 * i + 2) += v.z;
      accumulators(4 * i + 3) += v.w;
    }
  }
  if (t == 0) *reinterpret_cast<volatile uint64_t*>(flag) = 0;  // this launch is done with it
  return true;
}

}  // namespace tilelink::detail
