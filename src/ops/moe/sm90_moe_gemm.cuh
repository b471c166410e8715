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
#include "ops/moe/moe_combine_sums.cuh"
#include "ops/moe/sm90_moe_gemm_kernel.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
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

// 16-byte vectors of one item per consumer thread in flight (x topk loads each): 4 of the 8 a
// 64-token x 256-column item gives each of the 256 threads.
constexpr int kEpilogueCombineVec = 4;

// Part 2's combine of item (token block g, column tile c) by the 256 consumer threads of the CTA
// whose tile was the item's last (moe_rs_protocol.hpp): each token's top-k rows of y (the GEMM's
// output, other CTAs' tiles: loaded past L1), weighted in k order in fp32 -- the combine block's
// sums, bit for bit -- rounded to bf16 into the owner's slot of this rank (the output with no
// peers).
CUTLASS_DEVICE void moe_epilogue_combine_item(const Sm90MoeEpilogueCombine& cb, const uint4* y, int rank, uint32_t g,
                                              uint32_t c, uint32_t thread) {
  const MoeRsPlan& plan = cb.plan;
  const uint32_t owner = plan.tokens.rank_of_channel(g), topk = cb.m.topk;
  const RowRange rows = plan.tokens.rows_of_channel(g);
  const ColRange cols = tile_cols(c, plan.bn, plan.n);
  const uint32_t row_vectors = plan.n / 8, item_vectors = cols.cols / 8, col_vector0 = cols.col0 / 8;
  uint4* slot = plan.world() == 1 ? static_cast<uint4*>(cb.out)
                                  : reinterpret_cast<uint4*>(cb.heap.translate(
                                        plan.slot(static_cast<__nv_bfloat16*>(cb.recv), static_cast<uint32_t>(rank)),
                                        static_cast<int>(owner)));
  topk_weighted_sums<kEpilogueCombineVec>(
      rows.rows * item_vectors, thread, kConsumerThreads, topk,
      [&](uint32_t e, uint32_t j, uint4& v, float& w) {
        const uint64_t pair = uint64_t(rows.row0 + e / item_vectors) * topk + j;
        v = __ldcg(y + uint64_t(__ldg(cb.m.pair_row + pair)) * row_vectors + col_vector0 + e % item_vectors);
        w = __ldg(cb.weights + pair);
      },
      [&](uint32_t e, const uint4& sum) {
        const uint32_t token = rows.row0 + e / item_vectors - owner * plan.tokens.rows_per_rank;
        slot[uint64_t(token) * row_vectors + col_vector0 + e % item_vectors] = sum;
      });
}

// What a finished tile notifies (part 2); the epilogue's hook (sm90_hooked_epilogue.cuh). With
// combine.on, instead, the combine in the epilogue (moe_epilogue_combine_tile's steps): the
// storing warp's lanes count the landed tile on its items, 32 token blocks at a time (acq_rel
// fetch-adds, issued together), and list those whose last tile it was; every consumer thread
// combines the listed items; then lane i of that warp notifies item i's owner (a release after
// the barrier that follows every thread's stores).
struct MoeGemmNotify : PlainEpilogueView {
  SignalView sig;
  uint32_t channel0 = 0;
  uint32_t n_tiles = 0;  // tiles along N; cluster rounding's extra tile (n_tile >= n_tiles) notifies nothing
  uint32_t enabled = 0;
  TraceView trace;  // on: consumer thread 0 records each tile's epilogue and notify
  const uint4* y = nullptr;  // the GEMM's output (combine.on)
  Sm90MoeEpilogueCombine combine;

  CUTLASS_DEVICE uint64_t before() const { return trace_start(trace); }
  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) const {
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(coord));
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(coord));
    if (n_tile >= n_tiles) return;
    const uint32_t tile = m_tile * n_tiles + n_tile;
    if (enabled == 0 || !combine.on) {
      notify_landed_tile(enabled != 0, thread_idx, trace, tile, start,
                         [&] { tilelink::producer_tile_notify(sig, channel0 + tile); });
      return;
    }
    const uint32_t thread = static_cast<uint32_t>(thread_idx), lane = thread % 32;
    if (thread < 32) wait_stores_landed();
    const ChannelRange reach = moe_tile_blocks(combine.plan, combine.m, m_tile);
    const uint32_t cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    uint32_t* list = combine.lists + uint64_t(cta) * 33;
    for (uint32_t base = 0; base < reach.count; base += 32) {
      if (thread < 32) {
        const uint32_t g = reach.first + base + lane;
        bool last = false;
        if (base + lane < reach.count) {
          uint32_t seen;
          asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                       : "=r"(seen)
                       : "l"(combine.arrived + uint64_t(g) * n_tiles + n_tile)
                       : "memory");
          last = seen + 1 == __ldg(combine.expected + g);
        }
        const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, last);
        if (last) list[1 + __popc(ballot & ((1u << lane) - 1u))] = g;
        if (lane == 0) list[0] = __popc(ballot);
      }
      consumers_sync();  // the list, and the acquires' view of the items' tiles, to every thread
      const uint32_t items = list[0];
      for (uint32_t i = 0; i < items; ++i) {
        moe_epilogue_combine_item(combine, y, sig.rank, list[1 + i], n_tile, thread);
      }
      consumers_sync();  // every thread's stores (and reads of the list) before the notifies
      if (thread < items && combine.plan.world() > 1) {  // lane i of the storing warp: item i's owner
        const uint32_t g = list[1 + thread], owner = combine.plan.tokens.rank_of_channel(g);
        const uint32_t block = g - owner * combine.plan.tokens.chunks_per_rank();
        tilelink::peer_tile_notify(sig, combine.plan.recv_channel(static_cast<uint32_t>(sig.rank), block, n_tile),
                                   static_cast<int>(owner));
      }
    }
    if (trace.on() && thread == 0) {
      trace_span(trace, TraceKind::kEpilogue, tile, TraceRole::kConsumer, start, global_time_ns());
    }
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
  static_assert(Kernel::NumMMAThreads == kConsumerThreads, "the epilogue combine's barriers count 256 consumers");

 public:

  static std::string can_implement(const Sm90MoeGemmProblem& p) {
    if (p.max_tiles == 0) return "no tile rows: expected at least one token";
    if (uint64_t(p.max_tiles) * kTileM > 0x7FFFFFFFull) {
      return "expert-sorted rows = " + std::to_string(uint64_t(p.max_tiles) * kTileM) + ": expected below 2^31";
    }
    if (p.experts == 0) return "argument 'experts' = 0: expected at least one";
    if (p.swizzle != 0) {
      if (std::string e = moe_policy::check_band(static_cast<uint32_t>(p.swizzle)); !e.empty()) return e;
    }
    return Types::check(p.max_tiles * kTileM, p.n, p.k, p.k, p.sm_count, 1);
  }

  explicit Sm90MoeGemmKernelImpl(const Sm90MoeGemmProblem& p) {
    this->require(p, "moe grouped GEMM kernel");
    const uint32_t rows = p.max_tiles * kTileM;
    typename Kernel::Arguments args{};
    // The swizzle is the scheduler's band of tile rows (no padding tiles), not the base's.
    Types::set_problem(args, rows, p.n, p.k, p.a, p.k, p.b, p.d, p.order, 1);
    band_ = moe_policy::swizzle(static_cast<uint32_t>(p.swizzle), p.n, kTileN, Types::kClusterN, p.sm_count);
    args.scheduler.m_band = band_;
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
    args.epilogue.hook.y = static_cast<const uint4*>(p.d);
    args.epilogue.hook.combine = p.combine;
    launcher_.init(args, p.device, p.sm_count,
                   "moe grouped GEMM kernel, (rows, n, k, experts) = (" + std::to_string(rows) + ", " +
                       std::to_string(p.n) + ", " + std::to_string(p.k) + ", " + std::to_string(p.experts) + ")");
  }

  void run(uint64_t epoch, cudaStream_t stream) override {
    launcher_.params().mainloop.hook.sig.epoch = epoch;
    launcher_.params().epilogue.hook.sig.epoch = epoch;
    launcher_.launch(stream);
  }

  uint32_t band() const override { return band_; }

  void set_trace(const TraceView& trace) override {
    launcher_.params().mainloop.hook.trace = trace;
    launcher_.params().epilogue.hook.trace = trace;
  }

  void set_combine_operands(const float* weights, void* out) override {
    launcher_.params().epilogue.hook.combine.weights = weights;
    launcher_.params().epilogue.hook.combine.out = out;
  }

 private:
  uint32_t band_ = 1;
};

}  // namespace tilelink::detail
