// The six device-side tile primitives. This header is their documentation; definitions live in
// impl/device_impl.cuh.
//
// Memory order (PTX memory consistency model):
//  - Every notify is a RELEASE at the view's scope (.gpu for virtual ranks on one GPU, .sys across
//    GPUs): all memory operations that happen-before the notify -- including other threads' stores
//    ordered by a barrier before it -- are visible to whoever acquires the channel.
//  - Every wait is an ACQUIRE at the same scope; no load that follows it in program order (or,
//    through a barrier, in other threads) can observe data older than the notify it matched.
//  - Both also issue `fence.proxy.async.global` in the calling thread, so data moved by TMA / bulk
//    copies (the async proxy) is ordered with the generic-proxy flag: a thread that waits and then
//    issues TMA loads, or completes TMA stores and then notifies, needs no fence of its own. Other
//    threads that wrote a tile with ordinary stores which one thread then copies with TMA must
//    each fence (fence.proxy.async) before the barrier, as DeviceBlockCtx<true> does.
//  - Waits are bounded: past `sig.errors.timeout_ns` the waiter records op, rank, block, tile,
//    channel, peer, expected and observed values in the error channel and traps. The host turns
//    the record into tilelink::TimeoutError (World::synchronize).
//
// Who calls: the signal primitives are executed by ONE thread. The usual pattern is
//    (all threads) write tile -> __syncthreads() -> (thread 0) producer_tile_notify
//    (thread 0) consumer_tile_wait -> __syncthreads() -> (all threads) read tile
// The ld/st data primitives are executed cooperatively by `lanes`; the bulk (TMA) variants by one
// thread that owns a BulkStaging.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

// Shared-memory staging for the bulk (TMA) data path: `stages` buffers of `stage_bytes` each and
// one mbarrier per stage. Initialise once per CTA with bulk_staging_init (one thread), then
// __syncthreads(). Stage buffers must be 16-byte aligned, stage_bytes a multiple of 16.
struct BulkStaging {
  char* smem;
  uint32_t stage_bytes;
  uint32_t stages;       // 2..32
  uint64_t* mbarriers;   // [stages]
  uint32_t phase_bits;   // parity of each stage's mbarrier; owned by the issuing thread
};

TL_DEVICE void bulk_staging_init(BulkStaging& staging);

// ---- signals ------------------------------------------------------------------------------------

// This tile's data is complete; update `channel` in this rank's memory (kSet: store the epoch,
// kAdd: add one). Release.
TL_DEVICE void producer_tile_notify(const SignalView& sig, uint32_t channel,
                                    NotifyMode mode = NotifyMode::kSet);

// Block until channels [channel, channel + count) in this rank's memory have all reached
// sig.expected(arrivals). Acquire. `tile` only names the waiter in a timeout report.
TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count = 1,
                                  uint32_t arrivals = 1, int32_t tile = -1);

// Update `channel` in `peer`'s memory (push model: after writing data into the peer). Release.
TL_DEVICE void peer_tile_notify(const SignalView& sig, uint32_t channel, int peer,
                                NotifyMode mode = NotifyMode::kSet);

// Block until `channel` in `peer`'s memory reached sig.expected(arrivals) (pull model: the peer
// announced its tile with producer_tile_notify; poll it remotely, then pull). Acquire.
TL_DEVICE void peer_tile_wait(const SignalView& sig, uint32_t channel, int peer,
                              uint32_t arrivals = 1, int32_t tile = -1);

// ---- data ---------------------------------------------------------------------------------------

// Store a tile from `src` (any memory this GPU can read) into `peer`'s copy of `dst_sym` (an
// address in this rank's segment of `heap`). ld/st: 16-byte vectors, cooperative over `lanes`;
// returns when this thread's stores are issued (barrier, then notify, to publish them).
TL_DEVICE void tile_push_data(Lanes lanes, const SymmetricView& heap, TileRef dst_sym, int peer,
                              TileShape shape, TileRef src);

// Load a tile from `peer`'s copy of `src_sym` into `dst` (any memory this GPU can write).
TL_DEVICE void tile_pull_data(Lanes lanes, TileRef dst, const SymmetricView& heap, TileRef src_sym,
                              int peer, TileShape shape);

// Bulk (TMA, cp.async.bulk through shared memory) variants, executed by one thread. They return
// once the destination bytes are written (cp.async.bulk.wait_group 0) and fenced for the generic
// proxy, so a notify may follow directly.
TL_DEVICE void tile_push_data(BulkStaging& staging, const SymmetricView& heap, TileRef dst_sym,
                              int peer, TileShape shape, TileRef src);
TL_DEVICE void tile_pull_data(BulkStaging& staging, TileRef dst, const SymmetricView& heap,
                              TileRef src_sym, int peer, TileShape shape);

}  // namespace tilelink

#include "tilelink/primitives/impl/device_impl.cuh"
