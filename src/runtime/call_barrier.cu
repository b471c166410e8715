#include "call_barrier.hpp"

#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {
namespace {

constexpr uint32_t kThreads = 128;

// One arrival at every rank's counter, then a bounded wait until this rank's counter holds
// `pass` arrivals from each rank. Counters only grow, so a rank that runs ahead into its next
// barrier only adds to what a slower rank is waiting for.
TL_DEVICE void barrier(const SignalView& sig, uint32_t stride, uint64_t pass) {
  const uint32_t at = stride + sig.first;
  for (int p = 0; p < sig.world; ++p) red_release_add(sig.peer_channels[p] + at, 1, sig.scope);
  spin_until(sig, sig.peer_channels[sig.rank] + at, pass * uint64_t(sig.world), WaitKind::kCallBarrier,
             sig.num_channels, sig.rank, -1);
}

__global__ void __launch_bounds__(kThreads) call_barrier_kernel(SignalView sig, uint32_t stride) {
  uint64_t* passes = sig.local_channels + 2 * size_t(stride);  // this rank's count of barriers passed
  // 1. Every rank has entered this call: whatever they signalled in the previous call has landed
  //    and been waited for, and no rank still waits on a channel of this rank.
  if (threadIdx.x == 0) barrier(sig, stride, *passes + 1);
  __syncthreads();
  // 2. Zero this rank's channels of the slice.
  for (uint32_t c = threadIdx.x; c < sig.num_channels; c += blockDim.x) {
    reinterpret_cast<volatile uint64_t*>(sig.local_channels)[c] = 0;
  }
  __syncthreads();
  // 3. Every rank has zeroed its channels before any rank signals for this call (the arrival is a
  //    release; the fence makes the other threads' zeroes part of it).
  if (threadIdx.x == 0) {
    __threadfence_system();
    const uint64_t pass = *passes + 2;
    barrier(sig, stride, pass);
    *passes = pass;
  }
}

}  // namespace

void launch_call_barrier(const SignalView& slice, uint32_t stride, cudaStream_t stream) {
  call_barrier_kernel<<<1, kThreads, 0, stream>>>(slice, stride);
  TL_CUDA_CHECK(cudaGetLastError());
}

void preload_call_barrier(const World& world) { world.preload_kernel(reinterpret_cast<const void*>(call_barrier_kernel)); }

}  // namespace tilelink::detail
