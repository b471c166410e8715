// CUTLASS 4.2 sm90 assembly of the fused AG+GEMM kernel (see docs/design/ag_gemm_kernel.md for
// the reading of CUTLASS this relies on). Included only by the one-configuration .cu files.
//
//  - Sm90AgGemmMainloop<Base>: Base = the builder's TMA + GMMA warp-specialized mainloop, hooked
//    (ops/common/sm90_hooked_mainloop.cuh) with AgGemmWait: its load() first waits, in one lane
//    of the producer warp, on the all-gather channels that cover the tile's A rows
//    (consumer_tile_wait: acquire, then fence.proxy.async so that the TMA loads see the rows),
//    then runs Base::load unchanged.
//  - Sm90RowOrderedTileScheduler (ops/common/sm90_row_ordered_scheduler.cuh): tile rows in the
//    order they arrive on this rank (m_order), the same permuted tile for every warp.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <string>
#include <type_traits>

#include "ops/ag_gemm/sm90_ag_gemm_kernel.hpp"
#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_fp8_tn_gemm.cuh"
#include "ops/common/sm90_hooked_mainloop.cuh"
#include "ops/common/sm90_persistent_launcher.cuh"
#include "ops/common/sm90_traced_epilogue.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// One thread's view of consumer_tile_wait, for all_gather_wait_rows (no block barriers: the
// other warps of a warp-specialized CTA never reach one).
struct ThreadWaitCtx {
  TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count,
                                    uint32_t arrivals, int32_t tile) const {
    tilelink::consumer_tile_wait(sig, channel, count, arrivals, tile);
  }
};

// What the producer warp waits on (the mainloop's hook, sm90_hooked_mainloop.cuh): the
// all-gather channels that cover the tile's rows of A.
struct AgGemmWait {
  AllGatherPlan plan;
  SignalView sig;
  uint32_t m = 0;        // rows of A
  uint32_t n_tiles = 0;  // names a tile (m_tile * n_tiles + n_tile) in a timeout report
  uint32_t enabled = 0;  // 0: plain GEMM
  TraceView trace;       // on: the producer records each tile's wait and loads

  // In one lane; rows past M (the padding tile of an odd tile-row count) are zero-filled by TMA
  // and waited for by nobody.
  template <uint32_t kTileM>
  CUTLASS_DEVICE void wait(uint32_t m_tile, uint32_t n_tile) const {
    const uint32_t row0 = m_tile * kTileM;
    if (cute::elect_one_sync() && row0 < m) {
      const uint32_t rows = m - row0 < kTileM ? m - row0 : kTileM;
      ThreadWaitCtx ctx;
      all_gather_wait_rows(ctx, plan, sig, row0, rows, static_cast<int32_t>(m_tile * n_tiles + n_tile));
    }
  }
  template <class BlockCoord>
  CUTLASS_DEVICE BlockCoord load_coord(BlockCoord const& blk_coord) const {
    return blk_coord;
  }
};

template <class Base>
using Sm90AgGemmMainloop = Sm90HookedMainloop<Base, AgGemmWait>;

// The kernel type for one configuration: the bf16 or FP8 TN GEMM with the waiting mainloop and
// the traced epilogue.
template <class TileShape, class ClusterShape>
using Sm90AgGemmTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, Sm90AgGemmMainloop, Sm90TracedEpilogue>;
// The same with the last, partial wave split along K (sm90_split_tail_scheduler.cuh).
template <class TileShape, class ClusterShape>
using Sm90AgGemmSplitTailTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, Sm90AgGemmMainloop, Sm90TracedEpilogue,
                                                Cooperative, true, SplitTailSchedulerTag>;
template <class TileShape, class ClusterShape, Fp8Scaling kScaling>
using Sm90AgGemmFp8Types = Sm90Fp8TnGemm<TileShape, ClusterShape, kScaling, Sm90AgGemmMainloop, Sm90TracedEpilogue>;

template <class Types>
class Sm90AgGemmKernelImpl final
    : public Sm90GemmKernelImpl<Sm90AgGemmKernelImpl<Types>, Sm90AgGemmKernel, Types, Sm90AgGemmProblem,
                                Sm90AgGemmConfigInfo> {
  using Kernel = typename Types::Kernel;
  using Sm90AgGemmKernelImpl::Sm90GemmKernelImpl::launcher_;
  static constexpr uint32_t kTileN = Types::kTileN;

  static constexpr bool kFp8 = std::is_same_v<typename Types::ElementA, cutlass::float_e4m3_t>;

 public:
  static std::string can_implement(const Sm90AgGemmProblem& p) {
    return Types::check(p.m, p.n, p.k, p.lda, p.sm_count, p.swizzle);
  }
  // The configuration's row of the table, with its data type.
  static Sm90AgGemmConfigInfo info(const char* name) {
    Sm90AgGemmConfigInfo i = Sm90AgGemmKernelImpl::Sm90GemmKernelImpl::info(name);
    if constexpr (kFp8) {
      i.dtype = DType::kE4m3;
      i.scaling = Types::kScalingMode;
    }
    return i;
  }

  explicit Sm90AgGemmKernelImpl(const Sm90AgGemmProblem& p) {
    this->require(p, "ag_gemm kernel");
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);

    typename Kernel::Arguments args{};
    // The swizzle is the scheduler's band of cluster rows (sm90_row_ordered_scheduler.cuh): the
    // order CUTLASS's swizzle would run, without the tiles it adds where N's tiles are not a
    // multiple of the swizzle (14 of 256 columns a rank at n = 28672 / 8 ran as 16: 1/8 more work).
    if constexpr (kFp8) {
      Types::set_problem(args, p.m, p.n, p.k, p.a, p.lda, p.a_scale, p.b, p.b_scale, p.c, p.m_order, 1);
    } else {
      Types::set_problem(args, p.m, p.n, p.k, p.a, p.lda, p.b, p.c, p.m_order, 1);
    }
    args.scheduler.m_band = static_cast<uint32_t>(p.swizzle);
    args.mainloop.hook.plan = p.plan;
    args.mainloop.hook.sig = p.sig;
    args.mainloop.hook.m = p.m;
    args.mainloop.hook.n_tiles = (p.n + kTileN - 1) / kTileN;
    args.mainloop.hook.enabled = p.wait ? 1u : 0u;
    args.epilogue.hook.n_tiles = args.mainloop.hook.n_tiles;

    launcher_.init(args, p.device, p.sm_count,
                   "ag_gemm kernel, (m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                       std::to_string(k) + ")",
                   p.workspaces);
  }

  void run(uint64_t epoch, cudaStream_t stream) override {
    launcher_.params().mainloop.hook.sig.epoch = epoch;
    launcher_.launch(stream);
  }

  void set_trace(const TraceView& trace) override {
    launcher_.params().mainloop.hook.trace = trace;
    launcher_.params().epilogue.hook.view = trace;
  }

};

}  // namespace tilelink::detail
