// CUTLASS 4.2 sm90 assembly of the fused GEMM+RS kernel (docs/design/gemm_rs_kernel.md has the
// reading of CUTLASS's epilogue this relies on). Included only by one-configuration .cu files.
//
//  - Sm90NotifyEpilogue<Base>: Base = the builder's TMA warp-specialized epilogue, hooked
//    (sm90_hooked_epilogue.cuh). The mainloop runs the plain (M, N, K) problem; the epilogue sees
//    it as a batch over owners, (M/P, N, K, P), with D's batch stride the distance between owner
//    blocks' destinations, so one TMA descriptor stores either into this rank's buffer or,
//    through an affine heap, straight into each owner's receive slot. After Base::store of a
//    tile, once its TMA stores have been written (store_landed_then), it notifies the tile's
//    signal group (add mode, one notify per tile): on this rank, or on the owner for the
//    epilogue push.
//  - Sm90RowOrderedTileScheduler: owner blocks of other ranks first, own block last.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <string>

#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_hooked_epilogue.cuh"
#include "ops/common/sm90_persistent_launcher.cuh"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// What a finished tile notifies; the epilogue's hook (sm90_hooked_epilogue.cuh). With a TraceView
// on, consumer thread 0 records each tile's epilogue (store and notify) and, inside it, the
// notify, both named by the GEMM tile (m_tile * n_tiles + n_tile over the whole M).
struct GemmRsNotify {
  GemmRsFusedPlan plan;
  SignalView sig;
  bool enabled = true;  // false: the GEMM alone (benchmarks)
  TraceView trace;

  TL_HOST_DEVICE uint32_t m_tiles() const { return plan.world * plan.m_tiles(); }  // tile rows of M

  // The epilogue's view: (M, N, K, 1) -> (M/P, N, K, P), and a tile row of M -> (row within the
  // owner block, owner). Padding tiles land past the block's rows, where TMA writes nothing.
  template <class ProblemShape>
  TL_HOST_DEVICE auto problem(ProblemShape const& problem) const {
    return cute::make_shape(static_cast<int>(plan.rows_per_rank), static_cast<int>(cute::get<1>(problem)),
                            static_cast<int>(cute::get<2>(problem)), static_cast<int>(plan.world));
  }
  template <class TileCoord>
  TL_HOST_DEVICE auto coord(TileCoord const& coord) const {
    const int m = static_cast<int>(cute::get<0>(coord));
    const int mt = static_cast<int>(plan.m_tiles()), last = static_cast<int>(plan.world) - 1;
    const int owner = m < mt * (last + 1) ? m / mt : last;
    return cute::make_coord(m - owner * mt, static_cast<int>(cute::get<1>(coord)),
                            static_cast<int>(cute::get<2>(coord)), owner);
  }
  CUTLASS_DEVICE uint64_t before() const { return trace_start(trace); }

  // One notify per finished tile (add mode), once its stores have landed; padding tiles (cluster
  // rounding, m_tile >= m_tiles()) notify nothing and record nothing.
  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) const {
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(coord));
    if (m_tile >= m_tiles()) return;
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(coord));
    const uint32_t traced_tile = m_tile * plan.n_tiles() + n_tile;
    notify_landed_tile(enabled, thread_idx, trace, traced_tile, start, [&] {
      const uint32_t channel = plan.tile_channel(m_tile, n_tile);
      if (plan.scatter == GemmRsScatter::kEpiloguePush) {
        tilelink::peer_tile_notify(sig, channel, static_cast<int>(plan.tile_owner(m_tile)), NotifyMode::kAdd);
      } else {
        tilelink::producer_tile_notify(sig, channel, NotifyMode::kAdd);
      }
    });
  }
};

template <class Base>
using Sm90NotifyEpilogue = Sm90HookedEpilogue<Base, GemmRsNotify>;

// The kernel type for one configuration: the bf16 TN GEMM with the notifying epilogue.
template <class TileShape, class ClusterShape>
using Sm90GemmRsTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, NoWrap, Sm90NotifyEpilogue>;

template <class TileShape, class ClusterShape>
class Sm90GemmRsKernelImpl final
    : public Sm90GemmKernelImpl<Sm90GemmRsKernelImpl<TileShape, ClusterShape>, Sm90GemmRsKernel,
                                Sm90GemmRsTypes<TileShape, ClusterShape>, Sm90GemmRsProblem, Sm90GemmRsConfigInfo> {
  using Types = Sm90GemmRsTypes<TileShape, ClusterShape>;
  using Kernel = typename Types::Kernel;
  using Sm90GemmRsKernelImpl::Sm90GemmKernelImpl::launcher_;
  static constexpr uint32_t kTileM = Types::kTileM;

 public:
  static std::string can_implement(const Sm90GemmRsProblem& p) {
    if (p.plan.rows_per_rank % kTileM != 0) {
      return "argument 'm_per_rank' = " + std::to_string(p.plan.rows_per_rank) + ": expected a multiple of " +
             std::to_string(kTileM) + " (owner blocks are whole GEMM tile rows)";
    }
    return Types::check(p.m, p.n, p.k, p.k, p.sm_count, p.swizzle);
  }

  explicit Sm90GemmRsKernelImpl(const Sm90GemmRsProblem& p) {
    this->require(p, "gemm_rs kernel");
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    typename Kernel::Arguments args{};
    Types::set_problem(args, p.m, p.n, p.k, p.a, p.k, p.b, p.d, p.m_order, p.swizzle);
    args.epilogue.dD = cute::make_stride(static_cast<int64_t>(p.n), cute::Int<1>{}, p.d_batch_stride);
    args.epilogue.dC = args.epilogue.dD;
    args.epilogue.hook = {p.plan, p.sig, true, TraceView{}};
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
