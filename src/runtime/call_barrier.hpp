// The per-call reset of a replayable signal slice (SignalSlice::begin_call): one small kernel per
// rank that passes a world-wide barrier, zeroes the rank's channels of the slice and passes a
// second barrier.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/primitives/host.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// `slice` is the rank's device view of the slice; its storage holds `stride` channels, then
// `stride` barrier counters (peers add into them), then `stride` local pass counts
// (SignalSet::kArrays). Under kLoadStore the kernel adds into the peers' counters itself; under
// kPutSignal (no peer mapped) NVSHMEM's stream signal ops add them, before each of the kernel's
// two halves. Enqueued on `stream` (capturable either way); checked.
void launch_call_barrier(const SignalView& slice, uint32_t stride, Transport transport, cudaStream_t stream);

// Loads the kernel on every rank's device now (lazy loading is not allowed under capture).
void preload_call_barrier(const World& world);

}  // namespace tilelink::detail
