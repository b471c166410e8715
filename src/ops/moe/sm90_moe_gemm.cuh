// CUTLASS 4.2 sm90 assembly of the MoE grouped GEMM (part 1). Included only by the
// one-configuration .cu files.
//
// The grouped GEMM is one GEMM over the expert-sorted rows whose B operand depends on the tile
// row: every tile row holds one expert's rows (the mapping pads experts to whole tiles), so the
// mainloop builds B's TMA descriptor over all experts, (N, K, experts), and loads tile row t's B
// tiles at l = tile_expert[t]; A and D are the plain (rows, K) and (rows, N) matrices, which
// ignore l. Clusters may only span N (two CTAs of a cluster share A's rows; their B tiles differ).
//
// Sm90MoeGemmMainloop<Base>: Base = the builder's TMA + GMMA warp-specialized mainloop, hooked
// (ops/common/sm90_hooked_mainloop.cuh) with MoeGemmWait: its load() first waits, in one lane of
// the producer warp, on the gather stage's channel of the tile (consumer_tile_wait, then
// fence.proxy.async so that TMA sees the gathered rows), then runs Base::load with the tile's
// expert as the batch coordinate.
//
// Sm90MoeGemmEpilogue<Base>: Base = the builder's TMA epilogue. For part 2, after Base::store of
// a tile the warp that issued its TMA stores waits for them to be written, fences the async proxy
// and notifies the tile's own channel (channel0 + tile_row * n_tiles + n_tile, set mode) for the
// combine (as GEMM+RS's epilogue, docs/design/gemm_rs_kernel.md). Part 1 and part 2 share one
// kernel type; each enables its own side at run time.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include <string>

#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_hooked_mainloop.cuh"
#include "ops/common/sm90_hooked_epilogue.cuh"
#include "ops/common/sm90_persistent_launcher.cuh"
#include "ops/moe/sm90_moe_gemm_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// What the producer waits on and where B's expert comes from: the mainloop's hook
// (sm90_hooked_mainloop.cuh).
struct MoeGemmWait {
  SignalView sig;
  uint32_t channel0 = 0;
  const uint32_t* tile_expert = nullptr;
  uint32_t experts = 1;
  uint32_t n_tiles = 0;  // names a tile (t * n_tiles + n_tile) in a timeout report
  uint32_t enabled = 0;  // 0: no waits (rows already in place)
  TraceView trace;       // on: the producer records each tile's wait and loads

  // The gather stage's channel of the tile row, in one lane.
  template <uint32_t kTileM>
  CUTLASS_DEVICE void wait(uint32_t m_tile, uint32_t n_tile) const {
    if (cute::elect_one_sync()) {
      tilelink::consumer_tile_wait(sig, channel0 + m_tile, 1, 1, static_cast<int32_t>(m_tile * n_tiles + n_tile));
    }
  }
  // The tile row's expert as the batch coordinate of B (A and D ignore it).
  template <class BlockCoord>
  CUTLASS_DEVICE auto load_coord(BlockCoord const& blk_coord) const {
    const int expert = static_cast<int>(__ldg(tile_expert + static_cast<uint32_t>(cute::get<0>(blk_coord))));
    return cute::make_coord(cute::get<0>(blk_coord), cute::get<1>(blk_coord), cute::get<2>(blk_coord), expert);
  }
};

// What a finished tile notifies (part 2); the epilogue's hook (sm90_hooked_epilogue.cuh).
struct MoeGemmNotify : PlainEpilogueView {
  SignalView sig;
  uint32_t channel0 = 0;
  uint32_t n_tiles = 0;  // tiles along N; cluster rounding's extra tile (n_tile >= n_tiles) notifies nothing
  uint32_t enabled = 0;
  TraceView trace;  // on: consumer thread 0 records each tile's epilogue and notify

  CUTLASS_DEVICE uint64_t before() const { return trace_start(trace); }
  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) const {
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(coord));
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(coord));
    if (n_tile >= n_tiles) return;
    const uint32_t tile = m_tile * n_tiles + n_tile;
    notify_landed_tile(enabled != 0, thread_idx, trace, tile, start,
                       [&] { tilelink::producer_tile_notify(sig, channel0 + tile); });
  }
};

template <class Base>
using Sm90MoeGemmEpilogue = Sm90HookedEpilogue<Base, MoeGemmNotify>;

template <class Base>
struct Sm90MoeGemmMainloop : Sm90HookedMainloop<Base, MoeGemmWait> {
  using Hooked = Sm90HookedMainloop<Base, MoeGemmWait>;
  using typename Hooked::Arguments;
  using typename Hooked::Params;

  // Base's Params for the (rows, N, K, 1) problem, with B's descriptor replaced by one over all
  // experts (dB's batch stride steps from one expert's slice to the next).
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    Params params = Hooked::to_underlying_arguments(problem_shape, args, workspace);
    const int m = cute::get<0>(problem_shape), n = cute::get<1>(problem_shape), k = cute::get<2>(problem_shape);
    typename Base::Arguments experts = args;
    // A's batch stride is never used (A ignores l); any stride TMA accepts will do.
    experts.dA = cute::make_stride(cute::get<0>(args.dA), cute::Int<1>{}, int64_t(m) * cute::get<0>(args.dA));
    params.tma_load_b =
        Base::to_underlying_arguments(cute::make_shape(m, n, k, static_cast<int>(args.hook.experts)), experts,
                                      workspace)
            .tma_load_b;
    return params;
  }

  template <class ProblemShape_MNKL>
  CUTLASS_DEVICE auto load_init(ProblemShape_MNKL const& problem_shape_MNKL, Params const& params) const {
    const auto a_inputs = Base::load_init(problem_shape_MNKL, params);
    const auto b_inputs = Base::load_init(
        cute::make_shape(cute::get<0>(problem_shape_MNKL), cute::get<1>(problem_shape_MNKL),
                         cute::get<2>(problem_shape_MNKL), static_cast<int>(params.hook.experts)),
        params);
    // (BLK_M, BLK_K, m, k, l): a zero l stride, so that the expert coordinate leaves A alone.
    const auto gA = cute::get<0>(a_inputs);
    return cute::make_tuple(with_batch_mode(gA, cute::get<4>(gA.shape()), cute::Int<0>{}), cute::get<1>(b_inputs));
  }
};

// The kernel type for one configuration: the bf16 TN GEMM with the waiting mainloop and the
// notifying epilogue.
template <class TileShape, class ClusterShape>
using Sm90MoeGemmTypes = Sm90Bf16TnGemm<TileShape, ClusterShape, Sm90MoeGemmMainloop, Sm90MoeGemmEpilogue>;

template <class TileShape, class ClusterShape>
class Sm90MoeGemmKernelImpl final
    : public Sm90GemmKernelImpl<Sm90MoeGemmKernelImpl<TileShape, ClusterShape>, Sm90MoeGemmKernel,
                                Sm90MoeGemmTypes<TileShape, ClusterShape>, Sm90MoeGemmProblem, Sm90MoeGemmConfigInfo> {
  using Types = Sm90MoeGemmTypes<TileShape, ClusterShape>;
  using Kernel = typename Types::Kernel;
  using Sm90MoeGemmKernelImpl::Sm90GemmKernelImpl::launcher_;
  static constexpr uint32_t kTileM = Types::kTileM, kTileN = Types::kTileN;
  static_assert(Types::kClusterM == 1, "a cluster's CTAs share B tiles along M: one expert's only along N");

 public:

  static std::string can_implement(const Sm90MoeGemmProblem& p) {
    if (p.max_tiles == 0) return "no tile rows: expected at least one token";
    if (uint64_t(p.max_tiles) * kTileM > 0x7FFFFFFFull) {
      return "expert-sorted rows = " + std::to_string(uint64_t(p.max_tiles) * kTileM) + ": expected below 2^31";
    }
    if (p.experts == 0) return "argument 'experts' = 0: expected at least one";
    return Types::check(p.max_tiles * kTileM, p.n, p.k, p.k, p.sm_count, p.swizzle);
  }

  explicit Sm90MoeGemmKernelImpl(const Sm90MoeGemmProblem& p) {
    this->require(p, "moe grouped GEMM kernel");
    const uint32_t rows = p.max_tiles * kTileM;
    typename Kernel::Arguments args{};
    Types::set_problem(args, rows, p.n, p.k, p.a, p.k, p.b, p.d, p.order, p.swizzle);
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(p.k), cute::Int<1>{}, int64_t(p.n) * p.k);
    args.scheduler.m_tiles_live = p.num_tiles;
    args.mainloop.hook.sig = p.sig;
    args.mainloop.hook.channel0 = p.channel0;
    args.mainloop.hook.tile_expert = p.tile_expert;
    args.mainloop.hook.experts = p.experts;
    args.mainloop.hook.n_tiles = (p.n + kTileN - 1) / kTileN;
    args.mainloop.hook.enabled = p.wait ? 1u : 0u;
    args.epilogue.hook.sig = p.notify_sig;
    args.epilogue.hook.channel0 = p.notify_channel0;
    args.epilogue.hook.n_tiles = args.mainloop.hook.n_tiles;
    args.epilogue.hook.enabled = p.notify ? 1u : 0u;
    launcher_.init(args, p.device, p.sm_count,
                   "moe grouped GEMM kernel, (rows, n, k, experts) = (" + std::to_string(rows) + ", " +
                       std::to_string(p.n) + ", " + std::to_string(p.k) + ", " + std::to_string(p.experts) + ")");
  }

  void run(uint64_t epoch, cudaStream_t stream) override {
    launcher_.params().mainloop.hook.sig.epoch = epoch;
    launcher_.params().epilogue.hook.sig.epoch = epoch;
    launcher_.launch(stream);
  }

  void set_trace(const TraceView& trace) override {
    launcher_.params().mainloop.hook.trace = trace;
    launcher_.params().epilogue.hook.trace = trace;
  }
};

}  // namespace tilelink::detail
