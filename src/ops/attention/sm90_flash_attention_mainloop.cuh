// The SP attention kernel's mainloop pieces.
//
//  - load (the producer thread, one work item): Q by TMA once the consumers released the
//    previous item's Q, then the item's key tiles in the cursor's order (FlashTileCursor). Before
//    the first tile of a chunk it waits on the chunk's channel (all_gather_wait_rows: acquire)
//    and fences the async proxy, so that the TMA loads after it see the rows; then it loads K and
//    V of each tile into a 2-stage pipeline each.
//  - The consumers' steps, which the kernel's key-tile loop strings together
//    (sm90_flash_attention_kernel.cuh): one warpgroup GEMM batch (flash_gemm), the ping-pong
//    between the two consumer warpgroups (flash_scheduler_*), and P in bf16 as the register A
//    operand of O += P V (flash_acc_as_a_layout, flash_convert_p).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "ops/attention/sm90_flash_attention_traits.cuh"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// One thread's view of consumer_tile_wait for all_gather_wait_rows (no block barrier: the other
// warps of a warp-specialized CTA never reach one).
struct FlashThreadWaitCtx {
  TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count, uint32_t arrivals,
                                    int32_t tile) const {
    tilelink::consumer_tile_wait(sig, channel, count, arrivals, tile);
  }
};

// The accumulator layout of S as the register A operand of O += P V (bf16): per thread, the
// accumulator's (2 cols, 2 rows, N/8 col blocks) become (2, 2, 2) values of N/16 k-blocks.
template <class Layout>
CUTE_DEVICE auto flash_acc_as_a_layout(Layout acc) {
  using namespace cute;
  auto l = logical_divide(get<0, 2>(acc), Tile<_2>{});
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(l)), get<1>(acc),
                     coalesce(make_layout(get<0, 1>(l), get<2>(acc))));
}

// P in bf16, the A operand of the next P V (only once the previous P V has read rP).
template <class FrgS, class FrgP>
CUTE_DEVICE void flash_convert_p(FrgS const& tSrS, FrgP& rP) {
  using namespace cute;
  CUTLASS_PRAGMA_UNROLL
  for (int e = 0; e < size(tSrS); e += 2) {
    *reinterpret_cast<__nv_bfloat162*>(&rP(e)) = __floats2bfloat162_rn(tSrS(e), tSrS(e + 1));
  }
}

// Issues one warpgroup MMA batch over the k-blocks of A and B (zero_init: C = A B, else C += A B)
// and, if kWait >= 0, waits until at most kWait batches are in flight.
template <bool kZeroInit, int kWait, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void flash_gemm(TiledMma& mma, TA const& a, TB const& b, TC& c) {
  using namespace cute;
  constexpr bool kRegisterA = !is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegisterA) warpgroup_fence_operand(const_cast<TA&>(a));
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTLASS_PRAGMA_UNROLL
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kRegisterA) warpgroup_fence_operand(const_cast<TA&>(a));
}

// Ping-pong between the two consumer warpgroups (FA3's warp scheduler barrier): a warpgroup issues
// its GEMMs only after the other has issued its own, so that one warpgroup's softmax runs while
// the other's GEMMs hold the tensor cores. User barrier w (hardware barrier 8 + w: NamedBarrier's
// uint32_t form counts from CUTLASS's 8 reserved ones) belongs to consumer warpgroup w (0 or 1);
// each phase is one sync on the own barrier and one arrive on the other's. (Until 2026-12-04 this
// said 8, i.e. hardware 16 and 17, which ptxas wrapped to 0 and 1: __syncthreads' barrier and
// CUTLASS's epilogue barrier; found by review, not yet re-measured on a GPU.)
constexpr uint32_t kFlashSchedulerBarrier = 0;
CUTE_DEVICE void flash_scheduler_sync(int wg) {
  cutlass::arch::NamedBarrier::sync(256, kFlashSchedulerBarrier + static_cast<uint32_t>(wg));
}
CUTE_DEVICE void flash_scheduler_arrive(int wg) {
  cutlass::arch::NamedBarrier::arrive(256, kFlashSchedulerBarrier + static_cast<uint32_t>(1 - wg));
}
// Warpgroup 0 goes first: it grants its own first phase (once per CTA, before its first item).
CUTE_DEVICE void flash_scheduler_init(int wg) {
  if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, kFlashSchedulerBarrier);
}

template <class Traits>
struct Sm90FlashAttentionMainloop {
  using Element = typename Traits::Element;
  using Params = typename Traits::Params;
  using SharedStorage = typename Traits::SharedStorage;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = cute::size<2>(typename Traits::TileShapeMNK{});

  // The producer thread's loads of item i (the CTA's n-th), pass `pass`.
  static CUTE_DEVICE void load(const Params& p, SharedStorage& ss, Pipeline& pipe_k, Pipeline& pipe_v,
                               PipelineState& write_k, PipelineState& write_v, uint32_t pass, uint32_t i,
                               uint32_t n) {
    using namespace cute;
    const SpAttentionPlan& plan = p.plan;
    Tensor mQ = p.tma_q.get_tma_tensor(p.q_shape);
    Tensor mK = p.tma_k.get_tma_tensor(p.kv_shape);
    Tensor mV = p.tma_v.get_tma_tensor(p.kv_shape);
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutKV{});

    const SpAttentionItem it = plan.item(i);
    const uint32_t kv_h = plan.kv_head(it.head);
    if (n > 0) cutlass::arch::ClusterBarrier::wait(&ss.q_empty, (n - 1) & 1);
    Tensor gQ = local_tile(mQ(_, _, it.head, 0), Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(it.q_block, 0));
    auto [tQg, tQs] = tma_partition(p.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.q_full, Traits::kQBytes);
    copy(p.tma_q.with(ss.q_full, 0), tQg, tQs);

    FlashTileCursor cursor(plan, p.chunk_order, p.rank, p.only_shard, plan.q_rows(it.q_block),
                           flash_pass(plan, pass));
    FlashKeyTile kt;
    uint32_t open_chunk = ~0u;  // the chunk whose loads are being recorded
    uint64_t t_load = 0;
    while (cursor.next(kt)) {
      if (kt.first_of_chunk) {
        if (open_chunk != ~0u) trace_span(p.trace, TraceKind::kLoad, open_chunk, TraceRole::kProducer, t_load, global_time_ns());
        const uint64_t t_wait = trace_start(p.trace);
        if (p.wait) {
          const RowRange keys = plan.ag.map.rows_of_channel(kt.chunk);
          FlashThreadWaitCtx ctx;
          all_gather_wait_rows(ctx, plan.ag, p.sig, keys.row0, keys.rows, static_cast<int32_t>(i));
          asm volatile("fence.proxy.async.global;" ::: "memory");
        }
        t_load = trace_start(p.trace);
        if (p.wait) trace_span(p.trace, TraceKind::kWait, kt.chunk, TraceRole::kProducer, t_wait, t_load);
        open_chunk = kt.chunk;
      }
      Tensor gK = local_tile(mK(_, _, kv_h, kt.shard), Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(kt.tile, 0));
      Tensor gV = local_tile(mV(_, _, kv_h, kt.shard), Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(kt.tile, 0));
      auto [tKg, tKs] = tma_partition(p.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg, tVs] = tma_partition(p.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
      pipe_k.producer_acquire(write_k);
      copy(p.tma_k.with(*pipe_k.producer_get_barrier(write_k), 0), tKg, tKs(_, write_k.index()));
      ++write_k;
      pipe_v.producer_acquire(write_v);
      copy(p.tma_v.with(*pipe_v.producer_get_barrier(write_v), 0), tVg, tVs(_, write_v.index()));
      ++write_v;
    }
    // The last chunk's loads end when its last tile is issued: the MMAs pace the producer, so a
    // chunk's load span is about its compute.
    if (open_chunk != ~0u) trace_span(p.trace, TraceKind::kLoad, open_chunk, TraceRole::kProducer, t_load, global_time_ns());
  }
};

}  // namespace tilelink::detail
