#include "call_barrier.hpp"

#include "primitives/nvshmem_transport.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {
namespace {

constexpr uint32_t kThreads = 128;

// One arrival at every rank's counter (`to_peers`; else at this rank's own only: the peers' were
// added by NVSHMEM signal ops enqueued before the kernel), then a bounded wait until this rank's
// counter holds `pass` arrivals from each rank. Counters only grow, so a rank that runs ahead into
// its next barrier only adds to what a slower rank is waiting for.
TL_DEVICE void barrier(const SignalView& sig, uint32_t stride, uint64_t pass, bool to_peers) {
  const uint32_t at = stride + sig.first;
  if (to_peers) {
    for (int p = 0; p < sig.world; ++p) red_release_add(sig.peer_channels[p] + at, 1, sig.scope);
  } else {
    red_release_add(sig.local_channels + stride, 1, sig.scope);
  }
  spin_until(sig, sig.local_channels + stride, pass * uint64_t(sig.world), WaitKind::kCallBarrier, sig.num_channels,
             sig.rank, -1);
}

// Steps: kBoth runs the whole reset (load/store: the kernel reaches the peers); under put_signal
// the host's signal ops announce each arrival to the peers, so the reset is split at the second
// arrival: kFirst (barrier, zero) and kSecond (barrier, count the pass).
enum Steps : uint32_t { kBoth = 0, kFirst = 1, kSecond = 2 };

__global__ void __launch_bounds__(kThreads) call_barrier_kernel(SignalView sig, uint32_t stride, uint32_t steps) {
  uint64_t* passes = sig.local_channels + 2 * size_t(stride);  // this rank's count of barriers passed
  const bool to_peers = steps == kBoth;
  if (steps != kSecond) {
    // 1. Every rank has entered this call: whatever they signalled in the previous call has landed
    //    and been waited for, and no rank still waits on a channel of this rank.
    if (threadIdx.x == 0) barrier(sig, stride, *passes + 1, to_peers);
    __syncthreads();
    // 2. Zero this rank's channels of the slice.
    for (uint32_t c = threadIdx.x; c < sig.num_channels; c += blockDim.x) {
      reinterpret_cast<volatile uint64_t*>(sig.local_channels)[c] = 0;
    }
    __syncthreads();
  }
  if (steps == kFirst) {
    if (threadIdx.x == 0) __threadfence_system();  // the zeroes before the host's next arrivals
    return;
  }
  // 3. Every rank has zeroed its channels before any rank signals for this call (the arrival is a
  //    release; the fence makes the other threads' zeroes part of it).
  if (threadIdx.x == 0) {
    __threadfence_system();
    const uint64_t pass = *passes + 2;
    barrier(sig, stride, pass, to_peers);
    *passes = pass;
  }
}

}  // namespace

void launch_call_barrier(const SignalView& slice, uint32_t stride, Transport transport, cudaStream_t stream) {
  if (transport != Transport::kPutSignal || slice.world == 1) {
    call_barrier_kernel<<<1, kThreads, 0, stream>>>(slice, stride, kBoth);
    TL_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // The counter's symmetric address: this rank's copy names every peer's.
  uint64_t* counter = slice.local_channels + stride;
  for (uint32_t steps : {kFirst, kSecond}) {
    nvshmem_signal_peers(stream, counter, 1, NotifyMode::kAdd, slice.rank, slice.world);
    call_barrier_kernel<<<1, kThreads, 0, stream>>>(slice, stride, steps);
    TL_CUDA_CHECK(cudaGetLastError());
  }
}

void preload_call_barrier(const World& world) { world.preload_kernel(reinterpret_cast<const void*>(call_barrier_kernel)); }

}  // namespace tilelink::detail
