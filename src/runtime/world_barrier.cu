#include "world_barrier.hpp"

#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {
namespace {

// Slots are set, not added: a rank that runs ahead into its next barrier only raises the value a
// slower rank waits for, and the slot of a rank that never arrives names it.
__global__ void world_barrier_kernel(SignalView slots, uint64_t pass) {
  for (int p = 0; p < slots.world; ++p) st_release(slots.peer_channels[p] + slots.rank, pass, slots.scope);
  for (int p = 0; p < slots.world; ++p) {
    spin_until(slots, slots.local_channels + p, pass, WaitKind::kWorldBarrier, static_cast<uint32_t>(p), slots.rank,
               -1);
  }
}

}  // namespace

void launch_world_barrier(const SignalView& slots, uint64_t pass, cudaStream_t stream) {
  world_barrier_kernel<<<1, 1, 0, stream>>>(slots, pass);
  TL_CUDA_CHECK(cudaGetLastError());
}

void preload_world_barrier(const World& world) {
  world.preload_kernel(reinterpret_cast<const void*>(world_barrier_kernel));
}

}  // namespace tilelink::detail
