// CUTLASS 4.2 sm90 assembly of the fused GEMM+RS kernel (docs/design/gemm_rs_kernel.md has the
// reading of CUTLASS's epilogue this relies on). Included only by one-configuration .cu files.
//
// The kernel's M runs over owner blocks, each in its own tile rows: P * m_tiles tile rows
// (GemmRsFusedPlan), tile row m being row m % m_tiles of owner m / m_tiles, whose rows start at
// owner * R of M (R = plan.rows_per_rank, any count: a block's last tile row may be partial).
//  - Sm90GemmRsMainloop<Base>: Base = the builder's TMA warp-specialized mainloop. A's TMA
//    descriptor spans A's own M rows; the producer sees A as (tile row within the block, owner),
//    owner l's rows from l * R (rows past M load as zeros, a partial tile's rows past its block
//    are the next owner's and are never stored); B ignores the owner.
//  - Sm90NotifyEpilogue<Base>: Base = the builder's TMA warp-specialized epilogue, hooked
//    (sm90_hooked_epilogue.cuh). It sees the problem as a batch over owners, (R, N, K, P), with
//    D's batch stride the distance between owner blocks' destinations, so one TMA descriptor
//    stores either into this rank's buffer or, through an affine heap, straight into each
//    owner's receive slot, and a tile's rows past its block are clipped. After Base::store of a
//    tile, once its TMA stores have been written (store_landed_then), it notifies the tile's
//    signal group (add mode, one notify per tile): on this rank, or on the owner for the
//    epilogue push; a pushed tile's notify may wait for the CTA's next tile instead
//    (plan.defer_push_notify: announced before that tile's store, or after the last).
//  - Sm90RowOrderedTileScheduler: owner blocks of other ranks first, own block last.
// The FP8 configurations (Sm90GemmRsFp8Types) are the same kernel on Sm90Fp8TnGemm: A's packed
// rows carry their row or block scales, so an owner block's scales start R rows of A after the
// previous block's, as its rows do: the epilogue's row scales and the main loop's block scales
// take the owner as their batch, R * pitch floats apart; B's block scales ignore it.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <string>
#include <type_traits>

#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_fp8_tn_gemm.cuh"
#include "ops/common/sm90_hooked_epilogue.cuh"
#include "ops/common/sm90_hooked_mainloop.cuh"
#include "ops/common/sm90_persistent_launcher.cuh"
#include "ops/gemm_rs/gemm_rs_owner_view.hpp"
#include "ops/gemm_rs/gemm_rs_sum.cuh"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// The producer's hook (sm90_hooked_mainloop.cuh): no waits (A is in place), the owner block's
// coordinate for the loads.
struct GemmRsOwnerLoads {
  GemmRsFusedPlan plan;
  uint32_t n_tiles = 0;
  bool enabled = false;
  TraceView trace;

  template <uint32_t kTileM>
  CUTLASS_DEVICE void wait(uint32_t, uint32_t) const {}
  template <class BlockCoord>
  CUTLASS_DEVICE auto load_coord(BlockCoord const& blk_coord) const {
    return owner_block_coord(plan, blk_coord);
  }
};

template <class Base>
struct Sm90GemmRsMainloop : Sm90HookedMainloop<Base, GemmRsOwnerLoads> {
  using Hooked = Sm90HookedMainloop<Base, GemmRsOwnerLoads>;
  using typename Hooked::Arguments;
  using typename Hooked::Params;

  // Base's Params with A's descriptor over A's own M rows (the kernel's M counts padded blocks).
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    return Params{Base::to_underlying_arguments(a_rows_problem(args.hook.plan, problem_shape), args, workspace),
                  args.hook};
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    const GemmRsFusedPlan& plan = params.hook.plan;
    const auto inputs = Base::load_init(a_rows_problem(plan, problem_shape_MNKL), params);
    // A per owner block (owner l's rows from l * R), B whatever the owner; block-scaled FP8's
    // scale tensors as they are (their layouts already take the owner as the batch).
    const auto gA_blocks = owner_block_a(cute::get<0>(inputs), plan);
    const auto gB_any_l = any_owner_b(cute::get<1>(inputs));
    if constexpr (cute::tuple_size<std::decay_t<decltype(inputs)>>::value == 4) {
      return cute::make_tuple(gA_blocks, gB_any_l, cute::get<2>(inputs), cute::get<3>(inputs));
    } else {
      return cute::make_tuple(gA_blocks, gB_any_l);
    }
  }
};

// The waits of gemm_rs_wait_parts, run by one consumer thread of the epilogue (the others meet
// it at a named barrier after).
struct GemmRsThreadWaits {
  int rank_;
  TL_DEVICE int rank() const { return rank_; }
  TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count, uint32_t arrivals,
                                    int32_t tile) const {
    tilelink::consumer_tile_wait(sig, channel, count, arrivals, tile);
  }
  TL_DEVICE void peer_tile_wait(const SignalView& sig, uint32_t channel, int peer, uint32_t arrivals,
                                int32_t tile) const {
    tilelink::peer_tile_wait(sig, channel, peer, arrivals, tile);
  }
};

// What a finished tile notifies; the epilogue's hook (sm90_hooked_epilogue.cuh). With a TraceView
// on, consumer thread 0 records each tile's epilogue (store and notify) and, inside it, the
// notify, both named by the GEMM tile (m_tile * n_tiles + n_tile over the whole M).
// With plan.reducer == kEpilogue, after an own tile (owner == this rank) the consumers sum it over
// the senders (gemm_rs_epilogue_reduce's steps: thread 0 waits for the parts, all 256 threads sum
// into `out`, thread 0 counts the tile on reduced_channel), traced as the tile's kReduce.
struct GemmRsNotify {
  GemmRsFusedPlan plan;
  SignalView sig;
  bool enabled = true;  // false: the GEMM alone (benchmarks; no notifies and no sums)
  TraceView trace;
  // kEpilogue: where the sums read and write (gemm_rs_sender_rows; out: the rank's output block).
  SymmetricView heap;
  const __nv_bfloat16* buf = nullptr;
  const __nv_bfloat16* recv = nullptr;
  __nv_bfloat16* out = nullptr;

  TL_HOST_DEVICE uint32_t m_tiles() const { return plan.world * plan.m_tiles(); }  // tile rows of M

  // The epilogue's view: (P * m_tiles * bm, N, K, 1) -> (R, N, K, P), and a kernel tile row ->
  // (row within the owner block, owner). Rows past a block's R land nowhere (TMA clips them).
  template <class ProblemShape>
  TL_HOST_DEVICE auto problem(ProblemShape const& problem) const {
    return cute::make_shape(static_cast<int>(plan.rows_per_rank), static_cast<int>(cute::get<1>(problem)),
                            static_cast<int>(cute::get<2>(problem)), static_cast<int>(plan.world));
  }
  // The destination's owner mode is rotated by d_origin (Sm90GemmRsProblem; 0: as is).
  uint32_t d_origin = 0;
  uint32_t cluster_m = 1;  // the kernel's cluster along M (plan.may_defer_notify)
  template <class TileCoord>
  TL_HOST_DEVICE auto coord(TileCoord const& coord) const {
    return destination_block_coord(plan, coord, d_origin);
  }
  CUTLASS_DEVICE uint64_t before() const { return trace_start(trace); }

  // One notify per finished tile (add mode), once its stores have landed; padding tiles (cluster
  // rounding, m_tile >= m_tiles()) notify nothing and record nothing. With plan.defer_push_notify a
  // tile pushed into a peer is left pending on the storing warp instead: prepare() of the CTA's
  // next tile, or tail(), announces it (flush_pending), so the CTA does not wait for the link.
  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) {
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(coord));
    if (m_tile >= m_tiles()) return;
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(coord));
    if (n_tile >= plan.n_tiles()) return;  // a cluster's padding tile along N (none with clusters along M)
    const uint32_t traced_tile = m_tile * plan.n_tiles() + n_tile;
    const uint32_t owner = plan.tile_owner(m_tile);
    if (enabled && plan.may_defer_notify(static_cast<uint32_t>(sig.rank), m_tile, cluster_m)) {
      if (thread_idx < cutlass::NumThreadsPerWarp) pending_m_tile = m_tile, pending_n_tile = n_tile;
      if (trace.on() && thread_idx == 0) {
        trace_span(trace, TraceKind::kEpilogue, traced_tile, TraceRole::kConsumer, start, global_time_ns());
      }
      return;  // a peer's tile: no sum here
    }
    notify_landed_tile(enabled, thread_idx, trace, traced_tile, start, [&] { notify_part(m_tile, n_tile); });
    if (!enabled || plan.reducer != GemmRsReducer::kEpilogue || owner != static_cast<uint32_t>(sig.rank)) return;
    // The own part has landed (notify_landed_tile's storing warp waited for it and fenced);
    // thread 0 waits for the senders' parts, then every consumer reads what the waits guard.
    const uint64_t t_sum = trace_start(trace);
    const uint32_t t = (m_tile - owner * plan.m_tiles()) * plan.n_tiles() + n_tile;
    if (thread_idx == 0) {
      GemmRsThreadWaits waits{sig.rank};
      gemm_rs_wait_parts(waits, plan, sig, t);
    }
    consumers_sync();
    gemm_rs_sum_tile(plan, owner, t, [&](uint32_t, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols) {
      // 4 x 4 vectors in flight per thread: the consumers' registers are free after the store (the
      // reduction kernel's 512 threads hold 4).
      gemm_rs_sum_rows<4, 4>(plan, heap, owner, buf, recv, out, row0, rows, col0, cols,
                             static_cast<uint32_t>(thread_idx), kConsumerThreads);
    });
    consumers_sync();  // every thread's sums, then thread 0's release covers them
    if (thread_idx == 0) {
      tilelink::producer_tile_notify(sig, plan.reduced_channel(), NotifyMode::kAdd);
      trace_span(trace, TraceKind::kReduce, owner * plan.tiles_per_block() + t, TraceRole::kConsumer, t_sum,
                 global_time_ns());
    }
  }

  // Before a tile's store (the hook's prepare) and after the CTA's last tile (tail): the pending
  // pushed tile, if any, announced.
  CUTLASS_DEVICE void prepare(int) { flush_pending(); }
  CUTLASS_DEVICE void tail() { flush_pending(); }

  static constexpr uint32_t kNoTile = 0xffffffffu;
  // The pushed tile whose notify is deferred: set on the storing warp's lanes only (the ones
  // whose bulk groups hold its stores), kNoTile elsewhere and once announced.
  uint32_t pending_m_tile = kNoTile;
  uint32_t pending_n_tile = 0;

  // The tile's part announced: on its owner's channel (push) or this rank's (pull, ce).
  CUTLASS_DEVICE void notify_part(uint32_t m_tile, uint32_t n_tile) const {
    const uint32_t channel = plan.tile_channel(m_tile, n_tile);
    if (plan.scatter == GemmRsScatter::kEpiloguePush) {
      tilelink::peer_tile_notify(sig, channel, static_cast<int>(plan.tile_owner(m_tile)), NotifyMode::kAdd);
    } else {
      tilelink::producer_tile_notify(sig, channel, NotifyMode::kAdd);
    }
  }

  // The storing warp (every lane holds the same pending tile): its stores landed and fenced
  // (wait_stores_landed; from prepare(), before the next tile's store, only the pending tile's
  // groups are outstanding), then lane 0's notify, traced as the pending tile's kNotify.
  CUTLASS_DEVICE void flush_pending() {
    if (pending_m_tile == kNoTile) return;
    wait_stores_landed();
    if (cutlass::canonical_lane_idx() == 0) {
      const uint64_t t_notify = trace_start(trace);
      notify_part(pending_m_tile, pending_n_tile);
      trace_span(trace, TraceKind::kNotify, pending_m_tile * plan.n_tiles() + pending_n_tile, TraceRole::kConsumer,
                 t_notify, global_time_ns());
    }
    __syncwarp();
    pending_m_tile = kNoTile;
  }
};

template <class Base>
using Sm90NotifyEpilogue = Sm90HookedEpilogue<Base, GemmRsNotify>;

// The kernel type for one configuration: the bf16 or FP8 TN GEMM with the owner-block mainloop and
// the notifying epilogue.
template <class TileShape, class ClusterShape>
using Sm90GemmRsTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, Sm90GemmRsMainloop, Sm90NotifyEpilogue>;
// FP8 keeps CUTLASS's own promotion (kPipelinedPromotion = false): with the pipelined one's
// second MMA accumulator this kernel spills ~1 KB a thread, because of the epilogue reducer's
// sums (gemm_rs_sum_rows<4, 4>: 16 vectors in flight a thread). With <2, 2> it does not spill, at
// the cost of the sums' rate; not measured yet, so not taken.
template <class TileShape, class ClusterShape, Fp8Scaling kScaling>
using Sm90GemmRsFp8Types =
    Sm90Fp8TnGemm<TileShape, ClusterShape, kScaling, Sm90GemmRsMainloop, Sm90NotifyEpilogue, Cooperative, true, false>;

template <class Types>
class Sm90GemmRsKernelImpl final
    : public Sm90GemmKernelImpl<Sm90GemmRsKernelImpl<Types>, Sm90GemmRsKernel, Types, Sm90GemmRsProblem,
                                Sm90GemmRsConfigInfo> {
  using Kernel = typename Types::Kernel;
  using Sm90GemmRsKernelImpl::Sm90GemmKernelImpl::launcher_;
  static constexpr uint32_t kTileM = Types::kTileM;
  static constexpr bool kFp8 = std::is_same_v<typename Types::ElementA, cutlass::float_e4m3_t>;
  static_assert(Kernel::NumMMAThreads == kConsumerThreads, "the epilogue sums' barriers count 256 consumers");

 public:
  static std::string can_implement(const Sm90GemmRsProblem& p) {
    if (p.plan.bm != kTileM) {
      return "plan tile rows = " + std::to_string(p.plan.bm) + ": expected the kernel's " + std::to_string(kTileM);
    }
    return Types::check(p.m, p.n, p.k, p.lda, p.sm_count, p.swizzle);
  }
  // The configuration's row of the table, with its data type.
  static Sm90GemmRsConfigInfo info(const char* name) {
    Sm90GemmRsConfigInfo i = Sm90GemmRsKernelImpl::Sm90GemmKernelImpl::info(name);
    if constexpr (kFp8) {
      i.dtype = DType::kE4m3;
      i.scaling = Types::kScalingMode;
    }
    return i;
  }

  explicit Sm90GemmRsKernelImpl(const Sm90GemmRsProblem& p) {
    this->require(p, "gemm_rs kernel");
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    typename Kernel::Arguments args{};
    // The kernel's M: every owner block in whole tile rows (the mainloop and epilogue map them).
    const uint32_t kernel_m = p.plan.world * p.plan.m_tiles() * kTileM;
    if constexpr (kFp8) {
      Types::set_problem(args, kernel_m, p.n, p.k, p.a, p.lda, p.a_scale, p.b, p.b_scale, p.d, p.m_order, p.swizzle);
      // The scales per owner block (the epilogue's and the main loop's batch): R rows of A apart.
      const int64_t pitch = static_cast<int64_t>(p.lda / 4);  // floats per packed row
      const int64_t block_stride = int64_t(p.plan.rows_per_rank) * pitch;
      const float* tail = reinterpret_cast<const float*>(static_cast<const char*>(p.a) + p.k);
      Types::Fusion::set(args.epilogue.thread, Types::kScalingMode == Fp8Scaling::kTensor ? p.a_scale : tail, pitch,
                         p.b_scale, block_stride);
      if constexpr (Types::kBlockScaled) {
        const int32_t owners = static_cast<int32_t>(p.plan.world);
        args.mainloop.layout_SFA = Types::block_scale_layout_a(p.plan.rows_per_rank, p.k, pitch, owners, block_stride);
        args.mainloop.layout_SFB = Types::block_scale_layout_b(p.n, p.k, owners);
      }
    } else {
      Types::set_problem(args, kernel_m, p.n, p.k, p.a, p.lda, p.b, p.d, p.m_order, p.swizzle);
    }
    args.mainloop.hook.plan = p.plan;
    args.mainloop.hook.n_tiles = p.plan.n_tiles();
    args.epilogue.dD = cute::make_stride(static_cast<int64_t>(p.n), cute::Int<1>{}, p.d_batch_stride);
    args.epilogue.dC = args.epilogue.dD;
    args.epilogue.hook.plan = p.plan;
    args.epilogue.hook.sig = p.sig;
    args.epilogue.hook.heap = p.heap;
    args.epilogue.hook.d_origin = p.d_origin;
    args.epilogue.hook.cluster_m = Types::kClusterM;
    args.epilogue.hook.buf = static_cast<const __nv_bfloat16*>(p.buf);
    args.epilogue.hook.recv = static_cast<const __nv_bfloat16*>(p.recv);
    args.epilogue.hook.out = static_cast<__nv_bfloat16*>(p.out);
    launcher_.init(args, p.device, p.sm_count,
                   "gemm_rs kernel, (m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                       std::to_string(k) + ")");
  }

  void run(uint64_t epoch, cudaStream_t stream, bool notify) override {
    launcher_.params().epilogue.hook.sig.epoch = epoch;
    launcher_.params().epilogue.hook.enabled = notify;
    launcher_.launch(stream);
  }
  void set_trace(const TraceView& trace) override { launcher_.params().epilogue.hook.trace = trace; }
};

}  // namespace tilelink::detail
