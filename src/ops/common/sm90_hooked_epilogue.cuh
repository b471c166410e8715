// An sm90 epilogue wrapper: Base = the builder's TMA epilogue; Hook = what an op adds around each
// tile's store, carried in the epilogue's Arguments and Params. The hook supplies
//   problem(shape) / coord(tile)   the problem and tile coordinate Base::store sees (an op may view
//                                  the GEMM as a batch, e.g. GEMM+RS's owners);
//   before()                       a value taken before Base::store (e.g. a timestamp);
//   after(tile, thread_idx, v)     run by every consumer thread after Base::store of `tile`;
// and may supply
//   accumulate(tile, acc, thread_idx) -> bool
//                                  run by every consumer thread after the tile's mainloop, first,
//                                  with its accumulators (which it may change); false: this tile is
//                                  not stored here, and neither prepare, Base::store nor after run
//                                  (e.g. a K slice handed to the slice that stores the tile's sum);
//   prepare(thread_idx)            run by every consumer thread before Base::store of each tile
//                                  (after the tile's mainloop; e.g. a deferred notify);
//   tail()                         run by every consumer thread after the kernel's last tile
//                                  (Base::store_tail).
// Ops use store_landed_then to notify a finished tile once its TMA stores have been written.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include <type_traits>
#include <utility>

#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

// Whether a hook supplies prepare(int) / tail() (see the top).
template <class H, class = void>
struct HookHasPrepare : std::false_type {};
template <class H>
struct HookHasPrepare<H, std::void_t<decltype(std::declval<H&>().prepare(0))>> : std::true_type {};
template <class H, class Coord, class Acc, class = void>
struct HookHasAccumulate : std::false_type {};
template <class H, class Coord, class Acc>
struct HookHasAccumulate<H, Coord, Acc,
                         std::void_t<decltype(std::declval<H&>().accumulate(std::declval<Coord const&>(),
                                                                            std::declval<Acc&>(), 0))>>
    : std::true_type {};
template <class H, class = void>
struct HookHasTail : std::false_type {};
template <class H>
struct HookHasTail<H, std::void_t<decltype(std::declval<H&>().tail())>> : std::true_type {};

template <class Base, class Hook>
struct Sm90HookedEpilogue : Base {
  struct Arguments : Base::Arguments {
    Hook hook;
  };
  struct Params : Base::Params {
    Hook hook;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                                  void* workspace) {
    return Params{Base::to_underlying_arguments(args.hook.problem(problem_shape), args, workspace), args.hook};
  }

  CUTLASS_DEVICE Sm90HookedEpilogue(Params const& params, typename Base::TensorStorage& shared)
      : Base(params, shared), hook_(params.hook) {}

  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(typename Base::LoadPipeline load_pipeline,
                            typename Base::LoadPipelineState load_pipe_consumer_state,
                            typename Base::StorePipeline store_pipeline,
                            typename Base::StorePipelineState store_pipe_producer_state,
                            ProblemShapeMNKL problem_shape_mnkl, TileShapeMNK tile_shape_mnk,
                            TileCoordMNKL tile_coord_mnkl, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, typename Base::TensorStorage& shared_tensors,
                            int subtile_idx = -1) {
    if constexpr (HookHasAccumulate<Hook, TileCoordMNKL, cute::Tensor<AccEngine, AccLayout>>::value) {
      // Nothing stored: the pipelines' states stay where they are (no store stage used, no source
      // loaded -- a hook that skips tiles belongs to an epilogue without C).
      if (!hook_.accumulate(tile_coord_mnkl, accumulators, thread_idx)) {
        return cute::make_tuple(load_pipe_consumer_state, store_pipe_producer_state);
      }
    }
    const auto before = hook_.before();
    if constexpr (HookHasPrepare<Hook>::value) hook_.prepare(thread_idx);
    auto next = Base::store(load_pipeline, load_pipe_consumer_state, store_pipeline, store_pipe_producer_state,
                            hook_.problem(problem_shape_mnkl), tile_shape_mnk, hook_.coord(tile_coord_mnkl),
                            accumulators, tiled_mma, thread_idx, shared_tensors, subtile_idx);
    hook_.after(tile_coord_mnkl, thread_idx, before);
    return next;
  }

  // After the last tile: Base's wait for its stores' shared-memory reads, then the hook's tail.
  CUTLASS_DEVICE auto store_tail(typename Base::LoadPipeline load_pipeline,
                                 typename Base::LoadPipelineState load_pipe_consumer_state,
                                 typename Base::StorePipeline store_pipeline,
                                 typename Base::StorePipelineState store_pipe_producer_state) {
    auto next = Base::store_tail(load_pipeline, load_pipe_consumer_state, store_pipeline, store_pipe_producer_state);
    if constexpr (HookHasTail<Hook>::value) hook_.tail();
    return next;
  }

 private:
  Hook hook_;
};

// After Base::store of a tile: its TMA stores are issued by the warp with thread_idx / 32 == 0,
// every lane at PTX level; each lane of that warp waits for its own bulk groups to be written
// (cp.async.bulk.wait_group 0: CUTLASS itself only waits for the shared-memory reads) and fences
// the async proxy; then the warp meets, so that a release by any of its lanes covers the tile's
// data. Call from that warp only.
CUTLASS_DEVICE void wait_stores_landed() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async.global;" ::: "memory");
  __syncwarp();
}

// wait_stores_landed, then thread 0 runs notify() -- a release that covers the tile's data.
template <class Notify>
CUTLASS_DEVICE void store_landed_then(int thread_idx, Notify&& notify) {
  if (thread_idx >= cutlass::NumThreadsPerWarp) return;
  wait_stores_landed();
  if (thread_idx == 0) notify();
  __syncwarp();
}

// The epilogue's 256 consumer threads (both warp groups of the cooperative kernel) meet on the
// first user barrier: NamedBarrier::sync's uint32_t form counts from the reserved ones (user id 0
// is hardware barrier 8, after CUTLASS's own), so it takes 0, not FirstUserBarrier (16 is past the
// hardware's 16 barriers: ptxas wrapped it to barrier 0, __syncthreads'). For hooks that work
// with every consumer thread after a tile (GEMM+RS's epilogue sums, MoE's epilogue combine).
// CUTLASS's bar.sync has no memory clobber: the empty asm statements keep the compiler from moving
// this thread's loads and stores across the barrier.
constexpr uint32_t kConsumersBarrier = 0;
constexpr uint32_t kConsumerThreads = 256;
CUTLASS_DEVICE void consumers_sync() {
  asm volatile("" ::: "memory");
  cutlass::arch::NamedBarrier::sync(kConsumerThreads, kConsumersBarrier);
  asm volatile("" ::: "memory");
}

// The end of a notifying hook's after(): with `enabled`, once the tile's stores have landed, thread
// 0 runs notify() (traced as the tile's kNotify); then thread 0 traces the tile's whole epilogue
// from `start` (both only with `trace` on). `traced_tile` names the tile in the trace.
template <class Notify>
CUTLASS_DEVICE void notify_landed_tile(bool enabled, int thread_idx, const TraceView& trace, uint32_t traced_tile,
                                       uint64_t start, Notify&& notify) {
  if (enabled) {
    store_landed_then(thread_idx, [&] {
      const uint64_t t_notify = trace_start(trace);
      notify();
      trace_span(trace, TraceKind::kNotify, traced_tile, TraceRole::kConsumer, t_notify, global_time_ns());
    });
  }
  if (trace.on() && thread_idx == 0) {
    trace_span(trace, TraceKind::kEpilogue, traced_tile, TraceRole::kConsumer, start, global_time_ns());
  }
}

// The hook part of a plain GEMM: the problem and coordinates as they are, nothing before.
struct PlainEpilogueView {
  template <class ProblemShape>
  CUTLASS_HOST_DEVICE ProblemShape problem(ProblemShape const& p) const {
    return p;
  }
  template <class TileCoord>
  CUTLASS_HOST_DEVICE TileCoord coord(TileCoord const& c) const {
    return c;
  }
  CUTLASS_DEVICE int before() const { return 0; }
};

}  // namespace tilelink::detail
