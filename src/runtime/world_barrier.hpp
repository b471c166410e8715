// The bounded barrier behind World::barrier in a process world: one single-thread kernel per call
// that announces this rank's arrival in every rank's slot array and waits, with the bounded wait
// of the primitives, for every rank's arrival in its own. A rank that never arrives ends in a
// TimeoutError that names it (the channel is the missing rank), in every process that waited.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/primitives/signal.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// `slots` is the rank's view of the barrier's slot arrays: channel p of rank q holds the number of
// barriers rank p has entered, as seen by q (num_channels == world, first == 0). `pass` counts this
// process's barriers, from 1; every rank calls the barrier the same number of times. Under
// kLoadStore the kernel stores the arrival into every peer's slots (slots.peer_channels); under
// kPutSignal NVSHMEM's stream signal ops set them (no peer is mapped) and the kernel sets this
// rank's own slot and waits. Checked.
void launch_world_barrier(const SignalView& slots, uint64_t pass, Transport transport, cudaStream_t stream);

// Loads the kernel now: a first launch during a peer's spin could wait for it (lazy loading).
void preload_world_barrier(const World& world);

}  // namespace tilelink::detail
