// CUTLASS 4.2 sm90 assembly of GEMM+AR's GEMM. Included only by one-configuration .cu files.
//
//  - The mainloop runs the problem as a batch of K slices, (M, N, K / splits, splits), A's and
//    B's batch stride K / splits elements (the slices' columns of the same rows), D's M * N.
//  - Sm90HookedEpilogue with GemmArNotify: after Base::store of a tile, once its TMA stores have
//    landed (store_landed_then), add 1 to the tile's ready channel on this rank (plan.splits per
//    tile). With the slices summed in the GEMM (k_slices > plan.splits == 1), each tile's last
//    slice first adds the earlier slices' fp32 accumulators to its own (sm90_slot_sum.cuh, in slice
//    order) and stores the sum at slice 0's place; the earlier slices store and notify nothing.
//    Every CTA of the grid must be resident (the launcher sizes it to the budget): a last slice
//    waits, unbounded, for the earlier slices' CTAs.
//  - Sm90RowOrderedTileScheduler with the identity order (cooperative 128-row tiles), or CUTLASS's
//    persistent scheduler (ping-pong 64-row tiles for small M, each consumer warp group its tile).
//  - Built with CUTLASS_ENABLE_GDC_FOR_SM90: each CTA releases the reduction kernel launched
//    behind it (LaunchOrder::kEarly) at its last tile, so the reduction's launch overlaps the
//    GEMM's last wave; the reduction still waits for the whole GEMM (griddepcontrol.wait).
#pragma once

// Before any CUTLASS header: it decides at its first inclusion (cutlass/arch/grid_dependency_control.h).
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#endif

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include <string>
#include <type_traits>

#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_hooked_epilogue.cuh"
#include "ops/common/sm90_persistent_launcher.cuh"
#include "ops/common/sm90_slot_sum.cuh"
#include "ops/gemm_ar/sm90_gemm_ar_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

struct GemmArNotify : PlainEpilogueView {
  GemmArPlan plan;
  SignalView sig;
  bool enabled = true;
  TraceView trace;

  // The GEMM's K slices (the batch's extent); more than plan.splits (then 1): summed here, through
  // `slots` (tiles x warp_groups x (k_slices - 1) slots of a warp group's accumulators) and `flags`
  // (tiles x warp_groups, zero between launches). warp_groups: consumer warp groups per tile (2
  // cooperative, each half of it; 1 ping-pong).
  uint32_t k_slices = 1;
  uint32_t warp_groups = 1;
  float* slots = nullptr;
  uint64_t* flags = nullptr;

  CUTLASS_HOST_DEVICE bool sums_slices() const { return k_slices > plan.splits; }

  // The summed tile goes to slice 0's place (the M x N partial, or `out`).
  template <class TileCoord>
  CUTLASS_HOST_DEVICE auto coord(TileCoord const& c) const {
    return cute::make_coord(cute::get<0>(c), cute::get<1>(c), cute::get<2>(c),
                            sums_slices() ? 0 : cute::get<3>(c));
  }

  template <class TileCoord, class Accumulators>
  CUTLASS_DEVICE bool accumulate(TileCoord const& c, Accumulators& acc, int) const {
    if (!sums_slices()) return true;
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(c)), slice = static_cast<uint32_t>(cute::get<3>(c));
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(c));
    // A cluster's padding tile (past M or N) has no slot: it would take a real tile's.
    if (m_tile >= plan.m_tiles() || n_tile >= plan.n_tiles()) return slice + 1 == k_slices;
    const uint32_t wg = static_cast<uint32_t>(cutlass::canonical_warp_group_idx()) - 1;  // consumer 0 or 1
    const size_t slot = size_t(m_tile * plan.n_tiles() + n_tile) * warp_groups + (warp_groups > 1 ? wg : 0);
    const size_t slot_floats = size_t(decltype(cute::size(acc))::value) * kSlotSumThreads;
    return sum_runs_through_slots(
        slots + slot * (k_slices - 1) * slot_floats, flags + slot, acc, slice, k_slices,
        static_cast<cutlass::arch::ReservedNamedBarriers>(
            static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::StreamkBarrier0) + wg));
  }

  CUTLASS_DEVICE uint64_t before() const { return trace_start(trace); }

  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) const {
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(coord)), n_tile = static_cast<uint32_t>(cute::get<1>(coord));
    if (m_tile >= plan.m_tiles() || n_tile >= plan.n_tiles()) return;  // a cluster's padding tile: no channel
    const uint32_t t = m_tile * plan.n_tiles() + n_tile;
    notify_landed_tile(enabled, thread_idx, trace, t, start,
                       [&] { tilelink::producer_tile_notify(sig, plan.ready_channel(t), NotifyMode::kAdd); });
  }
};

template <class Base>
using Sm90GemmArEpilogue = Sm90HookedEpilogue<Base, GemmArNotify>;

// Cooperative tiles of 128+ rows in the row-ordered scheduler (identity order), or ping-pong
// tiles of 64 rows in CUTLASS's own persistent scheduler (small M).
template <class TileShape, class ClusterShape, class Schedule = Cooperative>
using Sm90GemmArTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, NoWrap, Sm90GemmArEpilogue, Schedule,
                                       std::is_same_v<Schedule, Cooperative>>;

template <class TileShape, class ClusterShape, class Schedule = Cooperative>
class Sm90GemmArKernelImpl final
    : public Sm90GemmKernelImpl<Sm90GemmArKernelImpl<TileShape, ClusterShape, Schedule>, Sm90GemmArKernel,
                                Sm90GemmArTypes<TileShape, ClusterShape, Schedule>, Sm90GemmArProblem,
                                Sm90GemmArConfigInfo> {
  using Types = Sm90GemmArTypes<TileShape, ClusterShape, Schedule>;
  using Kernel = typename Types::Kernel;
  using Sm90GemmArKernelImpl::Sm90GemmKernelImpl::launcher_;

 public:
  static std::string can_implement(const Sm90GemmArProblem& p) {
    const uint32_t s = p.k_slices;
    if (p.plan.splits != s && p.plan.splits != 1) {
      return "argument 'plan.splits' = " + std::to_string(p.plan.splits) + ": expected the GEMM's " +
             std::to_string(s) + " K slices (a partial each) or 1 (the slices summed in the GEMM)";
    }
    if (s == 0 || p.k % s != 0 || (p.k / s) % Types::kAlign != 0) {
      return "argument 'config.splits' = " + std::to_string(s) + ": expected a count that cuts k = " +
             std::to_string(p.k) + " into slices of a multiple of 8 columns";
    }
    return Types::check(p.m, p.n, p.k / s, p.k, p.sm_count, 1);
  }

  explicit Sm90GemmArKernelImpl(const Sm90GemmArProblem& p) {
    this->require(p, "gemm_ar kernel");
    const uint32_t s = p.k_slices, ks = p.k / s;
    typename Kernel::Arguments args{};
    Types::set_problem(args, p.m, p.n, ks, p.a, p.k, p.b, p.d, p.m_order, 1);
    args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(ks), static_cast<int>(s)};
    args.mainloop.dA = cute::make_stride(static_cast<int64_t>(p.k), cute::Int<1>{}, static_cast<int64_t>(ks));
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(p.k), cute::Int<1>{}, static_cast<int64_t>(ks));
    args.epilogue.dD = cute::make_stride(static_cast<int64_t>(p.n), cute::Int<1>{}, static_cast<int64_t>(p.m) * p.n);
    args.epilogue.dC = args.epilogue.dD;
    args.epilogue.hook.plan = p.plan;
    args.epilogue.hook.sig = p.sig;
    args.epilogue.hook.k_slices = s;
    args.epilogue.hook.warp_groups = std::is_same_v<Schedule, Cooperative> ? 2 : 1;
    args.epilogue.hook.slots = p.slots;
    args.epilogue.hook.flags = p.flags;
    launcher_.init(args, p.device, p.sm_count,
                   "gemm_ar kernel, (m, n, k) = (" + std::to_string(p.m) + ", " + std::to_string(p.n) + ", " +
                       std::to_string(p.k) + "), splits " + std::to_string(s));
  }

  void run(uint64_t epoch, cudaStream_t stream, bool notify) override {
    launcher_.params().epilogue.hook.sig.epoch = epoch;
    launcher_.params().epilogue.hook.enabled = notify;
    launcher_.launch(stream);
  }
  void set_trace(const TraceView& trace) override { launcher_.params().epilogue.hook.trace = trace; }
};

}  // namespace tilelink::detail
