// GPU context for protocol templates: a CTA of one rank (DeviceBlockCtx; a rank's stream is
// StreamCtx, stream_ctx.hpp). The block context turns the thread-level primitives into block-level ones:
// notifies are preceded by a barrier (all threads' stores, then thread 0 releases), waits are
// followed by one (thread 0 acquires, then every thread may read). With a TraceView on, thread 0
// records each wait, copy and notify as a span (trace.hpp); off, one predicated branch each.
#pragma once

#include <cuda_runtime_api.h>

#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"
#include "tilelink/comm/stream_ctx.hpp"

namespace tilelink {

// kBulk: data primitives go through TMA bulk copies issued by thread 0 (needs `staging`);
// otherwise all threads move 16-byte vectors.
template <bool kBulk>
struct DeviceBlockCtx {
  int rank_;
  int world_;
  BulkStaging* staging_;
  TraceView trace_{};

  TL_DEVICE void trace(TraceKind kind, uint32_t channel, uint64_t start) const {
    if (threadIdx.x == 0) trace_span(trace_, kind, channel, TraceRole::kComm, start, trace_start(trace_));
  }
  // A single-thread wait (thread 0 runs `wait`), traced, then the barrier: every thread may read
  // what the channel guards.
  template <class Wait>
  TL_DEVICE void traced_wait(uint32_t channel, Wait&& wait) const {
    const uint64_t t0 = trace_start(trace_);
    if (threadIdx.x == 0) wait();
    trace(TraceKind::kWait, channel, t0);
    __syncthreads();
  }

  TL_DEVICE int rank() const { return rank_; }
  TL_DEVICE int world() const { return world_; }
  TL_DEVICE uint32_t block() const { return blockIdx.x; }
  TL_DEVICE uint32_t num_blocks() const { return gridDim.x; }
  TL_DEVICE Lanes lanes() const { return {threadIdx.x, blockDim.x}; }
  TL_DEVICE void sync() const { __syncthreads(); }

  TL_DEVICE void producer_tile_notify(const SignalView& sig, uint32_t channel,
                                      NotifyMode mode = NotifyMode::kSet) {
    __syncthreads();
    const uint64_t t0 = trace_start(trace_);
    if (threadIdx.x == 0) tilelink::producer_tile_notify(sig, channel, mode);
    trace(TraceKind::kNotify, channel, t0);
  }
  // producer_tile_notify (kSet) of channels [channel0, channel0 + n), the stores spread over the
  // block's threads, each a release of what the thread has observed (after the barrier: what the
  // whole block wrote, and what it saw complete -- a previous grid after griddepcontrol.wait).
  TL_DEVICE void producer_tiles_notify(const SignalView& sig, uint32_t channel0, uint32_t n) {
    __syncthreads();
    const uint64_t t0 = trace_start(trace_);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) tilelink::producer_tile_notify(sig, channel0 + i);
    trace(TraceKind::kNotify, channel0, t0);
  }
  // consumer_tile_wait on a set of tiles: for i in [0, n), the channels_per_tile channels from
  // channel0 + tile_of(i) * channels_per_tile. The waits are spread over the block's threads
  // (each an acquire of its own channel), then the barrier: every thread may read what any of
  // the channels guards.
  template <class TileOf>
  TL_DEVICE void consumer_tiles_wait(const SignalView& sig, uint32_t channel0, uint32_t n, TileOf&& tile_of,
                                     uint32_t channels_per_tile = 1) {
    const uint64_t t0 = trace_start(trace_);
    for (uint32_t i = threadIdx.x; i < n * channels_per_tile; i += blockDim.x) {
      const uint32_t tile = tile_of(i / channels_per_tile);
      tilelink::consumer_tile_wait(sig, channel0 + tile * channels_per_tile + i % channels_per_tile, 1, 1,
                                   static_cast<int32_t>(tile));
    }
    __syncthreads();
    trace(TraceKind::kWait, channel0, t0);
  }
  TL_DEVICE void peer_tile_notify(const SignalView& sig, uint32_t channel, int peer,
                                  NotifyMode mode = NotifyMode::kSet) {
    __syncthreads();
    const uint64_t t0 = trace_start(trace_);
    if (threadIdx.x == 0) tilelink::peer_tile_notify(sig, channel, peer, mode);
    trace(TraceKind::kNotify, channel, t0);
  }
  TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count = 1,
                                    uint32_t arrivals = 1, int32_t tile = -1) {
    traced_wait(channel, [&] { tilelink::consumer_tile_wait(sig, channel, count, arrivals, tile); });
  }
  TL_DEVICE void peer_tile_wait(const SignalView& sig, uint32_t channel, int peer,
                                uint32_t arrivals = 1, int32_t tile = -1) {
    traced_wait(channel, [&] { tilelink::peer_tile_wait(sig, channel, peer, arrivals, tile); });
  }
  TL_DEVICE void tile_push_data(const SymmetricView& heap, TileRef dst_sym, int peer,
                                TileShape shape, TileRef src) {
    const uint64_t t0 = trace_start(trace_);
    push(heap, dst_sym, peer, shape, src);
    if (trace_.on()) {
      __syncthreads();  // every thread's part of the copy
      trace(TraceKind::kCopy, 0xFFFFFFFFu, t0);
    }
  }
  TL_DEVICE void tile_pull_data(TileRef dst, const SymmetricView& heap, TileRef src_sym, int peer,
                                TileShape shape) {
    const uint64_t t0 = trace_start(trace_);
    pull(dst, heap, src_sym, peer, shape);
    if (trace_.on()) {
      __syncthreads();
      trace(TraceKind::kCopy, 0xFFFFFFFFu, t0);
    }
  }

  // The data primitives' bodies (untraced).
  TL_DEVICE void push(const SymmetricView& heap, TileRef dst_sym, int peer, TileShape shape, TileRef src) {
    if constexpr (kBulk) {
      // Thread 0's bulk copy (async proxy) reads what any thread of the block may just have
      // written with ordinary stores: each writer fences, then the barrier.
      asm volatile("fence.proxy.async.global;" ::: "memory");
      __syncthreads();
      if (threadIdx.x == 0) tilelink::tile_push_data(*staging_, heap, dst_sym, peer, shape, src);
    } else {
      tilelink::tile_push_data(lanes(), heap, dst_sym, peer, shape, src);
    }
  }
  TL_DEVICE void pull(TileRef dst, const SymmetricView& heap, TileRef src_sym, int peer, TileShape shape) {
    if constexpr (kBulk) {
      __syncthreads();
      if (threadIdx.x == 0) tilelink::tile_pull_data(*staging_, dst, heap, src_sym, peer, shape);
    } else {
      tilelink::tile_pull_data(lanes(), dst, heap, src_sym, peer, shape);
    }
  }
};

// Shared-memory layout of a bulk-path CTA: kStages staging buffers after the mbarriers.
struct BulkSmem {
  static constexpr uint32_t kStages = 4;
  static constexpr uint32_t kStageBytes = 16 * 1024;
  static constexpr size_t bytes() { return 128 + size_t(kStages) * kStageBytes; }
  // Thread 0 only: carve `smem` (dynamic shared memory, 128-byte aligned) and init barriers.
  static TL_DEVICE BulkStaging init(char* smem) {
    BulkStaging st;
    st.mbarriers = reinterpret_cast<uint64_t*>(smem);
    st.smem = smem + 128;
    st.stages = kStages;
    st.stage_bytes = kStageBytes;
    st.phase_bits = 0;
    bulk_staging_init(st);
    return st;
  }
};

}  // namespace tilelink
