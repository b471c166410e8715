// Definitions of the device primitives declared in tilelink/primitives/device.cuh.
#pragma once

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>

namespace tilelink {
namespace detail {

TL_DEVICE uint64_t ld_acquire(const uint64_t* p, MemScope scope) {
  uint64_t v;
  if (scope == MemScope::kSys) {
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  } else {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  }
  return v;
}

TL_DEVICE void st_release(uint64_t* p, uint64_t v, MemScope scope) {
  if (scope == MemScope::kSys) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else {
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}

TL_DEVICE void red_release_add(uint64_t* p, uint64_t v, MemScope scope) {
  if (scope == MemScope::kSys) {
    asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  } else {
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}

// Orders generic-proxy and async-proxy (TMA, cp.async.bulk) accesses to global memory.
TL_DEVICE void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

TL_DEVICE uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Inlined, cold: a call anywhere in a kernel makes ptxas serialize its wgmma pipeline (C7510),
// and the fused GEMMs wait with these primitives.
TL_DEVICE void report_timeout(const SignalView& sig, WaitKind kind, uint32_t channel,
                                            int peer, int32_t tile, uint64_t expected,
                                            uint64_t observed, uint64_t elapsed_ns) {
  const ErrorChannelView& ch = sig.errors;
  if (ch.claim != nullptr && ch.record != nullptr && atomicCAS(ch.claim, 0u, 1u) == 0u) {
    volatile ErrorRecord* r = ch.record;
    r->kind = kind;
    r->op_id = sig.op_id;
    r->rank = sig.rank;
    r->block = static_cast<int32_t>(blockIdx.x);
    r->tile = tile;
    r->channel = channel;
    r->peer = peer;
    r->kernel = sig.kernel_id;
    r->expected = expected;
    r->observed = observed;
    r->elapsed_ns = elapsed_ns;
    r->epoch = sig.epoch;
    uint32_t n = 0;
    if (sig.local_channels != nullptr) {
      n = sig.num_channels < ErrorRecord::kSnapshotChannels ? sig.num_channels : ErrorRecord::kSnapshotChannels;
      for (uint32_t i = 0; i < n; ++i) r->snapshot[i] = ld_acquire(sig.local_channels + i, sig.scope);
    }
    r->snapshot_count = n;
    __threadfence_system();
    r->state = ErrorRecord::kValid;
    __threadfence_system();
  }
  __trap();
}

// Spin on one channel with acquire loads until it reaches `expected`; bounded by the timeout.
TL_DEVICE void spin_until(const SignalView& sig, const uint64_t* addr, uint64_t expected,
                          WaitKind kind, uint32_t channel, int peer, int32_t tile) {
  uint64_t v = ld_acquire(addr, sig.scope);
  if (epoch_reached(v, expected)) return;
  const uint64_t start = globaltimer_ns();
  for (uint32_t spins = 1;; ++spins) {
    v = ld_acquire(addr, sig.scope);
    if (epoch_reached(v, expected)) return;
    if ((spins & 255u) == 0u && sig.errors.timeout_ns != 0) {
      const uint64_t elapsed = globaltimer_ns() - start;
      if (elapsed > sig.errors.timeout_ns) {
        report_timeout(sig, kind, channel, peer, tile, expected, v, elapsed);
      }
    }
  }
}

TL_DEVICE void notify(const SignalView& sig, uint64_t* addr, NotifyMode mode) {
  // Data written through the async proxy (TMA stores that completed) is ordered before the flag.
  fence_proxy_async_global();
  if (mode == NotifyMode::kSet) {
    st_release(addr, sig.set_value(), sig.scope);
  } else {
    red_release_add(addr, 1, sig.scope);
  }
}

// Cooperative 16-byte-vector copy of a 2D tile. Four vectors in flight per thread.
TL_DEVICE void copy_tile_ldst(Lanes lanes, TileRef dst, TileRef src, TileShape shape) {
  constexpr uint32_t kUnroll = 4;
  const bool flat = dst.pitch == shape.row_bytes && src.pitch == shape.row_bytes;
  const uint32_t vec_per_row = shape.row_bytes / 16;
  const uint64_t total = flat ? shape.bytes() / 16 : uint64_t(shape.rows) * vec_per_row;
  auto address = [&](const TileRef& t, uint64_t v) -> int4* {
    if (flat) return static_cast<int4*>(t.ptr) + v;
    const uint64_t row = v / vec_per_row;
    return reinterpret_cast<int4*>(t.row(static_cast<uint32_t>(row))) + (v - row * vec_per_row);
  };
  const uint64_t stride = uint64_t(lanes.count) * kUnroll;
  uint64_t base = lanes.id;
  for (; base + uint64_t(lanes.count) * (kUnroll - 1) < total; base += stride) {
    int4 buf[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) buf[u] = *address(src, base + u * lanes.count);
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) *address(dst, base + u * lanes.count) = buf[u];
  }
  for (uint64_t v = base; v < total; v += lanes.count) *address(dst, v) = *address(src, v);
}

TL_DEVICE void bulk_wait_all_writes() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

TL_DEVICE void bulk_wait_reads_except_newest() {
  asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
}

// One-thread bulk copy global -> smem -> global through a ring of stages. Up to stages-1 loads
// and two stores are in flight.
TL_DEVICE void copy_tile_bulk(BulkStaging& st, TileRef dst, TileRef src, TileShape shape) {
  const bool flat = dst.pitch == shape.row_bytes && src.pitch == shape.row_bytes;
  const uint32_t rows = flat ? 1u : shape.rows;
  const uint64_t row_bytes = flat ? shape.bytes() : shape.row_bytes;
  if (rows == 0 || row_bytes == 0) return;
  const uint64_t chunks_per_row = (row_bytes + st.stage_bytes - 1) / st.stage_bytes;
  const uint64_t chunks = chunks_per_row * rows;
  auto chunk_bytes = [&](uint64_t c) -> uint32_t {
    const uint64_t off = (c % chunks_per_row) * st.stage_bytes;
    const uint64_t left = row_bytes - off;
    return static_cast<uint32_t>(left < st.stage_bytes ? left : st.stage_bytes);
  };
  auto chunk_ptr = [&](const TileRef& t, uint64_t c) -> char* {
    const uint64_t row = c / chunks_per_row;
    return static_cast<char*>(t.ptr) + row * t.pitch + (c % chunks_per_row) * st.stage_bytes;
  };
  auto issue_load = [&](uint64_t c) {
    const uint32_t s = static_cast<uint32_t>(c % st.stages);
    const uint32_t n = chunk_bytes(c);
    cute::set_barrier_transaction_bytes(st.mbarriers[s], n);
    cute::SM90_BULK_COPY_G2S::copy(chunk_ptr(src, c), &st.mbarriers[s],
                                   st.smem + uint64_t(s) * st.stage_bytes, static_cast<int32_t>(n));
  };

  // The source may have been written by generic stores (or acquired from a flag) just before.
  fence_proxy_async_global();
  const uint64_t prefetch = chunks < st.stages - 1 ? chunks : st.stages - 1;
  for (uint64_t c = 0; c < prefetch; ++c) issue_load(c);
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint32_t s = static_cast<uint32_t>(c % st.stages);
    cute::wait_barrier(st.mbarriers[s], (st.phase_bits >> s) & 1u);
    st.phase_bits ^= (1u << s);
    cute::SM90_BULK_COPY_S2G::copy(st.smem + uint64_t(s) * st.stage_bytes, chunk_ptr(dst, c),
                                   static_cast<int32_t>(chunk_bytes(c)));
    cute::tma_store_arrive();
    const uint64_t next = c + st.stages - 1;
    if (next < chunks) {
      // `next` reuses the stage of chunk c-1, whose store must have finished reading it.
      bulk_wait_reads_except_newest();
      issue_load(next);
    }
  }
  bulk_wait_all_writes();
  fence_proxy_async_global();
}

}  // namespace detail

TL_DEVICE void bulk_staging_init(BulkStaging& staging) {
  for (uint32_t s = 0; s < staging.stages; ++s) cute::initialize_barrier(staging.mbarriers[s], 1);
  staging.phase_bits = 0;
  // Make the initialised barriers visible to the async proxy (the bulk copies complete on them).
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

TL_DEVICE void producer_tile_notify(const SignalView& sig, uint32_t channel, NotifyMode mode) {
  detail::notify(sig, sig.local(channel), mode);
}

TL_DEVICE void peer_tile_notify(const SignalView& sig, uint32_t channel, int peer, NotifyMode mode) {
  detail::notify(sig, sig.on(peer, channel), mode);
}

TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count,
                                  uint32_t arrivals, int32_t tile) {
  const uint64_t expected = sig.expected(arrivals);
  for (uint32_t c = channel; c < channel + count; ++c) {
    detail::spin_until(sig, sig.local(c), expected, WaitKind::kConsumerTile, c, sig.rank, tile);
  }
  // Tiles read next through TMA (async proxy) must see the data this acquire made visible.
  detail::fence_proxy_async_global();
}

TL_DEVICE void peer_tile_wait(const SignalView& sig, uint32_t channel, int peer, uint32_t arrivals,
                              int32_t tile) {
  detail::spin_until(sig, sig.on(peer, channel), sig.expected(arrivals), WaitKind::kPeerTile,
                     channel, peer, tile);
  detail::fence_proxy_async_global();
}

TL_DEVICE void tile_push_data(Lanes lanes, const SymmetricView& heap, TileRef dst_sym, int peer,
                              TileShape shape, TileRef src) {
  TileRef dst{heap.translate(static_cast<char*>(dst_sym.ptr), peer), dst_sym.pitch};
  detail::copy_tile_ldst(lanes, dst, src, shape);
}

TL_DEVICE void tile_pull_data(Lanes lanes, TileRef dst, const SymmetricView& heap, TileRef src_sym,
                              int peer, TileShape shape) {
  TileRef src{heap.translate(static_cast<char*>(src_sym.ptr), peer), src_sym.pitch};
  detail::copy_tile_ldst(lanes, dst, src, shape);
}

TL_DEVICE void tile_push_data(BulkStaging& staging, const SymmetricView& heap, TileRef dst_sym,
                              int peer, TileShape shape, TileRef src) {
  TileRef dst{heap.translate(static_cast<char*>(dst_sym.ptr), peer), dst_sym.pitch};
  detail::copy_tile_bulk(staging, dst, src, shape);
}

TL_DEVICE void tile_pull_data(BulkStaging& staging, TileRef dst, const SymmetricView& heap,
                              TileRef src_sym, int peer, TileShape shape) {
  TileRef src{heap.translate(static_cast<char*>(src_sym.ptr), peer), src_sym.pitch};
  detail::copy_tile_bulk(staging, dst, src, shape);
}

}  // namespace tilelink
