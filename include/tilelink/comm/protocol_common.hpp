// Pieces every protocol shares. Protocol code is written once as templates over a context type
// `Ctx` that provides the nine primitives; the GPU runs it with DeviceBlockCtx / StreamCtx, the
// CPU protocol executor with cpu::BlockCtx.
//
// Ctx (a block of one rank):
//   rank(), world(), block(), num_blocks(), lanes(), sync()
//   producer_tile_notify, consumer_tile_wait, peer_tile_notify, peer_tile_wait,
//   tile_push_data, tile_pull_data        -- block-level: the context adds the barriers
// HostCtx (one rank's stream):
//   rank(), world(), rank_notify, rank_wait, rank_copy_data
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
// call, then waits for all. It makes reuse of buffers across calls safe: no rank writes into a
// peer (or lets a peer read its input) for call e+1 before every rank finished call e on its
// stream.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void rank_barrier(Ctx& ctx, const SignalView& sig, uint32_t base) {
  if (ctx.block() == 0) {
    for (int p = 0; p < ctx.world(); ++p) ctx.peer_tile_notify(sig, base + ctx.rank(), p);
  }
  ctx.consumer_tile_wait(sig, base, static_cast<uint32_t>(ctx.world()));
}

template <class HostCtx>
void rank_barrier_stream(HostCtx& h, const SignalView& sig, uint32_t base) {
  for (int p = 0; p < h.world(); ++p) h.rank_notify(sig, base + h.rank(), p);
  for (int q = 0; q < h.world(); ++q) h.rank_wait(sig, base + q);
}

}  // namespace tilelink
