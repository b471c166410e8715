// All-reduce protocol (issue 21's building block): every rank holds a partial result of `rows` x
// `cols` floats (symmetric `partial`) and ends with the sum over ranks in its `out` (symmetric),
// summed in rank order 0, 1, ..., world-1 in fp32 whatever the arrival order -- bit-identical on
// every rank and from run to run. Any number of rows: the rows are cut into chunks of comm_rows
// (the last one short), and nothing needs rows to divide by the world or the chunk.
//
//  - One-shot: every rank pulls every peer's part of every chunk and reduces all of them.
//    Latency-bound sizes (decode): one exchange, world - 1 reads of the whole buffer per rank.
//  - Two-shot: chunk c is reduced by its owner c % world (a reduce-scatter), which then announces
//    it; the others pull the reduced chunk from the owner's `out` (an all-gather). Bandwidth-bound
//    sizes: 2 (world - 1) / world of the buffer moves per rank.
//
// Channels of the slice: [0, world + 1) exit barrier (peers read this rank's partial, and in
// two-shot its out); then one "partial ready" channel per chunk (this rank's part of chunk c is in
// `partial`); then, two-shot only, one "reduced" channel per chunk (the owner's out holds chunk c's
// sum). Who sets "partial ready": with `in_place` (the collective: the partial is written before
// the call) the blocks at the start, chunk c by block c % blocks; otherwise the producer of the
// partial -- a GEMM's epilogue, GEMM + all-reduce -- adds 1 per tile it finishes, `ready_arrivals`
// tiles per chunk (the N tiles of a row band: comm_rows is then the GEMM's tile rows), and the
// reduction of a chunk starts as soon as every rank's tiles of it are there.
//
// `recv` (symmetric, world slots of rows x cols floats) stages the peers' parts before the sum:
// the reduction reads only local memory.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/comm/reduce_scatter.hpp"
#include "tilelink/comm/work_queue.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

enum class ArMethod : uint32_t {
  kOneShot = 0,
  kTwoShot = 1,
};

inline const char* to_string(ArMethod m) { return m == ArMethod::kOneShot ? "one_shot" : "two_shot"; }

struct AllReducePlan {
  uint32_t rows = 0;       // any positive count
  uint32_t cols = 0;       // floats per row (a multiple of 4); rows are contiguous
  uint32_t comm_rows = 0;  // rows per chunk (> 0)
  uint32_t world = 1;
  ArMethod method = ArMethod::kOneShot;
  bool in_place = true;         // the partial is written before the call (see above)
  uint32_t ready_arrivals = 1;  // not in_place: the producer's notifies per chunk

  TL_HOST_DEVICE uint32_t num_chunks() const { return (rows + comm_rows - 1) / comm_rows; }
  TL_HOST_DEVICE uint32_t row_bytes() const { return cols * 4u; }
  TL_HOST_DEVICE RowRange chunk_rows(uint32_t c) const {
    const uint32_t row0 = c * comm_rows;
    return {row0, rows - row0 < comm_rows ? rows - row0 : comm_rows};
  }
  TL_HOST_DEVICE TileShape chunk_shape(uint32_t c) const { return {chunk_rows(c).rows, row_bytes()}; }
  TL_HOST_DEVICE uint32_t owner(uint32_t c) const { return c % world; }

  TL_HOST_DEVICE uint32_t exit_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t ready_channel(uint32_t c) const { return exit_barrier_channels(world) + c; }
  TL_HOST_DEVICE uint32_t reduced_channel(uint32_t c) const { return ready_channel(num_chunks()) + c; }
  TL_HOST_DEVICE uint32_t num_channels() const {
    return ready_channel(num_chunks()) + (method == ArMethod::kTwoShot ? num_chunks() : 0u);
  }

  // Floats of partial and out (per rank), and of recv (world slots).
  TL_HOST_DEVICE uint64_t elems() const { return uint64_t(rows) * cols; }
  TL_HOST_DEVICE uint64_t recv_elems() const { return uint64_t(world) * elems(); }

  TL_HOST_DEVICE TileRef tile(float* buffer, uint32_t c) const {
    return {buffer + uint64_t(chunk_rows(c).row0) * cols, row_bytes()};
  }
  TL_HOST_DEVICE TileRef recv_tile(float* recv, uint32_t sender, uint32_t c) const {
    return tile(recv + uint64_t(sender) * elems(), c);
  }

  // The chunks `rank` reduces: all of them (one-shot), or those it owns (two-shot), in order.
  TL_HOST_DEVICE uint32_t num_reduced(uint32_t rank) const {
    if (method == ArMethod::kOneShot) return num_chunks();
    return rank < num_chunks() ? (num_chunks() - rank + world - 1) / world : 0u;
  }
  TL_HOST_DEVICE uint32_t reduced_chunk(uint32_t rank, uint32_t i) const {
    return method == ArMethod::kOneShot ? i : rank + i * world;
  }
  // Two-shot: the chunks `rank` fetches from their owners, in order.
  TL_HOST_DEVICE uint32_t num_fetched(uint32_t rank) const { return num_chunks() - num_reduced(rank); }
  TL_HOST_DEVICE uint32_t fetched_chunk(uint32_t rank, uint32_t i) const {
    // The i-th chunk not owned by `rank`: skip one in every `world`, starting after `rank`
    // (world >= 2: at world 1 a rank owns every chunk and fetches none).
    const uint32_t others = world - 1;
    const uint32_t round = i / others, k = i % others;
    return round * world + (k < rank ? k : k + 1);
  }
};

// One block of one rank. The rank's units come from its work queue (for_each_queued_unit), so
// no unit is bound to a block and any one resident block does them all: first (in_place) the
// announcements of the partial's chunks, one unit each -- one block announcing every chunk makes
// that many releases serial (the suspected cause of 55-63 us for 4 MiB at 2 ranks on the H200) --
// then the reductions of this rank's chunks as the peers' parts arrive, then (two-shot) the
// fetches of the other owners' sums; the exit barrier last. A reduction waits only for the
// partials' producers (in_place: announcement units, first in every rank's queue), a fetch only for
// its owner's reduction: no unit waits on a later one.
TL_PROTOCOL
template <class Ctx, class Queue>
TL_HOST_DEVICE void all_reduce_block(Ctx& ctx, const AllReducePlan& plan, const SignalView& sig,
                                     const SymmetricView& heap, float* partial, float* recv, float* out,
                                     Queue& queue) {
  const uint32_t w = plan.world;
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const bool two_shot = plan.method == ArMethod::kTwoShot;
  const uint32_t arrivals = plan.in_place ? 1u : plan.ready_arrivals;
  const uint32_t announce = plan.in_place ? plan.num_chunks() : 0u;
  const uint32_t reduced = plan.num_reduced(rank);
  const uint32_t fetched = two_shot ? plan.num_fetched(rank) : 0u;

  for_each_queued_unit(ctx, queue, announce + reduced + fetched, [&](uint32_t u) {
    if (u < announce) {
      ctx.producer_tile_notify(sig, plan.ready_channel(u));
      return;
    }
    u -= announce;
    if (u < reduced) {
      const uint32_t c = plan.reduced_chunk(rank, u);
      const TileShape shape = plan.chunk_shape(c);
      for (uint32_t s = 1; s < w; ++s) {
        const uint32_t q = swizzled_peer(rank, s, w);
        ctx.peer_tile_wait(sig, plan.ready_channel(c), static_cast<int>(q), arrivals, static_cast<int32_t>(c));
        ctx.tile_pull_data(plan.recv_tile(recv, q, c), heap, plan.tile(partial, c), static_cast<int>(q), shape);
      }
      if (!plan.in_place) ctx.consumer_tile_wait(sig, plan.ready_channel(c), 1, arrivals, static_cast<int32_t>(c));
      ctx.sync();
      // Sum in rank order 0..world-1: bit-identical results whatever the arrival order.
      const uint64_t n4 = uint64_t(shape.rows) * plan.cols / 4;
      const Lanes lanes = ctx.lanes();
      Float4* dst = reinterpret_cast<Float4*>(plan.tile(out, c).ptr);
      for (uint64_t e = lanes.id; e < n4; e += lanes.count) {
        Float4 acc{{0.f, 0.f, 0.f, 0.f}};
        for (uint32_t q = 0; q < w; ++q) {
          const TileRef t = q == rank ? plan.tile(partial, c) : plan.recv_tile(recv, q, c);
          const Float4 x = static_cast<const Float4*>(t.ptr)[e];
          for (int k = 0; k < 4; ++k) acc.v[k] += x.v[k];
        }
        dst[e] = acc;
      }
      if (two_shot) ctx.producer_tile_notify(sig, plan.reduced_channel(c));
      return;
    }
    u -= reduced;
    const uint32_t c = plan.fetched_chunk(rank, u);
    const uint32_t o = plan.owner(c);
    ctx.peer_tile_wait(sig, plan.reduced_channel(c), static_cast<int>(o), 1, static_cast<int32_t>(c));
    ctx.tile_pull_data(plan.tile(out, c), heap, plan.tile(out, c), static_cast<int>(o), plan.chunk_shape(c));
  });
  rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
