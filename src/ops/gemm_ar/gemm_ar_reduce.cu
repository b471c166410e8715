// The reduction half of GEMM+AR (gemm_ar_protocol.hpp): a rank's blocks sum, tile by tile as
// every rank's GEMM finishes it, the ranks' (and slices') bf16 partial tiles in fp32 in order
// rank 0..P-1, slice 0..S-1; two-shot owners publish their sums and the others copy them; with
// the norm, each row of h = sum + residual is then RMS-normalised.
//
// Each thread loads a batch of sources' 16-byte vectors before adding them (in order), so up to
// kBatch remote loads are in flight per thread. The row norm's sum of squares is a fixed tree
// (per-thread strided sums, warp shuffles, then warp 0 over the warps): the same bits every call.
#include <cuda_bf16.h>

#include "ops/common/bf16x8.cuh"
#include "ops/common/cluster_launch.hpp"
#include "ops/gemm_ar/sm90_gemm_ar_kernel.hpp"
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
  DeviceBlockCtx<false> ctx{sig.rank, sig.world, nullptr, trace};
  const uint32_t rank = static_cast<uint32_t>(sig.rank);
  const auto* partial = static_cast<const __nv_bfloat16*>(a.partial);
  const auto* recv = static_cast<const __nv_bfloat16*>(a.recv);
  auto* reduced = static_cast<__nv_bfloat16*>(a.reduced);
  auto* dest = static_cast<__nv_bfloat16*>(plan.norm ? a.residual_out : a.out);
  const auto* residual = static_cast<const __nv_bfloat16*>(a.residual);
  const uint32_t sources = plan.world * plan.splits;
  const bool two_shot = plan.method == ArMethod::kTwoShot;

  auto reduce_tile = [&](uint32_t t, RowRange rows, RowRange cols) {
    const uint64_t t0 = trace_start(trace);
    const uint32_t vpr = cols.rows / 8;  // n and bn are multiples of 8
    const uint32_t total = rows.rows * vpr;
    for (uint32_t e = threadIdx.x; e < total; e += kThreads) {
      const uint64_t at = uint64_t(rows.row0 + e / vpr) * plan.n + cols.row0 + (e % vpr) * 8;
      float acc[8] = {};
      for (uint32_t i0 = 0; i0 < sources; i0 += kBatch) {
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const uint32_t i = i0 + j;
          if (i < sources) {
            const uint32_t q = i / plan.splits;
            const uint64_t slice = uint64_t(i % plan.splits) * plan.elems();
            const __nv_bfloat16* src = q == rank          ? partial + slice
                                       : plan.copy_engine ? recv + uint64_t(q) * plan.splits * plan.elems() + slice
                                                          : heap.translate(partial + slice, static_cast<int>(q));
            v[j] = load16(src + at);
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          if (i0 + j < sources) add_bf16x8(acc, v[j]);
        }
      }
      if (plan.norm) add_bf16x8(acc, load16(residual + at));
      const uint4 packed = pack_bf16x8(acc);
      store16(dest + at, packed);
      if (two_shot) store16(reduced + at, packed);
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
  gemm_ar_reduce_block(ctx, plan, sig, reduce_tile, fetch_tile, norm_row, a.pass);
}

}  // namespace

void launch_gemm_ar_reduce(const GemmArPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const GemmArReduceArgs& args, uint32_t blocks, cudaStream_t stream, LaunchOrder order,
                           const TraceView& trace) {
  launch_in_clusters(gemm_ar_reduce_kernel, blocks, kThreads, 1, stream, order, plan, sig, heap, args, trace);
}

void preload_gemm_ar_reduce() { preload_kernel(gemm_ar_reduce_kernel); }

}  // namespace tilelink::detail
