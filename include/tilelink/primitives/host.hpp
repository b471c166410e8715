// The three host-side primitives. They enqueue work on a CUDA stream and return at once; the
// stream's order is their order.
//
// They take a SignalView built for the host (SignalSlice::host_view): its peer table is a host
// array. A kernel on the same or another stream synchronises with them through the same
// channels: rank_notify pairs with consumer_tile_wait / peer_tile_wait, producer_tile_notify /
// peer_tile_notify pair with rank_wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

// A rank_wait the host must watch: the stream stalls on `address` until it reaches `expected`.
struct StreamWaitRecord {
  cudaStream_t stream;
  const uint64_t* address;
  uint64_t expected;
  uint32_t op_id;
  int32_t rank;
  uint32_t channel;
};

// The host's watcher of stream waits. A stream memop wait cannot bound itself, so rank_wait tells
// the observer of its view's error channel (ErrorChannelView::stream_waits) of every wait it
// enqueues; the runtime's ErrorChannel implements it. Called on the host by whichever thread
// enqueues, before rank_wait returns.
class StreamWaitObserver {
 public:
  virtual void note_stream_wait(const StreamWaitRecord& wait) = 0;

 protected:
  ~StreamWaitObserver() = default;
};

// How the host primitives reach another rank's memory.
enum class Transport : uint32_t {
  kLoadStore = 0,  // the peer's memory is mapped here (peer pointers: one GPU, NVLink, PCIe P2P)
  kPutSignal = 1,  // NVSHMEM's stream-ordered put-with-signal and signal ops (any PE it reaches,
                   // another node included); the slice's channels and the data's destination
                   // must be in NVSHMEM's symmetric heap (a process world's SymmetricHeap)
  kAuto = 2,       // a World option only (WorldOptions::transport): kLoadStore when every peer is
                   // mapped, else kPutSignal; World::transport() is never kAuto, and the
                   // primitives treat it as kLoadStore
};
const char* to_string(Transport t);  // "load_store", "put_signal", "auto"

// Store the call's epoch into `channel` in `peer`'s memory once all earlier work on `stream`
// has completed (cuStreamWriteValue64, default flags: a release of that work). kSet only: stream
// memops cannot add. kPutSignal, another rank: nvshmemx_signal_op_on_stream (NVSHMEM_SIGNAL_SET),
// after every earlier put of the stream is delivered (nvshmemx_quiet_on_stream).
void rank_notify(cudaStream_t stream, const SignalView& sig, uint32_t channel, int peer,
                 Transport transport = Transport::kLoadStore);

// Put a tile of this rank's memory into `peer`'s, then set `channel` in `peer`'s memory to the
// call's epoch: a wait on the channel there sees the rows. `dst` is an address in this rank's
// heap segment (`heap`): the rows land at its counterpart on `peer`; `src` is this rank's, rows
// `pitch` bytes apart in both. kLoadStore: rank_copy_data to the translated address, then
// rank_notify. kPutSignal: nvshmemx_putmem_on_stream per row and, for the last,
// nvshmemx_putmem_signal_on_stream (after nvshmemx_quiet_on_stream when there are earlier rows).
void rank_put_signal(cudaStream_t stream, const SymmetricView& heap, void* dst, const void* src, uint64_t pitch,
                     TileShape shape, const SignalView& sig, uint32_t channel, int peer, Transport transport);

// Make later work on `stream` wait until `channel` in this rank's memory reaches
// sig.expected(arrivals) (cuStreamWaitValue64 with GEQ: a wrap-safe signed comparison). The
// wait is registered with the observer of sig's error channel (StreamWaitObserver; the World's
// error channel), so that World::synchronize reports it by name if it never completes -- except
// for a replayable slice (signal.hpp), whose waits are not watched.
void rank_wait(cudaStream_t stream, const SignalView& sig, uint32_t channel, uint32_t arrivals = 1);

// Copy-engine transfer of `bytes` from `src` to `dst` (device or peer pointers, unified
// addressing). Ordered after earlier work on `stream`.
void rank_copy_data(cudaStream_t stream, void* dst, const void* src, size_t bytes);

}  // namespace tilelink
