// All-gather protocol of a row-sharded tensor: every rank ends with all world * rows_per_rank rows
// in its copy of the symmetric `gathered` buffer; rank r's own rows are in place at rows
// [r * rows_per_rank, (r + 1) * rows_per_rank) before the call -- or, given `own_rows` (the rank's
// rows anywhere on its device, outside the heap), the call's first work copies them there, one
// communication tile at a time.
//
// Channels of the slice: [0, world) entry barrier (push and copy engine: every rank has
// entered the call); [world, 2 world + 1) exit barrier (pull: peers read this rank's rows); then
// one channel per communication tile (RowShardMapping::channel). Channel ch on rank x reaches the
// epoch when ch's rows are present in x's `gathered` -- for x's own rows, at the start of the
// call, or with own_rows once that tile is copied (peers pulling it wait on the same channel). A
// consumer of rows [row0, row0 + rows) waits on consumer_channels(row0, rows) and nothing else.
#pragma once

#include <cstdint>
#include <string>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/core/error_record.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

enum class AgMethod : uint32_t {
  kPull = 0,  // each rank pulls peers' tiles into its own buffer (peer_tile_wait + tile_pull_data)
  kPush = 1,  // each rank pushes its tiles into peers (tile_push_data + peer_tile_notify)
};

struct AllGatherPlan {
  RowShardMapping map;
  uint32_t row_bytes = 0;
  uint64_t pitch = 0;  // bytes between rows of `gathered`
  AgMethod method = AgMethod::kPull;
  CommOrder order = CommOrder::kFullMesh;

  TL_HOST_DEVICE uint32_t world() const { return map.world; }
  TL_HOST_DEVICE uint32_t barrier_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t exit_channel() const { return entry_barrier_channels(map.world); }
  TL_HOST_DEVICE uint32_t tile_channel(uint32_t ch) const {
    return exit_channel() + exit_barrier_channels(map.world) + ch;
  }
  // SM path: every block of the rank's kernel adds 1 here first thing, so that a consumer's stream
  // can wait for the whole grid to be running before its own kernel is dispatched
  // (AllGather::wait_started).
  TL_HOST_DEVICE uint32_t started_channel() const { return tile_channel(map.num_channels()); }
  TL_HOST_DEVICE uint32_t num_channels() const { return started_channel() + 1; }
  TL_HOST_DEVICE uint32_t steps() const { return map.world - 1; }
  TL_HOST_DEVICE uint32_t num_items() const { return steps() * map.chunks_per_rank(); }

  TL_HOST_DEVICE TileShape tile_shape(uint32_t ch) const {
    return {map.rows_of_channel(ch).rows, row_bytes};
  }
  TL_HOST_DEVICE TileRef tile_ref(void* gathered, uint32_t ch) const {
    return {static_cast<char*>(gathered) + uint64_t(map.rows_of_channel(ch).row0) * pitch, pitch};
  }
  // Tile ch of its origin rank's `own_rows` (that rank's rows_per_rank rows, row_bytes apart).
  TL_HOST_DEVICE TileRef own_tile_ref(const void* own_rows, uint32_t ch) const {
    const uint32_t local = map.rows_of_channel(ch).row0 - map.rank_of_channel(ch) * map.rows_per_rank;
    return {const_cast<char*>(static_cast<const char*>(own_rows)) + uint64_t(local) * row_bytes, row_bytes};
  }
  // Slice channels a consumer of rows [row0, row0 + rows) waits on.
  TL_HOST_DEVICE ChannelRange consumer_channels(uint32_t row0, uint32_t rows) const {
    ChannelRange r = map.channels_for_rows(row0, rows);
    r.first = tile_channel(r.first);
    return r;
  }
  // Work item i (0 <= i < num_items) of rank `rank`: which tile, moved from/to which peer.
  // Items are ordered by step, so a rank first handles the peer it is swizzled to.
  struct Item {
    uint32_t channel;  // mapping channel (add map.world for the slice channel)
    int peer;          // pull: rank read from; push: rank written to
  };
  TL_HOST_DEVICE Item item(uint32_t rank, uint32_t i) const { return item(rank, i, method); }
  TL_HOST_DEVICE Item item(uint32_t rank, uint32_t i, AgMethod m) const {
    const uint32_t cpr = map.chunks_per_rank();
    const uint32_t step = 1 + i / cpr;
    const uint32_t chunk = i % cpr;
    const uint32_t w = map.world;
    if (m == AgMethod::kPull) {
      // Full mesh: read rank+step's own tile from it. Ring: the tile of rank-step, from rank-1,
      // which received it at its previous step.
      const uint32_t origin = order == CommOrder::kFullMesh ? swizzled_peer(rank, step, w)
                                                            : ring_origin(rank, step, w);
      const uint32_t from = order == CommOrder::kFullMesh ? origin : (rank + w - 1) % w;
      return {map.channel(origin, chunk), static_cast<int>(from)};
    }
    // Full mesh: write own tile into rank+step. Ring: forward the tile of rank-step+1 to rank+1.
    const uint32_t origin = order == CommOrder::kFullMesh ? rank : ring_origin(rank, step - 1, w);
    const uint32_t to = order == CommOrder::kFullMesh ? swizzled_peer(rank, step, w) : (rank + 1) % w;
    return {map.channel(origin, chunk), static_cast<int>(to)};
  }
};

// The all-gather step (0 = own shard) at which rank `rank` holds all rows of [row0, row0 + rows):
// the order in which consumers take their tiles (AG+GEMM's schedule, MoE's tile order, SP
// attention's K/V chunks), so that each starts on what it has.
TL_HOST_DEVICE uint32_t arrival_step(const AllGatherPlan& ag, uint32_t rank, uint32_t row0, uint32_t rows) {
  const uint32_t w = ag.world();
  const uint32_t first = ag.map.rank_of_row(row0);
  const uint32_t last = ag.map.rank_of_row(row0 + rows - 1);
  uint32_t step = 0;
  for (uint32_t owner = first; owner <= last; ++owner) {
    // A full-mesh pull (SMs or copy engine) fetches owner's shard at step owner - rank; a
    // full-mesh push receives it at step rank - owner (owner writes rank at its step
    // rank - owner); a ring, pull or push, delivers it at step rank - owner.
    const bool mesh_pull = ag.order == CommOrder::kFullMesh && ag.method == AgMethod::kPull;
    const uint32_t s = mesh_pull ? (owner + w - rank) % w : (rank + w - owner) % w;
    step = s > step ? s : step;
  }
  return step;
}

// Push: a rank's own puts done say nothing of its peers' puts into it. Waiting here for every
// incoming tile keeps the contract of a pull: the rank's communication is complete only when its
// gathered rows are (the non-overlapped methods read them with no waits of their own).
template <class Ctx>
TL_HOST_DEVICE void all_gather_wait_incoming(Ctx& h, const AllGatherPlan& plan, const SignalView& sig) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  for (uint32_t q = 0; q < plan.world(); ++q) {
    if (q == rank) continue;
    for (uint32_t c = 0; c < plan.map.chunks_per_rank(); ++c) h.rank_wait(sig, plan.tile_channel(plan.map.channel(q, c)));
  }
}

// One communication block of one rank (SM path). Blocks split the items round-robin; each item
// only depends on items of earlier steps (on this or another rank), so any number of resident
// blocks makes progress. With `own_rows` the blocks first copy the rank's own tiles into `gathered`
// (round-robin too), each tile's channel set once it has landed -- before a push's entry barrier,
// since no peer writes a rank's own rows; a pushing rank sends its own tiles from `own_rows`, so its
// pushes do not wait for that copy.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void all_gather_block(Ctx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                                  const SymmetricView& heap, void* gathered, const void* own_rows = nullptr) {
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  ctx.producer_tile_notify(sig, plan.started_channel(), NotifyMode::kAdd);  // this block is running
  if (own_rows != nullptr) {
    for (uint32_t c = ctx.block(); c < plan.map.chunks_per_rank(); c += ctx.num_blocks()) {
      const uint32_t own = plan.map.channel(rank, c);
      ctx.tile_push_data(heap, plan.tile_ref(gathered, own), static_cast<int>(rank), plan.tile_shape(own),
                         plan.own_tile_ref(own_rows, own));
      ctx.producer_tile_notify(sig, plan.tile_channel(own));
    }
  } else if (ctx.block() == 0) {
    for (uint32_t c = 0; c < plan.map.chunks_per_rank(); ++c) {
      ctx.producer_tile_notify(sig, plan.tile_channel(plan.map.channel(rank, c)));
    }
  }
  // Push writes into peers: wait until they have all entered this call. Pull only writes its own
  // buffer, and its exit barrier protects what peers read.
  if (plan.method == AgMethod::kPush) rank_barrier(ctx, sig, plan.barrier_channel());
  for (uint32_t i = ctx.block(); i < plan.num_items(); i += ctx.num_blocks()) {
    const AllGatherPlan::Item it = plan.item(rank, i);
    const uint32_t ch = plan.tile_channel(it.channel);
    const TileRef tile = plan.tile_ref(gathered, it.channel);
    const TileShape shape = plan.tile_shape(it.channel);
    if (plan.method == AgMethod::kPull) {
      ctx.peer_tile_wait(sig, ch, it.peer);
      ctx.tile_pull_data(tile, heap, tile, it.peer, shape);
      ctx.producer_tile_notify(sig, ch);
    } else {
      const bool from_own_rows = own_rows != nullptr && plan.map.rank_of_channel(it.channel) == rank;
      if (plan.order == CommOrder::kRing && !from_own_rows) ctx.consumer_tile_wait(sig, ch);
      ctx.tile_push_data(heap, tile, it.peer, shape, from_own_rows ? plan.own_tile_ref(own_rows, it.channel) : tile);
      ctx.peer_tile_notify(sig, ch, it.peer);
    }
  }
  if (plan.method == AgMethod::kPull) rank_exit_barrier(ctx, sig, plan.exit_channel());
  // Push: as all_gather_wait_incoming on the stream, so that the kernel's end means every row is
  // here (one block waits; the others have nothing left that depends on it).
  if (plan.method == AgMethod::kPush && ctx.block() == 0) {
    for (uint32_t q = 0; q < plan.world(); ++q) {
      if (q == rank) continue;
      for (uint32_t c = 0; c < plan.map.chunks_per_rank(); ++c) {
        ctx.consumer_tile_wait(sig, plan.tile_channel(plan.map.channel(q, c)), 1, 1);
      }
    }
  }
}

// Copy-engine path, on one rank's communication stream: a full-mesh pull or push (`gathered`
// contiguous). The stream memops replace the SM notifies: a consumer kernel waits on the same
// channels. In two halves, because a stream's waits must never depend on work the host has not
// enqueued yet: the transfer half of rank r waits for every peer's announcement, and a process
// that drives several ranks would otherwise enqueue rank r's copies behind a wait on rank r + 1's
// announcement -- once the stream's queue is full, the host blocks in the next copy and never
// enqueues that announcement (a deadlock seen at 8 virtual ranks with ~70+ tiles per rank).
// Such a process enqueues every rank's announcement first, then every rank's transfer.
//
// Announce: the rank's own rows are in place (before the call, or each tile once copied from
// `own_rows`), so its consumers may start on them, and its arrival at the entry barrier, which
// tells peers that those rows are there to pull.
template <class HostCtx>
void all_gather_stream_announce(HostCtx& h, const AllGatherPlan& plan, const SignalView& sig, void* gathered = nullptr,
                                const void* own_rows = nullptr) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  for (uint32_t c = 0; c < plan.map.chunks_per_rank(); ++c) {
    const uint32_t own = plan.map.channel(rank, c);
    if (own_rows != nullptr) {  // the tile's rows from own_rows (row_bytes apart) into `gathered`
      const TileRef dst = plan.tile_ref(gathered, own);
      const TileRef src = plan.own_tile_ref(own_rows, own);
      const TileShape shape = plan.tile_shape(own);
      if (plan.pitch == plan.row_bytes) {
        h.rank_copy_data(dst.ptr, src.ptr, shape.bytes());
      } else {
        for (uint32_t row = 0; row < shape.rows; ++row) h.rank_copy_data(dst.row(row), src.row(row), shape.row_bytes);
      }
    }
    h.rank_notify(sig, plan.tile_channel(own), h.rank());
  }
  rank_barrier_stream_arrive(h, sig, plan.barrier_channel());
}

// Transfer: a stream cannot poll a peer's "own rows present" channel; the entry barrier stands
// for it (every peer has entered this call, so its rows for this call are in place, and its
// consumers of the previous call's rows are done). Pull: every peer's tiles, each followed by its
// channel's notify, and the exit barrier (peers read this rank's rows). Push: the rank's own
// tiles into every peer, each with the peer's channel set behind it (rank_put_signal: the
// put-with-signal transport's path); no peer reads this rank's buffer, so no exit barrier.
template <class HostCtx>
void all_gather_stream_transfer(HostCtx& h, const AllGatherPlan& plan, const SignalView& sig,
                                const SymmetricView& heap, void* gathered) {
  const uint32_t rank = static_cast<uint32_t>(h.rank());
  rank_barrier_stream_wait(h, sig, plan.barrier_channel());
  if (plan.method == AgMethod::kPush) {
    for (uint32_t i = 0; i < plan.num_items(); ++i) {
      const AllGatherPlan::Item it = plan.item(rank, i, AgMethod::kPush);
      const TileRef tile = plan.tile_ref(gathered, it.channel);
      h.rank_put_signal(heap, tile.ptr, tile.ptr, tile.pitch, plan.tile_shape(it.channel), sig,
                        plan.tile_channel(it.channel), it.peer);
    }
    all_gather_wait_incoming(h, plan, sig);
    return;
  }
  for (uint32_t i = 0; i < plan.num_items(); ++i) {
    const AllGatherPlan::Item it = plan.item(rank, i, AgMethod::kPull);
    const TileRef tile = plan.tile_ref(gathered, it.channel);
    const TileShape shape = plan.tile_shape(it.channel);
    if (plan.pitch == plan.row_bytes) {  // the tile's rows are contiguous: one copy
      h.rank_copy_data(tile.ptr, heap.translate(static_cast<char*>(tile.ptr), it.peer), shape.bytes());
    } else {
      for (uint32_t row = 0; row < shape.rows; ++row) {
        char* dst = static_cast<char*>(tile.row(row));
        h.rank_copy_data(dst, heap.translate(dst, it.peer), shape.row_bytes);
      }
    }
    h.rank_notify(sig, plan.tile_channel(it.channel), h.rank());
  }
  rank_exit_barrier_stream(h, sig, plan.exit_channel());
}

// Both halves, for a stream that is the only one its process enqueues (one rank per process, the
// CPU executor's stream threads).
template <class HostCtx>
void all_gather_stream(HostCtx& h, const AllGatherPlan& plan, const SignalView& sig,
                       const SymmetricView& heap, void* gathered, const void* own_rows = nullptr) {
  all_gather_stream_announce(h, plan, sig, gathered, own_rows);
  all_gather_stream_transfer(h, plan, sig, heap, gathered);
}

// What channel `ch` of the slice carries, in words, for timeout reports: whose rows, or which
// rank's arrival at a barrier. Host only.
std::string describe_all_gather_channel(const AllGatherPlan& plan, uint32_t ch);
// The ranks that had not entered the call by the time a wait gave up, from the record's snapshot of
// the waiter's entry-barrier channels ("" when every rank had, or the snapshot does not cover them).
// For all-gathers with an entry barrier (copy engine, push).
std::string describe_all_gather_entry_state(const AllGatherPlan& plan, const ErrorRecord& record);

// A consumer's wait for rows [row0, row0 + rows) of the gathered tensor.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void all_gather_wait_rows(Ctx& ctx, const AllGatherPlan& plan, const SignalView& sig,
                                      uint32_t row0, uint32_t rows, int32_t tile = -1) {
  const ChannelRange r = plan.consumer_channels(row0, rows);
  if (r.count > 0) ctx.consumer_tile_wait(sig, r.first, r.count, 1, tile);
}

}  // namespace tilelink
