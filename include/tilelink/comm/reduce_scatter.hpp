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
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink {

enum class RsMethod : uint32_t {
  kPush = 0,  // senders push into the owner's receive slots (add-mode notify)
  kPull = 1,  // the owner pulls from each sender after polling its ready flag
};

struct ReduceScatterPlan {
  RowShardMapping map;
  uint32_t cols = 0;  // floats per row; partial/recv/out rows are contiguous (pitch = cols)
  RsMethod method = RsMethod::kPush;

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
};

// One block of one rank: first the sends (tiles other ranks need, in swizzled order), then the
// reduction of this rank's chunks as their inputs arrive.
TL_PROTOCOL
template <class Ctx>
TL_HOST_DEVICE void reduce_scatter_block(Ctx& ctx, const ReduceScatterPlan& plan,
                                      const SignalView& sig, const SymmetricView& heap,
                                      float* partial, float* recv, float* out) {
  if (plan.method == RsMethod::kPush) rank_barrier(ctx, sig, plan.barrier_channel());
  const uint32_t w = plan.world();
  const uint32_t rank = static_cast<uint32_t>(ctx.rank());
  const uint32_t cpr = plan.map.chunks_per_rank();

  if (plan.method == RsMethod::kPush) {
    for (uint32_t i = ctx.block(); i < (w - 1) * cpr; i += ctx.num_blocks()) {
      const uint32_t owner = swizzled_peer(rank, 1 + i / cpr, w);
      const uint32_t chunk = i % cpr;
      ctx.tile_push_data(heap, plan.recv_tile(recv, rank, chunk), static_cast<int>(owner),
                         plan.chunk_shape(chunk), plan.partial_tile(partial, owner, chunk));
      ctx.peer_tile_notify(sig, plan.chunk_channel(chunk), static_cast<int>(owner), NotifyMode::kAdd);
    }
  } else if (ctx.block() == 0) {
    for (uint32_t o = 0; o < w; ++o) {
      for (uint32_t c = 0; c < cpr; ++c) ctx.producer_tile_notify(sig, plan.ready_channel(o, c));
    }
  }

  for (uint32_t chunk = ctx.block(); chunk < cpr; chunk += ctx.num_blocks()) {
    if (plan.method == RsMethod::kPush) {
      ctx.consumer_tile_wait(sig, plan.chunk_channel(chunk), 1, w - 1, static_cast<int32_t>(chunk));
    } else {
      for (uint32_t s = 1; s < w; ++s) {
        const uint32_t q = swizzled_peer(rank, s, w);
        ctx.peer_tile_wait(sig, plan.ready_channel(rank, chunk), static_cast<int>(q), 1,
                           static_cast<int32_t>(chunk));
        ctx.tile_pull_data(plan.recv_tile(recv, q, chunk), heap,
                           plan.partial_tile(partial, rank, chunk), static_cast<int>(q),
                           plan.chunk_shape(chunk));
      }
      ctx.sync();
    }
    const RowRange rows = plan.chunk_rows(chunk);
    const uint64_t n = uint64_t(rows.rows) * plan.cols;
    const Lanes lanes = ctx.lanes();
    for (uint64_t e = lanes.id; e < n; e += lanes.count) {
      float acc = 0.f;
      for (uint32_t q = 0; q < w; ++q) {
        const float* src = q == rank ? static_cast<const float*>(plan.partial_tile(partial, rank, chunk).ptr)
                                     : static_cast<const float*>(plan.recv_tile(recv, q, chunk).ptr);
        acc += src[e];
      }
      out[uint64_t(rows.row0) * plan.cols + e] = acc;
    }
  }
  if (plan.method == RsMethod::kPull) rank_exit_barrier(ctx, sig, plan.exit_channel());
}

}  // namespace tilelink
