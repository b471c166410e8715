// An sm90 mainloop wrapper, the mainloop's counterpart of Sm90HookedEpilogue: Base = the
// builder's TMA + GMMA warp-specialized mainloop; Hook = what an op's producer warp waits on
// before a tile's loads, carried in the mainloop's Arguments and Params as `hook`. The hook
// supplies (all device functions; every lane of the producer warp calls them)
//   enabled, n_tiles, trace      whether to wait at all; tiles along N (names a tile,
//                                m_tile * n_tiles + n_tile, in traces and timeout reports);
//                                the producer's trace (each tile's wait and loads)
//   wait<kTileM>(m, n)           the wait for tile (m, n): the op elects the lane that acquires
//   load_coord(blk_coord)        the coordinate Base::load sees (an op may pick the batch, e.g.
//                                MoE's expert)
// load() runs the wait, then the warp barrier and the proxy fence in every lane (whichever lane
// Base::load elects for its TMA copies then issues them after the acquire), then Base::load. The
// producer holds no pipeline stage while it waits: the consumers finish the previous tile
// meanwhile. An op that views the problem differently (MoE's B over all experts) overrides
// to_underlying_arguments (starting from this one's) and load_init (from Base's).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include "ops/common/cute_views.hpp"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

template <class Base, class Hook>
struct Sm90HookedMainloop : Base {
  static constexpr uint32_t kTileM = cute::size<0>(typename Base::TileShape{});

  struct Arguments : Base::Arguments {
    Hook hook;
  };
  struct Params : Base::Params {
    Hook hook;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    return Params{Base::to_underlying_arguments(problem_shape, args, workspace), args.hook};
  }

  // LoadInputs: A and B (TMA), and with block scaling their scales too.
  template <class LoadInputs, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState smem_pipe_write, LoadInputs const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, typename Base::TensorStorage& shared_tensors) {
    const Hook& hook = params.hook;
    const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(blk_coord));
    const uint32_t n_tile = static_cast<uint32_t>(cute::get<1>(blk_coord));
    const uint32_t traced_tile = m_tile * hook.n_tiles + n_tile;
    const uint64_t t_wait = trace_start(hook.trace);
    wait_for_tile(hook, m_tile, n_tile);
    const auto coord = hook.load_coord(blk_coord);
    const uint64_t t_load = trace_start(hook.trace);
    Base::load(params, pipeline, smem_pipe_write, load_inputs, coord, k_tile_iter, k_tile_count, thread_idx,
               block_rank_in_cluster, shared_tensors);
    // A cluster's padding tile along N (n_tile >= n_tiles, kernels clustered along N) records
    // nothing: its number would be the next tile row's first tile.
    if (hook.trace.on() && n_tile < hook.n_tiles && cute::elect_one_sync()) {
      trace_span(hook.trace, TraceKind::kWait, traced_tile, TraceRole::kProducer, t_wait, t_load);
      trace_span(hook.trace, TraceKind::kLoad, traced_tile, TraceRole::kProducer, t_load, global_time_ns());
    }
  }

  // The second producer warp of a main loop that has one (block-scaled FP8: the scales, loaded
  // with cp.async from the A rows' tails) waits for the same tile first.
  template <class LoadInputs, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load_auxiliary(Params const& params, typename Base::MainloopPipeline pipeline,
                                     typename Base::PipelineState smem_pipe_write, LoadInputs const& load_inputs,
                                     BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count,
                                     int thread_idx, uint32_t block_rank_in_cluster,
                                     typename Base::TensorStorage& shared_tensors) {
    wait_for_tile(params.hook, static_cast<uint32_t>(cute::get<0>(blk_coord)),
                  static_cast<uint32_t>(cute::get<1>(blk_coord)));
    Base::load_auxiliary(params, pipeline, smem_pipe_write, load_inputs, params.hook.load_coord(blk_coord),
                         k_tile_iter, k_tile_count, thread_idx, block_rank_in_cluster, shared_tensors);
  }

 protected:
  CUTLASS_DEVICE static void wait_for_tile(const Hook& hook, uint32_t m_tile, uint32_t n_tile) {
    if (hook.enabled) {
      hook.template wait<kTileM>(m_tile, n_tile);
      __syncwarp();
      asm volatile("fence.proxy.async.global;" ::: "memory");
    }
  }
};

}  // namespace tilelink::detail
