// The reduction half of GEMM+AR (gemm_ar_protocol.hpp): a rank's blocks sum, tile by tile as
// every rank's GEMM finishes it, the ranks' (and slices') bf16 partial tiles in fp32 in order
// rank 0..P-1, slice 0..S-1; two-shot owners publish their sums and the others copy them; with
// the norm, each row of h = sum + residual is then RMS-normalised.
//
// Each thread loads a batch of 16-byte vectors -- several sources of one element, or with few
// sources (world 1's K slices) several elements' -- before adding them (each element's sources in
// order), so up to kBatch loads are in flight per thread. The row norm's sum of squares is a
// fixed tree (per-thread strided sums, warp shuffles, then warp 0 over the warps): the same bits
// every call.
#include <cuda_bf16.h>

#include <type_traits>

#include "ops/common/bf16x8.cuh"
#include "ops/common/cluster_launch.hpp"
#include "ops/gemm_ar/sm90_gemm_ar_kernel.hpp"
#include "tilelink/comm/block_work_queue.cuh"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/primitives/trace.cuh"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBatch = 8;  // sources' vectors in flight per thread

__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store16(__nv_bfloat16* p, const uint4& v) { *reinterpret_cast<uint4*>(p) = v; }

// Sum over the block of one float per thread, the same tree every call; every thread gets it.
__device__ float block_sum(float v, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kThreads / 32 ? scratch[lane] : 0.f;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) scratch[kThreads / 32] = s;
  }
  __syncthreads();
  const float total = scratch[kThreads / 32];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

__global__ void __launch_bounds__(kThreads) gemm_ar_reduce_kernel(GemmArPlan plan, SignalView sig, SymmetricView heap,
                                                                  GemmArReduceArgs a, TraceView trace) {
  wait_for_previous_grid();  // launched early behind the GEMM: its partials are complete from here
  __shared__ float scratch[kThreads / 32 + 1];
  __shared__ uint32_t unit;
  BlockWorkQueue queue(a.queue, &unit);
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  const uint32_t rank = static_cast<uint32_t>(sig.rank);
  const auto* partial = static_cast<const __nv_bfloat16*>(a.partial);
  const auto* recv = static_cast<const __nv_bfloat16*>(a.recv);
  auto* reduced = static_cast<__nv_bfloat16*>(a.reduced);
  auto* dest = static_cast<__nv_bfloat16*>(plan.norm ? a.residual_out : a.out);
  const auto* residual = static_cast<const __nv_bfloat16*>(a.residual);
  const uint32_t sources = plan.world * plan.splits;
  const bool two_shot = plan.method == ArMethod::kTwoShot;
  // Reduce-scatter: the rank's block of rows goes to the top of its out.
  const uint64_t out_offset = uint64_t(plan.owned(rank).row0) * plan.n;

  auto source = [&](uint32_t i) -> const __nv_bfloat16* {  // source i: rank i / splits, slice i % splits
    const uint32_t q = i / plan.splits;
    const uint64_t slice = uint64_t(i % plan.splits) * plan.elems();
    return q == rank          ? partial + slice
           : plan.copy_engine ? recv + uint64_t(q) * plan.splits * plan.elems() + slice
                              : heap.translate(partial + slice, static_cast<int>(q));
  };
  // kE vectors of a thread at once (elements e0 + j * kThreads), their sources kBatch / kE at a
  // time: kBatch loads in flight per thread however few the sources are. Each element still adds
  // its sources in order 0..sources-1, so the bits do not depend on kE.
  auto reduce_vectors = [&](auto e_count, RowRange rows, uint32_t col0, uint32_t vpr) {
    constexpr int kE = decltype(e_count)::value;
    constexpr int kPer = kBatch / kE;
    const uint32_t total = rows.rows * vpr;
    for (uint32_t e0 = threadIdx.x; e0 < total; e0 += kThreads * kE) {
      uint64_t at[kE];
#pragma unroll
      for (int j = 0; j < kE; ++j) {
        const uint32_t e = e0 + j * kThreads;
        at[j] = uint64_t(rows.row0 + e / vpr) * plan.n + col0 + (e % vpr) * 8;
      }
      float acc[kE][8] = {};
      for (uint32_t i0 = 0; i0 < sources; i0 += kPer) {
        const __nv_bfloat16* src[kPer];  // each source's base once for the kE elements
#pragma unroll
        for (int b = 0; b < kPer; ++b) src[b] = i0 + b < sources ? source(i0 + b) : nullptr;
        uint4 v[kE][kPer];
#pragma unroll
        for (int j = 0; j < kE; ++j) {
#pragma unroll
          for (int b = 0; b < kPer; ++b) {
            if (e0 + j * kThreads < total && i0 + b < sources) v[j][b] = load16(src[b] + at[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < kE; ++j) {
#pragma unroll
          for (int b = 0; b < kPer; ++b) {
            if (e0 + j * kThreads < total && i0 + b < sources) add_bf16x8(acc[j], v[j][b]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kE; ++j) {
        if (e0 + j * kThreads >= total) continue;
        if (plan.norm) add_bf16x8(acc[j], load16(residual + at[j]));
        const uint4 packed = pack_bf16x8(acc[j]);
        store16(dest + (at[j] - out_offset), packed);
        if (two_shot) store16(reduced + at[j], packed);
      }
    }
  };

  auto reduce_tile = [&](uint32_t t, RowRange rows, RowRange cols) {
    const uint64_t t0 = trace_start(trace);
    const uint32_t vpr = cols.rows / 8;  // n and bn are multiples of 8
    if (sources <= kBatch / 4) {
      reduce_vectors(std::integral_constant<int, 4>{}, rows, cols.row0, vpr);
    } else if (sources <= kBatch / 2) {
      reduce_vectors(std::integral_constant<int, 2>{}, rows, cols.row0, vpr);
    } else {
      reduce_vectors(std::integral_constant<int, 1>{}, rows, cols.row0, vpr);
    }
    if (trace.on()) {  // the whole block's part of the tile (on is uniform over the block)
      __syncthreads();
      if (threadIdx.x == 0) trace_span(trace, TraceKind::kReduce, t, TraceRole::kComm, t0, global_time_ns());
    }
  };
  auto fetch_tile = [&](uint32_t, uint32_t owner, RowRange rows, RowRange cols) {
    // On the copy-engine path the owner put its sums into this rank's `reduced`.
    const __nv_bfloat16* src = plan.copy_engine ? reduced
                                                : heap.translate(static_cast<const __nv_bfloat16*>(reduced),
                                                                 static_cast<int>(owner));
    const uint32_t vpr = cols.rows / 8;
    const uint32_t total = rows.rows * vpr;
    for (uint32_t e = threadIdx.x; e < total; e += kThreads) {
      const uint64_t at = uint64_t(rows.row0 + e / vpr) * plan.n + cols.row0 + (e % vpr) * 8;
      store16(dest + at, load16(src + at));
    }
  };
  auto norm_row = [&](uint32_t row) {
    const __nv_bfloat16* h = dest + uint64_t(row) * plan.n;
    const auto* w = static_cast<const __nv_bfloat16*>(a.norm_weight);
    auto* o = static_cast<__nv_bfloat16*>(a.out) + uint64_t(row) * plan.n;
    const uint32_t vectors = plan.n / 8;
    float ss = 0.f;
    for (uint32_t v = threadIdx.x; v < vectors; v += kThreads) {
      float x[8] = {};
      add_bf16x8(x, load16(h + v * 8));
#pragma unroll
      for (int i = 0; i < 8; ++i) ss = fmaf(x[i], x[i], ss);
    }
    const float inv = rsqrtf(block_sum(ss, scratch) / static_cast<float>(plan.n) + a.eps);
    for (uint32_t v = threadIdx.x; v < vectors; v += kThreads) {
      float x[8] = {}, g[8] = {};
      add_bf16x8(x, load16(h + v * 8));
      add_bf16x8(g, load16(w + v * 8));
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = x[i] * inv * g[i];
      store16(o + v * 8, pack_bf16x8(x));
    }
  };
  gemm_ar_reduce_block(ctx, plan, sig, queue, reduce_tile, fetch_tile, norm_row, a.pass);
}

}  // namespace

void launch_gemm_ar_reduce(const GemmArPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const GemmArReduceArgs& args, uint32_t blocks, cudaStream_t stream, LaunchOrder order,
                           const TraceView& trace) {
  launch_in_clusters(gemm_ar_reduce_kernel, blocks, kThreads, 1, stream, order, plan, sig, heap, args, trace);
}

void preload_gemm_ar_reduce() { preload_kernel(gemm_ar_reduce_kernel); }

}  // namespace tilelink::detail
