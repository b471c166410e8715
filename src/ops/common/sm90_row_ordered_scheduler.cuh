// Sm90RowOrderedTileScheduler: CUTLASS 4.2's static persistent tile scheduler, rastered along N
// (all N tiles of a tile row before the next row), with every M index sent through a per-rank
// table (m_order), so that the mainloop, the epilogue and the MMA warps all see the same permuted
// tile. AG+GEMM orders tile rows by arrival; GEMM+RS by owner (other ranks' rows first).
// Select it with the GemmUniversal scheduler tag RowOrderedSchedulerTag.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

namespace tilelink::detail {

struct RowOrderedSchedulerTag {};

class Sm90RowOrderedTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  struct Arguments : Base::Arguments {
    const uint32_t* m_order = nullptr;  // [m_tiles], on the device
    uint32_t m_tiles = 0;
  };
  struct Params : Base::Params {
    const uint32_t* m_order = nullptr;
    uint32_t m_tiles = 0;
  };

  template <class ProblemShape, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShape problem_shape, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& args, void* workspace = nullptr,
                                        uint32_t epilogue_subtile = 1, uint32_t ktile_start_alignment = 1u) {
    typename Base::Arguments base_args = args;
    // Time order must be tile-row order: all N tiles of a row before the next row.
    base_args.raster_order = RasterOrderOptions::AlongN;
    Params params;
    static_cast<typename Base::Params&>(params) =
        Base::to_underlying_arguments(problem_shape, tile_shape, cluster_shape, hw_info, base_args,
                                      workspace, epilogue_subtile, ktile_start_alignment);
    params.m_order = args.m_order;
    params.m_tiles = args.m_tiles;
    return params;
  }

  CUTLASS_DEVICE explicit Sm90RowOrderedTileScheduler(Params const& params)
      : Base(params), m_order_(params.m_order), m_tiles_(params.m_tiles) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape cluster_shape) {
    return remap(Base::initial_work_tile_info(cluster_shape));
  }

  // The static scheduler never continues a tile (continue_current_work is false), so the next
  // tile is always the next linear index, remapped once.
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(remap(get_current_work()), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }

 private:
  CUTLASS_DEVICE WorkTileInfo remap(WorkTileInfo work) const {
    if (work.is_valid() && static_cast<uint32_t>(work.M_idx) < m_tiles_) {
      work.M_idx = static_cast<int32_t>(__ldg(m_order_ + work.M_idx));
    }
    return work;
  }

  const uint32_t* m_order_;
  uint32_t m_tiles_;
};

}  // namespace tilelink::detail

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<tilelink::detail::RowOrderedSchedulerTag, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = tilelink::detail::Sm90RowOrderedTileScheduler;
};
}  // namespace cutlass::gemm::kernel::detail

