// The SP attention kernel: flash-attention forward on CuTe sm_90a (TMA + WGMMA, warp-specialized,
// persistent), waiting per K/V chunk on the all-gather's channels. Included only by the
// one-head-dim .cu files.
//
// CTA: three warpgroups.
//  - Warpgroup 0, one thread (the producer): per work item (one q head x 128 local query rows) it
//    loads Q by TMA, then walks the item's key tiles (FlashTileCursor: chunks in the rank's
//    arrival order, own shard first; causal chunks and tiles after the item's last query
//    skipped). Before the first tile of a chunk it waits on the chunk's channel
//    (all_gather_wait_rows: acquire) and fences the async proxy, so that the TMA loads after it
//    see the rows; then it loads K and V of each tile into a 2-stage pipeline each.
//  - Warpgroups 1 and 2 (the consumers) own query rows 0-63 and 64-127 of the item. Per key
//    tile: S = Q K^T on WGMMA (both operands in shared memory), the mask where the tile needs
//    one, the online softmax in fp32 registers, P to bf16 in registers, O += P V on WGMMA (P from
//    registers, V MN-major in shared memory). S of tile j+1 is issued together with P V of tile j
//    and the softmax of j+1 runs while P V of j is on the tensor cores (FA3's intra-warpgroup
//    overlap), and the two warpgroups take turns to issue (ping-pong), so that one's softmax runs
//    under the other's GEMMs.
//  - The consumers end an item with O / l in bf16 and LSE = m * scale + log(l), stored from
//    registers, and release Q for the next item.
//
// Key tiles are kFlashBlockN rows of one source shard (the chunk size is a whole number of tiles),
// read through a 4-D TMA view (row in shard, dim, kv head, shard): rows past a shard's end load
// as zeros instead of the next shard's unguarded rows, and are masked out.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "ops/attention/sm90_flash_attention_kernel.hpp"
#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "ops/attention/sm90_flash_attention_traits.cuh"
#include "tilelink/core/error.hpp"
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
// the other's GEMMs hold the tensor cores. Named barrier 8 + w belongs to consumer warpgroup w
// (0 or 1); each phase is one sync on the own barrier and one arrive on the other's.
constexpr uint32_t kFlashSchedulerBarrier = 8;
CUTE_DEVICE void flash_scheduler_sync(int wg) {
  cutlass::arch::NamedBarrier::sync(256, kFlashSchedulerBarrier + static_cast<uint32_t>(wg));
}
CUTE_DEVICE void flash_scheduler_arrive(int wg) {
  cutlass::arch::NamedBarrier::arrive(256, kFlashSchedulerBarrier + static_cast<uint32_t>(1 - wg));
}

// 2^x on the MUFU unit with subnormal results flushed to zero: exp2f keeps them, at three more
// instructions per call on the FMA pipe, which the softmax shares with the rescaling. A
// probability below 2^-126 of the row's largest adds nothing to O or l in fp32.
CUTE_DEVICE float flash_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

CUTE_DEVICE float flash_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
CUTE_DEVICE float flash_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm90_flash_attention_kernel(const __grid_constant__ typename Traits::Params p) {
  using namespace cute;
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename cutlass::PipelineState<Traits::kStages>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = cute::size<2>(typename Traits::TileShapeMNK{});

  extern __shared__ __align__(1024) char smem_raw[];
  auto& ss = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  const SpAttentionPlan& plan = p.plan;
  const uint32_t num_items = plan.num_items();

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    cutlass::arch::ClusterTransactionBarrier::init(&ss.q_full, 1);
    cutlass::arch::ClusterBarrier::init(&ss.q_empty, Traits::kConsumerThreads);
  }
  typename Pipeline::Params pp;
  pp.transaction_bytes = Traits::kTileBytes;
  pp.role = warpgroup == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = Traits::kConsumerThreads;
  Pipeline pipe_k(ss.pipe_k, pp, Shape<_1, _1, _1>{});
  Pipeline pipe_v(ss.pipe_v, pp, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0) return;
    Tensor mQ = p.tma_q.get_tma_tensor(p.q_shape);
    Tensor mK = p.tma_k.get_tma_tensor(p.kv_shape);
    Tensor mV = p.tma_v.get_tma_tensor(p.kv_shape);
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutKV{});
    PipelineState write_k = cutlass::make_producer_start_state<Pipeline>();
    PipelineState write_v = cutlass::make_producer_start_state<Pipeline>();
    uint32_t n = 0;
    for (uint32_t pass = 0; pass < flash_passes(plan); ++pass)
    for (uint32_t i = blockIdx.x; i < num_items; i += gridDim.x, ++n) {
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
    return;
  }

  // ---- consumers ---------------------------------------------------------------------------------
  cutlass::arch::warpgroup_reg_alloc<240>();
  const int tidx = static_cast<int>(threadIdx.x) - 128;
  const int wg = tidx / 128;  // consumer warpgroup: query rows 64 wg .. 64 wg + 63
  // Warpgroup 0 goes first: it grants its own first phase.
  if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, kFlashSchedulerBarrier);
  typename Traits::TiledMmaS mma_s;
  typename Traits::TiledMmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tidx);
  auto thr_o = mma_o.get_thread_slice(tidx);
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);
  Tensor tSrK = thr_s.partition_fragment_B(sK);
  Tensor tOrV = thr_o.partition_fragment_B(sVt);
  // (row, col) of every accumulator element this thread holds.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  // Accumulator element e of S lies in this thread's row (e / 2) % 2 (the GMMA C layout's values
  // are (2 cols, 2 rows, N/8 col blocks)).
  static_assert(decltype(size(tScS))::value == kBlockN / 2, "one 64-row warpgroup tile per thread");
  const int row_of[2] = {get<0>(tScS(0)), get<0>(tScS(2))};

  const uint32_t spr = plan.seq_per_rank();
  const uint64_t token_elems = uint64_t(plan.q_heads) * kHeadDim;
  const uint64_t lse_elems = uint64_t(plan.q_heads) * spr;
  const bool quad_leader = (threadIdx.x & 3) == 0;
  PipelineState read_k, read_v;
  uint32_t n = 0;
  for (uint32_t pass = 0; pass < flash_passes(plan); ++pass)
  for (uint32_t i = blockIdx.x; i < num_items; i += gridDim.x, ++n) {
    const FlashPass fp = flash_pass(plan, pass);
    const SpAttentionItem it = plan.item(i);
    const RowRange rows = plan.q_rows(it.q_block);
    uint32_t q_pos[2];
    for (int r = 0; r < 2; ++r) {
      const uint32_t local = rows.row0 + static_cast<uint32_t>(row_of[r]);
      q_pos[r] = local < spr ? plan.position(p.rank, local) : 0u;
    }
    const uint32_t q_first = plan.position(p.rank, rows.row0);

    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.f, 0.f};
    Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    clear(tOrO);
    // This thread's slot of element e of O (rows past the shard's end have none), and of row r's
    // LSE, m and l.
    auto o_at = [&](int e, uint64_t& at) {
      const uint32_t local = rows.row0 + static_cast<uint32_t>(get<0>(tOcO(e)));
      at = local * token_elems + uint64_t(it.head) * kHeadDim + static_cast<uint32_t>(get<1>(tOcO(e)));
      return local < spr;
    };
    auto row_at = [&](int r, uint64_t& at) {
      const uint32_t local = rows.row0 + static_cast<uint32_t>(row_of[r]);
      at = uint64_t(it.head) * spr + local;
      return local < spr;
    };
    if (fp.resume) {
      // The state this thread parked at the end of the previous pass. l is a sum over the quad's
      // four lanes: the quad's first lane takes the whole of it.
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tOrO); e += 2) {
        uint64_t at;
        if (!o_at(e, at)) continue;
        const float2 v = *reinterpret_cast<const float2*>(p.o_acc + at);
        tOrO(e) = v.x;
        tOrO(e + 1) = v.y;
      }
      for (int r = 0; r < 2; ++r) {
        uint64_t at;
        if (!row_at(r, at)) continue;
        m[r] = p.ml[at];
        l[r] = quad_leader ? p.ml[lse_elems + at] : 0.f;
      }
    }
    Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor rP = make_tensor<Element>(tSrS.layout());
    Tensor tOrP = make_tensor(rP.data(), flash_acc_as_a_layout(tSrS.layout()));
    float alpha[2] = {1.f, 1.f};

    // Mask S where keys are past the shard's end or (causal) after the query; then the online
    // softmax: new running max, alpha = exp(m_old - m_new), S <- P = exp(S - m_new), l.
    auto softmax = [&](const FlashKeyTile& kt) {
      const uint32_t row_in_shard0 = kt.g0 - kt.shard * spr;
      const bool causal_cut = plan.causal && plan.position(kt.shard, row_in_shard0 + kt.rows - 1) > q_first;
      if (kt.rows < static_cast<uint32_t>(kBlockN) || causal_cut) {
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < size(tSrS); ++e) {
          const uint32_t col = static_cast<uint32_t>(get<1>(tScS(e)));
          bool visible = col < kt.rows;
          if (causal_cut) visible = visible && plan.position(kt.shard, row_in_shard0 + col) <= q_pos[(e >> 1) & 1];
          if (!visible) tSrS(e) = -INFINITY;
        }
      }
      float mx[2] = {m[0], m[1]};
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tSrS); ++e) mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], tSrS(e));
      float bias[2];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        mx[r] = flash_quad_max(mx[r]);
        // A row with no visible key yet keeps m = -inf: exponents against 0 give P = 0.
        alpha[r] = mx[r] == -INFINITY ? 1.f : flash_exp2((m[r] - mx[r]) * p.scale_log2);
        bias[r] = mx[r] == -INFINITY ? 0.f : mx[r] * p.scale_log2;
        m[r] = mx[r];
        l[r] *= alpha[r];
      }
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tSrS); e += 2) {
        const int r = (e >> 1) & 1;
        tSrS(e) = flash_exp2(tSrS(e) * p.scale_log2 - bias[r]);
        tSrS(e + 1) = flash_exp2(tSrS(e + 1) * p.scale_log2 - bias[r]);
        l[r] += tSrS(e) + tSrS(e + 1);
      }
    };
    // P in bf16, the A operand of the next P V (only once the previous P V has read rP).
    auto to_p = [&]() {
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tSrS); e += 2) {
        *reinterpret_cast<__nv_bfloat162*>(&rP(e)) = __floats2bfloat162_rn(tSrS(e), tSrS(e + 1));
      }
    };
    auto rescale_o = [&]() {
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tOrO); ++e) tOrO(e) *= alpha[(e >> 1) & 1];
    };

    cutlass::arch::ClusterTransactionBarrier::wait(&ss.q_full, n & 1);
    FlashTileCursor cursor(plan, p.chunk_order, p.rank, p.only_shard, rows, fp);
    FlashKeyTile kt;
    bool any = cursor.next(kt);
    if (any) {
      pipe_k.consumer_wait(read_k);
      flash_scheduler_sync(wg);
      flash_gemm<true, -1>(mma_s, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
      flash_scheduler_arrive(wg);
      warpgroup_wait<0>();
      pipe_k.consumer_release(read_k);
      ++read_k;
      softmax(kt);
      to_p();
      while (cursor.next(kt)) {
        pipe_k.consumer_wait(read_k);
        flash_scheduler_sync(wg);
        flash_gemm<true, -1>(mma_s, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
        rescale_o();
        pipe_v.consumer_wait(read_v);
        flash_gemm<false, -1>(mma_o, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
        flash_scheduler_arrive(wg);
        warpgroup_wait<1>();
        pipe_k.consumer_release(read_k);
        ++read_k;
        softmax(kt);  // on the CUDA cores while P V runs on the tensor cores
        warpgroup_wait<0>();
        pipe_v.consumer_release(read_v);
        ++read_v;
        to_p();
      }
      rescale_o();
      pipe_v.consumer_wait(read_v);
      flash_gemm<false, 0>(mma_o, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
      pipe_v.consumer_release(read_v);
      ++read_v;
    }
    cutlass::arch::ClusterBarrier::arrive(&ss.q_empty);

    const uint64_t t_store = tidx == 0 ? trace_start(p.trace) : 0;
    for (int r = 0; r < 2; ++r) l[r] = flash_quad_sum(l[r]);
    if (fp.park) {
      // Park the unnormalized state for the next pass (the same thread takes it back: an item
      // stays with its CTA, and the consumer threads' rows with them).
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tOrO); e += 2) {
        uint64_t at;
        if (o_at(e, at)) *reinterpret_cast<float2*>(p.o_acc + at) = make_float2(tOrO(e), tOrO(e + 1));
      }
      for (int r = 0; r < 2; ++r) {
        uint64_t at;
        if (quad_leader && row_at(r, at)) {
          p.ml[at] = m[r];
          p.ml[lse_elems + at] = l[r];
        }
      }
    } else {
      // O / l and LSE. Rows past the shard's end are not stored.
      float inv[2], lse[2];
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
        lse[r] = l[r] > 0.f ? m[r] * p.scale + logf(l[r]) : -INFINITY;
      }
      auto* o = reinterpret_cast<__nv_bfloat16*>(p.o);
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < size(tOrO); e += 2) {
        uint64_t at;
        if (!o_at(e, at)) continue;
        const int r = (e >> 1) & 1;
        *reinterpret_cast<__nv_bfloat162*>(o + at) = __floats2bfloat162_rn(tOrO(e) * inv[r], tOrO(e + 1) * inv[r]);
      }
      for (int r = 0; r < 2; ++r) {
        uint64_t at;
        if (quad_leader && row_at(r, at)) p.lse[at] = lse[r];
      }
    }
    if (tidx == 0 && !fp.park) trace_span(p.trace, TraceKind::kEpilogue, i, TraceRole::kConsumer, t_store, global_time_ns());
  }
}

template <int kHeadDim>
class Sm90FlashAttentionKernelImpl final : public Sm90FlashAttentionKernel {
  using Traits = Sm90FlashAttentionTraits<kHeadDim>;
  using Element = typename Traits::Element;

 public:
  static std::string can_implement(const Sm90FlashAttentionProblem& p) {
    if (p.plan.head_dim != kHeadDim) {
      return "head_dim = " + std::to_string(p.plan.head_dim) + ": this kernel is for " + std::to_string(kHeadDim);
    }
    if (p.plan.local_first && (p.o_acc == nullptr || p.ml == nullptr)) {
      return "local_first = 1 without o_acc and ml: expected scratch for the state parked between the passes";
    }
    if (p.plan.local_first && p.only_shard >= 0) {
      return "local_first = 1 with only_shard = " + std::to_string(p.only_shard) + ": expected one or the other";
    }
    if (p.plan.bq != kFlashBlockM) {
      return "bq = " + std::to_string(p.plan.bq) + ": expected " + std::to_string(kFlashBlockM);
    }
    if (p.plan.ag.map.comm_rows % kFlashBlockN != 0 && p.plan.ag.map.comm_rows < p.plan.seq_per_rank()) {
      return "comm_rows = " + std::to_string(p.plan.ag.map.comm_rows) + ": expected a multiple of " +
             std::to_string(kFlashBlockN) + " or at least seq_per_rank (a chunk is whole key tiles)";
    }
    if (p.plan.ag.pitch % 16 != 0) return "kv pitch = " + std::to_string(p.plan.ag.pitch) + ": expected a multiple of 16";
    if (p.chunk_order == nullptr) return "chunk_order = null: expected the rank's chunk order table";
    if (p.sm_count < 1) return "sm_count = " + std::to_string(p.sm_count) + ": expected at least 1";
    return "";
  }

  explicit Sm90FlashAttentionKernelImpl(const Sm90FlashAttentionProblem& prob) {
    using namespace cute;
    const std::string why = can_implement(prob);
    if (!why.empty()) throw InvalidArgument("sp_attention kernel: " + why);
    const SpAttentionPlan& plan = prob.plan;
    const int32_t spr = static_cast<int32_t>(plan.seq_per_rank());
    const int64_t pitch = static_cast<int64_t>(plan.ag.pitch / sizeof(Element));
    p_.q_shape = make_shape(spr, int32_t(kHeadDim), int32_t(plan.q_heads), int32_t(1));
    p_.kv_shape = make_shape(spr, int32_t(kHeadDim), int32_t(plan.kv_heads), int32_t(plan.world()));
    auto q = make_tensor(make_gmem_ptr(static_cast<const Element*>(prob.q)), p_.q_shape,
                         make_stride(int64_t(plan.q_heads) * kHeadDim, _1{}, int64_t(kHeadDim),
                                     int64_t(plan.q_heads) * kHeadDim * spr));
    const auto kv_stride = make_stride(pitch, _1{}, int64_t(kHeadDim), pitch * spr);
    auto k = make_tensor(make_gmem_ptr(static_cast<const Element*>(prob.kv)), p_.kv_shape, kv_stride);
    auto v = make_tensor(make_gmem_ptr(static_cast<const Element*>(prob.kv) + plan.v_offset(0)), p_.kv_shape,
                         kv_stride);
    p_.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename Traits::SmemLayoutQ{},
                             Shape<Int<Traits::kBlockM>, Int<kHeadDim>>{}, _1{});
    p_.tma_k = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename Traits::SmemLayoutKV{}),
                             Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    p_.tma_v = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename Traits::SmemLayoutKV{}),
                             Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    p_.o = static_cast<Element*>(prob.o);
    p_.lse = prob.lse;
    p_.plan = plan;
    p_.chunk_order = prob.chunk_order;
    p_.o_acc = prob.o_acc;
    p_.ml = prob.ml;
    p_.sig = prob.sig;
    p_.rank = prob.rank;
    p_.wait = prob.wait ? 1u : 0u;
    p_.only_shard = prob.only_shard;
    p_.scale = 1.f / std::sqrt(static_cast<float>(kHeadDim));
    p_.scale_log2 = p_.scale * 1.4426950408889634f;

    TL_CUDA_CHECK(cudaSetDevice(prob.device));
    TL_CUDA_CHECK(cudaFuncSetAttribute(sm90_flash_attention_kernel<Traits>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    int per_sm = 0;
    TL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sm90_flash_attention_kernel<Traits>,
                                                                Traits::kThreads, kSmemBytes));
    if (per_sm < 1) throw InvalidArgument("sp_attention kernel: does not fit on an SM of device " +
                                          std::to_string(prob.device));
    grid_ = static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(prob.sm_count), plan.num_items()));
  }

  void run(uint64_t epoch, cudaStream_t stream) override {
    p_.sig.epoch = epoch;
    sm90_flash_attention_kernel<Traits><<<grid_, Traits::kThreads, kSmemBytes, stream>>>(p_);
    TL_CUDA_CHECK(cudaGetLastError());
  }
  void set_trace(const TraceView& trace) override { p_.trace = trace; }
  void set_only_shard(int32_t shard) override {
    if (p_.plan.local_first) {
      throw InvalidArgument("sp_attention kernel: set_only_shard(" + std::to_string(shard) +
                            ") on a local_first kernel: expected a one-pass kernel for a ring step");
    }
    p_.only_shard = shard;
    p_.wait = 0;
  }
  int ctas() const override { return grid_; }

  static std::unique_ptr<Sm90FlashAttentionKernel> make(const Sm90FlashAttentionProblem& p) {
    return std::make_unique<Sm90FlashAttentionKernelImpl>(p);
  }
  static Sm90FlashAttentionConfigInfo info() { return {kHeadDim, &can_implement, &make}; }

 private:
  static constexpr int kSmemBytes = static_cast<int>(sizeof(typename Traits::SharedStorage));
  typename Traits::Params p_;
  int grid_ = 0;
};

}  // namespace tilelink::detail
