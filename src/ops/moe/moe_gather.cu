// The gather stage of MoE part 1: a warp per row, each lane keeping kVectors 16-byte loads in
// flight (a row of a 4096-wide bf16 token is 512 vectors). A copy CTA is latency-bound: its
// throughput is the bytes it keeps in flight over the memory latency, so it runs 1024 threads x
// 8 vectors (128 KiB in flight; 512 x 4 measured ~25 GB/s per CTA on the H200).
#include "ops/moe/moe_gather.hpp"

#include "tilelink/comm/block_work_queue.cuh"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {
namespace {

constexpr int kThreads = 1024;
constexpr int kVectors = 8;

TL_DEVICE void copy_tile(const AllGatherPlan& ag, const MoeMappingView& m, uint32_t t, const char* x, char* sorted,
                         uint32_t row_bytes) {
  const uint32_t vectors = row_bytes / 16, lane = threadIdx.x % 32;
  for (uint32_t r = threadIdx.x / 32; r < m.bm; r += kThreads / 32) {
    const uint32_t row = t * m.bm + r;
    const uint32_t pair = m.row_pair[row];
    uint4* dst = reinterpret_cast<uint4*>(sorted + uint64_t(row) * row_bytes);
    if (pair == kPadRow) {
      for (uint32_t v = lane; v < vectors; v += 32) dst[v] = uint4{0, 0, 0, 0};
      continue;
    }
    const uint4* src = reinterpret_cast<const uint4*>(x + uint64_t(pair / m.topk) * ag.pitch);
    for (uint32_t v0 = lane; v0 < vectors; v0 += 32 * kVectors) {
      uint4 v[kVectors];
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (v0 + 32 * j < vectors) v[j] = src[v0 + 32 * j];
      }
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (v0 + 32 * j < vectors) dst[v0 + 32 * j] = v[j];
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    moe_gather_kernel(AllGatherPlan ag, SignalView ag_sig, MoeMappingView m, const uint32_t* num_tiles,
                      const uint32_t* order, uint32_t* queue_counter, SignalView gsig, uint32_t channel0, const char* x,
                      char* sorted, uint32_t row_bytes, TraceView trace) {
  DeviceBlockCtx<false> ctx{gsig.rank, gsig.world, nullptr, trace};
  m.num_tiles = *num_tiles;
  __shared__ uint32_t slot;
  BlockWorkQueue queue(queue_counter, &slot);
  moe_gather_block(ctx, ag, ag_sig, m, order, gsig, channel0, queue,
                   [&](uint32_t t) { copy_tile(ag, m, t, x, sorted, row_bytes); });
}

}  // namespace

void preload_moe_gather() { preload_kernel(moe_gather_kernel); }

void launch_moe_gather(const AllGatherPlan& ag, const SignalView& ag_sig, const MoeMappingView& m,
                       const uint32_t* num_tiles, const uint32_t* order, uint32_t* queue, const SignalView& gsig,
                       uint32_t channel0, const void* x, void* sorted, uint32_t row_bytes, uint32_t blocks,
                       cudaStream_t stream, const TraceView& trace) {
  moe_gather_kernel<<<blocks, kThreads, 0, stream>>>(ag, ag_sig, m, num_tiles, order, queue, gsig, channel0,
                                                     static_cast<const char*>(x), static_cast<char*>(sorted),
                                                     row_bytes, trace);
  TL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tilelink::detail
