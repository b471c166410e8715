#include "world_barrier.hpp"

#include "primitives/nvshmem_transport.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {
namespace {

// Slots are set, not added: a rank that runs ahead into its next barrier only raises the value a
// slower rank waits for, and the slot of a rank that never arrives names it.
// `to_peers`: the arrival is stored into every rank's slots here (load/store), else only into this
// rank's own (the peers' were set by NVSHMEM signal ops enqueued before the kernel).
__global__ void world_barrier_kernel(SignalView slots, uint64_t pass, bool to_peers) {
  if (to_peers) {
    for (int p = 0; p < slots.world; ++p) st_release(slots.peer_channels[p] + slots.rank, pass, slots.scope);
  } else {
    st_release(slots.local_channels + slots.rank, pass, slots.scope);
  }
  for (int p = 0; p < slots.world; ++p) {
    spin_until(slots, slots.local_channels + p, pass, WaitKind::kWorldBarrier, static_cast<uint32_t>(p), slots.rank,
               -1);
  }
}

}  // namespace

void launch_world_barrier(const SignalView& slots, uint64_t pass, Transport transport, cudaStream_t stream) {
  const bool put_signal = transport == Transport::kPutSignal;
  if (put_signal) nvshmem_signal_peers(stream, slots.local_channels + slots.rank, pass, NotifyMode::kSet, slots.rank, slots.world);
  world_barrier_kernel<<<1, 1, 0, stream>>>(slots, pass, !put_signal);
  TL_CUDA_CHECK(cudaGetLastError());
}

void preload_world_barrier(const World& world) {
  world.preload_kernel(reinterpret_cast<const void*>(world_barrier_kernel));
}

}  // namespace tilelink::detail
