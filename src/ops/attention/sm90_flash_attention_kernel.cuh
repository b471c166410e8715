// The SP attention kernel: flash-attention forward on CuTe sm_90a (TMA + WGMMA, warp-specialized,
// persistent), waiting per K/V chunk on the all-gather's channels. Included only by the
// one-head-dim instantiations (sm90_flash_attention_hd{64,128}.cu).
//
// Files by role (FlashAttention-3's hopper/ split):
//   sm90_flash_attention_traits.cuh     tile sizes, MMA atoms, smem layouts, TMA, SharedStorage, Params
//   sm90_flash_attention_tile_walk.hpp  the items of a CTA, the passes, an item's key tiles
//                                       (__host__ __device__: tests/cpu runs it too)
//   sm90_flash_attention_mainloop.cuh   the producer's waits and loads; the consumers' GEMM steps
//   sm90_flash_attention_softmax.cuh    the mask and the online softmax
//   sm90_flash_attention_epilogue.cuh   O and LSE, and the state parked between passes
//   this file                           the __global__ body (warp roles, pipelines, the consumers'
//                                       key-tile loop) and the host launcher
//
// CTA: three warpgroups.
//  - Warpgroup 0, one thread (the producer): per work item (one q head x 128 local query rows) it
//    loads Q by TMA, then walks the item's key tiles (FlashTileCursor: chunks in the rank's
//    arrival order, own shard first; causal chunks and tiles after the item's last query
//    skipped). Before the first tile of a chunk it waits on the chunk's channel and fences the
//    async proxy; then it loads K and V of each tile into a 2-stage pipeline each.
//  - Warpgroups 1 and 2 (the consumers) own query rows 0-63 and 64-127 of the item. Per key tile:
//    S = Q K^T on WGMMA (both operands in shared memory), the mask where the tile needs one, the
//    online softmax in fp32 registers, P to bf16 in registers, O += P V on WGMMA (P from
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
#include <cutlass/pipeline/pipeline.hpp>

#include <cmath>
#include <string>

#include "ops/attention/sm90_flash_attention_epilogue.cuh"
#include "ops/attention/sm90_flash_attention_kernel.hpp"
#include "ops/attention/sm90_flash_attention_mainloop.cuh"
#include "ops/attention/sm90_flash_attention_softmax.cuh"
#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "ops/attention/sm90_flash_attention_traits.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sm90_flash_attention_kernel(const __grid_constant__ typename Traits::Params p) {
  using namespace cute;
  using Element = typename Traits::Element;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using Mainloop = Sm90FlashAttentionMainloop<Traits>;
  using Epilogue = Sm90FlashAttentionEpilogue<Traits>;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = cute::size<2>(typename Traits::TileShapeMNK{});

  extern __shared__ __align__(1024) char smem_raw[];
  auto& ss = *reinterpret_cast<typename Traits::SharedStorage*>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  const SpAttentionPlan& plan = p.plan;
  const FlashItemScheduler items(plan);

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
    PipelineState write_k = cutlass::make_producer_start_state<Pipeline>();
    PipelineState write_v = cutlass::make_producer_start_state<Pipeline>();
    // always_inline: the compiler optimizes the loop with this body in place, as a loop written
    // out (an ordinary lambda is optimized on its own first, and the code changes).
    items.for_each(blockIdx.x, gridDim.x, [&](uint32_t pass, uint32_t i, uint32_t n) __attribute__((always_inline)) {
      Mainloop::load(p, ss, pipe_k, pipe_v, write_k, write_v, pass, i, n);
    });
    return;
  }

  // ---- consumers ---------------------------------------------------------------------------------
  cutlass::arch::warpgroup_reg_alloc<240>();
  const int tidx = static_cast<int>(threadIdx.x) - 128;
  const int wg = tidx / 128;  // consumer warpgroup: query rows 64 wg .. 64 wg + 63
  flash_scheduler_init(wg);
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
  const Epilogue epilogue{p, lse_elems, quad_leader};
  // The items of FlashItemScheduler::for_each, and the key-tile loop, written out in this body:
  // behind a lambda or a function, as the producer's, read_k and read_v reach the compiler through
  // references and it numbers their registers in another order, which changes the SASS.
  PipelineState read_k, read_v;
  uint32_t n = 0;
  for (uint32_t pass = 0; pass < flash_passes(plan); ++pass)
  for (uint32_t i = blockIdx.x; i < items.num_items; i += gridDim.x, ++n) {
    const FlashPass fp = flash_pass(plan, pass);
    const SpAttentionItem it = plan.item(i);
    const RowRange rows = plan.q_rows(it.q_block);
    const FlashMask mask = FlashMask::of_item(plan, spr, p.rank, rows, row_of);

    FlashSoftmax softmax;
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
    if (fp.resume) epilogue.resume(tOrO, softmax, o_at, row_at);
    Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor rP = make_tensor<Element>(tSrS.layout());
    Tensor tOrP = make_tensor(rP.data(), flash_acc_as_a_layout(tSrS.layout()));

    // The mask, then the online softmax: S <- P = exp(S - m_new).
    auto softmax_tile = [&](const FlashKeyTile& kt) {
      mask.apply<kBlockN>(tSrS, tScS, kt, spr);
      softmax.step(tSrS, p.scale_log2);
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
      softmax_tile(kt);
      flash_convert_p(tSrS, rP);
      while (cursor.next(kt)) {
        pipe_k.consumer_wait(read_k);
        flash_scheduler_sync(wg);
        flash_gemm<true, -1>(mma_s, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
        softmax.rescale_o(tOrO);
        pipe_v.consumer_wait(read_v);
        flash_gemm<false, -1>(mma_o, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
        flash_scheduler_arrive(wg);
        warpgroup_wait<1>();
        pipe_k.consumer_release(read_k);
        ++read_k;
        softmax_tile(kt);  // on the CUDA cores while P V runs on the tensor cores
        warpgroup_wait<0>();
        pipe_v.consumer_release(read_v);
        ++read_v;
        flash_convert_p(tSrS, rP);
      }
      softmax.rescale_o(tOrO);
      pipe_v.consumer_wait(read_v);
      flash_gemm<false, 0>(mma_o, tOrP, tOrV(_, _, _, read_v.index()), tOrO);
      pipe_v.consumer_release(read_v);
      ++read_v;
    }
    cutlass::arch::ClusterBarrier::arrive(&ss.q_empty);

    const uint64_t t_store = tidx == 0 ? trace_start(p.trace) : 0;
    softmax.reduce_l();
    if (fp.park) {
      epilogue.park(tOrO, softmax, o_at, row_at);
    } else {
      epilogue.store(tOrO, softmax, o_at, row_at);
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
    const auto kv_stride = make_stride(pitch, _1{}, int64_t(kHeadDim), pitch * spr);
    auto k = make_tensor(make_gmem_ptr(static_cast<const Element*>(prob.kv)), p_.kv_shape, kv_stride);
    auto v = make_tensor(make_gmem_ptr(static_cast<const Element*>(prob.kv) + plan.v_offset(0)), p_.kv_shape,
                         kv_stride);
    p_.plan = plan;
    set_q(prob.q);
    p_.tma_k = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename Traits::SmemLayoutKV{}),
                             Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    p_.tma_v = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename Traits::SmemLayoutKV{}),
                             Shape<Int<Traits::kBlockN>, Int<kHeadDim>>{}, _1{});
    p_.o = static_cast<Element*>(prob.o);
    p_.lse = prob.lse;
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
  void set_operands(const void* q, void* o, float* lse) override {
    set_q(q);
    p_.o = static_cast<Element*>(o);
    p_.lse = lse;
  }
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
  // Q's TMA descriptor (seq_per_rank x q_heads x head_dim, packed; p_.q_shape and p_.plan set).
  void set_q(const void* q_ptr) {
    using namespace cute;
    const int64_t spr = static_cast<int64_t>(p_.plan.seq_per_rank());
    auto q = make_tensor(make_gmem_ptr(static_cast<const Element*>(q_ptr)), p_.q_shape,
                         make_stride(int64_t(p_.plan.q_heads) * kHeadDim, _1{}, int64_t(kHeadDim),
                                     int64_t(p_.plan.q_heads) * kHeadDim * spr));
    p_.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename Traits::SmemLayoutQ{},
                             Shape<Int<Traits::kBlockM>, Int<kHeadDim>>{}, _1{});
  }

  static constexpr int kSmemBytes = static_cast<int>(sizeof(typename Traits::SharedStorage));
  typename Traits::Params p_;
  int grid_ = 0;
};

}  // namespace tilelink::detail
