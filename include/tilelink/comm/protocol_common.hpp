// Pieces every protocol shares. Protocol code is written once as templates over a context type
// `Ctx` that provides the nine primitives; the GPU runs it with DeviceBlockCtx / StreamCtx, the
// CPU protocol executor with cpu::BlockCtx.
//
// Ctx (a block of one rank):
//   rank(), world(), block(), num_blocks(), lanes(), sync()
//   producer_tile_notify, consumer_tile_wait, peer_tile_notify, peer_tile_wait,
//   tile_push_data, tile_pull_data        -- block-level: the context adds the barriers
// HostCtx (one rank's stream):
//   rank(), world(), rank_notify, rank_wait, rank_copy_data, rank_put_signal
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"
#include "tilelink/primitives/signal.hpp"

// Protocol templates are __host__ __device__ and call the context's __device__ members only when
// instantiated for a device context. Write `TL_PROTOCOL template <class Ctx> TL_HOST_DEVICE ...`.
#if defined(__CUDACC__)
#define TL_PROTOCOL _Pragma("nv_exec_check_disable")
#else
#define TL_PROTOCOL
#endif

namespace tilelink {

// Entry barrier over channels [base, base + world): every rank announces that it entered this
// call, then waits for all. No rank writes into a peer for call e+1 before every rank has entered
// call e+1 -- that is, finished call e on its stream (and, since run() orders the comm stream
// after the compute stream, finished consuming call e's output).
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void rank_barrier(Ctx& ctx, const SignalView& sig, uint32_t base) {
  if (ctx.block() == 0) {
    for (int p = 0; p < ctx.world(); ++p) ctx.peer_tile_notify(sig, base + ctx.rank(), p);
  }
  ctx.consumer_tile_wait(sig, base, static_cast<uint32_t>(ctx.world()));
}

// Exit barrier for protocols in which peers READ this rank's memory (pull): a rank's call ends
// only when every peer has finished reading from it, so the caller may overwrite its inputs as
// soon as the call is complete on its own stream. Channels [base, base + world) are "rank q is
// done reading"; channel base + world counts this rank's finished blocks (add mode).
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void rank_exit_barrier(Ctx& ctx, const SignalView& sig, uint32_t base) {
  const uint32_t world = static_cast<uint32_t>(ctx.world());
  ctx.producer_tile_notify(sig, base + world, NotifyMode::kAdd);
  if (ctx.block() == 0) {
    ctx.consumer_tile_wait(sig, base + world, 1, ctx.num_blocks());
    for (int p = 0; p < ctx.world(); ++p) ctx.peer_tile_notify(sig, base + ctx.rank(), p);
    ctx.consumer_tile_wait(sig, base, world);
  }
}

// Channels used by rank_barrier (world) and rank_exit_barrier (world + 1).
TL_HOST_DEVICE uint32_t entry_barrier_channels(uint32_t world) { return world; }
TL_HOST_DEVICE uint32_t exit_barrier_channels(uint32_t world) { return world + 1; }

// rank_barrier on a stream, in two halves (arrive, then wait) for callers that enqueue the
// arrivals of several ranks before any rank's wait (see all_gather_stream_announce).
template <class HostCtx>
void rank_barrier_stream_arrive(HostCtx& h, const SignalView& sig, uint32_t base) {
  for (int p = 0; p < h.world(); ++p) h.rank_notify(sig, base + h.rank(), p);
}
template <class HostCtx>
void rank_barrier_stream_wait(HostCtx& h, const SignalView& sig, uint32_t base) {
  for (int q = 0; q < h.world(); ++q) h.rank_wait(sig, base + q);
}

// rank_exit_barrier on a stream: a stream is one block, so arriving is notifying every peer.
template <class HostCtx>
void rank_exit_barrier_stream(HostCtx& h, const SignalView& sig, uint32_t base) {
  rank_barrier_stream_arrive(h, sig, base);
  rank_barrier_stream_wait(h, sig, base);
}

}  // namespace tilelink
