// Reduce-scatter protocol: every rank holds a partial result of world * rows_per_rank rows of
// `cols` floats (symmetric `partial`); rank r ends with rows [r * rows_per_rank, ...) summed over
// all ranks in `out`. The sum runs in rank order 0, 1, ..., world-1 whatever the arrival order,
// so results are bit-identical from run to run.
//
// Channels of the slice: [0, world) entry barrier (push only); [world, 2 world + 1) exit barrier (pull only:
// the owner reads its peers' partials); then
//  - push: chunks_per_rank channels; peers add 1 to chunk c's channel on the owner after pushing
//    their part into the owner's receive slot (arrivals = world - 1);
//  - pull: world * chunks_per_rank "partial ready" channels (RowShardMapping::channel), each
//    rank's own copies set at the start; the owner polls them on each peer and pulls.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/comm/work_queue.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

enum class RsMethod : uint32_t {
  kPush = 0,  // senders push into the owner's receive slots (add-mode notify)
  kPull = 1,  // the owner pulls from each sender after polling its ready flag
};

struct ReduceScatterPlan {
  RowShardMapping map;
  uint32_t cols = 0;  // floats per row (a multiple of 4); rows are contiguous (pitch = cols)
  RsMethod method = RsMethod::kPush;
  // Rows per reduction item: chunks are reduced in slices so that all of a rank's blocks share
  // the work whatever the communication tile size (0 = one slice per chunk).
  uint32_t reduce_rows = 0;

  TL_HOST_DEVICE uint32_t world() const { return map.world; }
  TL_HOST_DEVICE uint32_t row_bytes() const { return cols * 4u; }
  TL_HOST_DEVICE uint32_t barrier_channel() const { return 0; }
  TL_HOST_DEVICE uint32_t exit_channel() const { return entry_barrier_channels(map.world); }
  TL_HOST_DEVICE uint32_t data_channel0() const {
    return exit_channel() + exit_barrier_channels(map.world);
  }
  TL_HOST_DEVICE uint32_t chunk_channel(uint32_t chunk) const { return data_channel0() + chunk; }
  TL_HOST_DEVICE uint32_t ready_channel(uint32_t owner, uint32_t chunk) const {
    return data_channel0() + map.channel(owner, chunk);
  }
  TL_HOST_DEVICE uint32_t num_channels() const {
    return data_channel0() + (method == RsMethod::kPush ? map.chunks_per_rank() : map.num_channels());
  }
  // Floats of each buffer (per rank).
  TL_HOST_DEVICE uint64_t partial_elems() const { return uint64_t(map.total_rows()) * cols; }
  TL_HOST_DEVICE uint64_t recv_elems() const { return partial_elems(); }
  TL_HOST_DEVICE uint64_t out_elems() const { return uint64_t(map.rows_per_rank) * cols; }

  // Rows [row0, row0 + rows) of chunk `chunk` within a rank's block (local row numbering).
  TL_HOST_DEVICE RowRange chunk_rows(uint32_t chunk) const {
    return map.rows_of_channel(map.channel(0, chunk));
  }
  TL_HOST_DEVICE TileShape chunk_shape(uint32_t chunk) const {
    return {chunk_rows(chunk).rows, row_bytes()};
  }
  // Owner `owner`'s chunk in a full-size buffer (partial), and sender q's slot in recv.
  TL_HOST_DEVICE TileRef partial_tile(float* partial, uint32_t owner, uint32_t chunk) const {
    const uint64_t row = uint64_t(owner) * map.rows_per_rank + chunk_rows(chunk).row0;
    return {partial + row * cols, row_bytes()};
  }
  TL_HOST_DEVICE TileRef recv_tile(float* recv, uint32_t sender, uint32_t chunk) const {
    return partial_tile(recv, sender, chunk);
  }

  // Reduction items: (chunk, slice of reduce_rows rows); the last slice of a chunk may be short
  // or, for a short last chunk, empty.
  TL_HOST_DEVICE uint32_t slice_rows() const {
    return reduce_rows == 0 || reduce_rows > map.comm_rows ? map.comm_rows : reduce_rows;
  }
  TL_HOST_DEVICE uint32_t slices_per_chunk() const {
    return (map.comm_rows + slice_rows() - 1) / slice_rows();
  }
  TL_HOST_DEVICE uint32_t num_reduce_items() const {
    return map.chunks_per_rank() * slices_per_chunk();
  }
  // Rows of item i within the chunk it belongs to: [row0, row0 + rows) relative to the chunk.
  TL_HOST_DEVICE RowRange item_rows(uint32_t i) const {
    const RowRange chunk = chunk_rows(i / slices_per_chunk());
    const uint32_t row0 = (i % slices_per_chunk()) * slice_rows();
    if (row0 >= chunk.rows) return {row0, 0};
    return {row0, chunk.rows - row0 < slice_rows() ? chunk.rows - row0 : slice_rows()};
  }
};

// 16-byte vector of the reduction (cols is a multiple of 4, buffers 16-byte aligned).
struct alignas(16) Float4 {
  float v[4];
};

// One block of one rank. The rank's units come from its work queue (for_each_queued_unit), so
// no unit is bound to a block and any one resident block does them all:
//  - unit 0 announces the rank: push, its entry (the first half of rank_barrier); pull, every
//    chunk of its partial ready for the owners to read;
//  - push: (world - 1) x chunks_per_rank sends, each after every rank's entry, tiles other ranks
//    need in swizzled order;
//  - the reduction items of this rank's chunks, each once its inputs have arrived.
// Every unit waits only on units before it in some rank's queue, which never wait on later ones.
TL_PROTOCOL
template <class Ctx, class Queue>
TL_HOST_DEVICE void reduce_scatter_block(Ctx& ctx, const ReduceScatterPlan& plan, const SignalView& sig,
                                         const SymmetricView& heap, float* partial, float* recv, float* out,
                                         Queue& queue) {
  const uint32_t w = plan.world();
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const uint32_t cpr = plan.map.chunks_per_rank();
  const bool push = plan.method == RsMethod::kPush;
  const uint32_t sends = push ? (w - 1) * cpr : 0;
  bool entered = false;  // push: every rank's entry seen by this block (uniform over its threads)

  for_each_queued_unit(ctx, queue, 1 + sends + plan.num_reduce_items(), [&](uint32_t u) {
    if (u == 0) {
      if (push) {
        for (int p = 0; p < ctx.world(); ++p) ctx.peer_tile_notify(sig, plan.barrier_channel() + rank, p);
      } else {
        for (uint32_t o = 0; o < w; ++o) {
          for (uint32_t c = 0; c < cpr; ++c) ctx.producer_tile_notify(sig, plan.ready_channel(o, c));
        }
      }
      return;
    }
    if (u <= sends) {
      if (!entered) {  // no write into a peer before it has entered this call
        ctx.consumer_tile_wait(sig, plan.barrier_channel(), w);
        entered = true;
      }
      const uint32_t i = u - 1;
      const uint32_t owner = swizzled_peer(rank, 1 + i / cpr, w);
      const uint32_t chunk = i % cpr;
      ctx.tile_push_data(heap, plan.recv_tile(recv, rank, chunk), static_cast<int>(owner), plan.chunk_shape(chunk),
                         plan.partial_tile(partial, owner, chunk));
      ctx.peer_tile_notify(sig, plan.chunk_channel(chunk), static_cast<int>(owner), NotifyMode::kAdd);
      return;
    }
    const uint32_t i = u - 1 - sends;
    const uint32_t chunk = i / plan.slices_per_chunk();
    const RowRange slice = plan.item_rows(i);
    if (slice.rows == 0) return;
    const uint64_t offset = uint64_t(slice.row0) * plan.cols;  // floats into the chunk
    const TileShape shape{slice.rows, plan.row_bytes()};
    if (push) {
      ctx.consumer_tile_wait(sig, plan.chunk_channel(chunk), 1, w - 1, static_cast<int32_t>(chunk));
    } else {
      for (uint32_t s = 1; s < w; ++s) {
        const uint32_t q = swizzled_peer(rank, s, w);
        ctx.peer_tile_wait(sig, plan.ready_channel(rank, chunk), static_cast<int>(q), 1,
                           static_cast<int32_t>(chunk));
        const TileRef dst = plan.recv_tile(recv, q, chunk);
        const TileRef src = plan.partial_tile(partial, rank, chunk);
        ctx.tile_pull_data({static_cast<float*>(dst.ptr) + offset, dst.pitch}, heap,
                           {static_cast<float*>(src.ptr) + offset, src.pitch}, static_cast<int>(q), shape);
      }
      ctx.sync();
    }
    // Sum in rank order 0..world-1: bit-identical results whatever the arrival order.
    const uint64_t n4 = uint64_t(slice.rows) * plan.cols / 4;
    const Lanes lanes = ctx.lanes();
    Float4* dst = reinterpret_cast<Float4*>(out + uint64_t(plan.chunk_rows(chunk).row0) * plan.cols + offset);
    for (uint64_t e = lanes.id; e < n4; e += lanes.count) {
      Float4 acc{{0.f, 0.f, 0.f, 0.f}};
      for (uint32_t q = 0; q < w; ++q) {
        const TileRef t = q == rank ? plan.partial_tile(partial, rank, chunk) : plan.recv_tile(recv, q, chunk);
        const Float4 x = reinterpret_cast<const Float4*>(static_cast<const float*>(t.ptr) + offset)[e];
        for (int k = 0; k < 4; ++k) acc.v[k] += x.v[k];
      }
      dst[e] = acc;
    }
  });
  if (!push) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
