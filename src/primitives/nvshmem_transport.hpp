// The host primitives' put-with-signal transport (Transport::kPutSignal): NVSHMEM's stream-ordered
// one-sided operations. Kept in its own translation unit, the only one of the primitives layer
// that includes NVSHMEM.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink::detail {

// Rows of `shape` (`pitch` bytes apart in both) from this PE's `src` to `pe`'s copy of the
// symmetric address `dst`, then `pe`'s copy of the symmetric word `signal` set to `value`, in
// `stream`'s order; the signal is set after the rows are delivered.
void nvshmem_put_rows_signal(cudaStream_t stream, void* dst, const void* src, uint64_t pitch, TileShape shape,
                             uint64_t* signal, uint64_t value, int pe);

// `pe`'s copy of the symmetric word `signal` set to `value`, after every put `stream` enqueued
// before it is delivered.
void nvshmem_signal_set(cudaStream_t stream, uint64_t* signal, uint64_t value, int pe);

// Every PE's copy of `signal` but `me`'s (of `size` PEs) set to `value` (kSet) or raised by it
// (kAdd), after every put `stream` enqueued before it is delivered: a barrier's arrival announced
// to every peer.
void nvshmem_signal_peers(cudaStream_t stream, uint64_t* signal, uint64_t value, NotifyMode mode, int me, int size);

}  // namespace tilelink::detail
