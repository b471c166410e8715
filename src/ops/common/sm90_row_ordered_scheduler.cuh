// Sm90RowOrderedTileScheduler: CUTLASS 4.2's static persistent tile scheduler, rastered along N
// (all N tiles of a tile row before the next row), with every M index sent through a per-rank
// table (m_order), so that the mainloop, the epilogue and the MMA warps all see the same permuted
// tile. AG+GEMM orders tile rows by arrival; GEMM+RS by owner (other ranks' rows first).
// With m_tiles_live (a count on the device, written before the kernel starts) only the first
// *m_tiles_live entries of m_order are tiles: the MoE grouped GEMM is launched for the most tile
// rows a routing can need and skips the positions past the routing's actual count (clusters of
// one tile row only: the CTAs of a cluster must skip together). Without it, a position past
// m_tiles is the padding tile of a cluster whose tile rows overrun M: kept, not remapped.
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
    const uint32_t* m_tiles_live = nullptr;  // optional, on the device: tile rows actually present
  };
  struct Params : Base::Params {
    const uint32_t* m_order = nullptr;
    uint32_t m_tiles = 0;
    const uint32_t* m_tiles_live = nullptr;
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
    params.m_tiles_live = args.m_tiles_live;
    return params;
  }

  CUTLASS_DEVICE explicit Sm90RowOrderedTileScheduler(Params const& params)
      : Base(params),
        m_order_(params.m_order),
        m_tiles_(params.m_tiles_live != nullptr ? min(params.m_tiles, __ldg(params.m_tiles_live)) : params.m_tiles),
        skip_(params.m_tiles_live != nullptr) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape cluster_shape) {
    return remap(skip_absent(Base::initial_work_tile_info(cluster_shape)));
  }

  // The static scheduler never continues a tile (continue_current_work is false), so the next
  // tile is always the next linear index (past absent rows), remapped once.
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(remap(skip_absent(get_current_work())), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }

 private:
  // Every warp of the CTA walks the same linear indices, so all skip the same positions. With a
  // swizzle band, absent rows can come before present ones in time: skip, never stop.
  CUTLASS_DEVICE WorkTileInfo skip_absent(WorkTileInfo work) {
    while (skip_ && work.is_valid() && static_cast<uint32_t>(work.M_idx) >= m_tiles_) {
      advance_to_next_work();
      work = get_current_work();
    }
    return work;
  }

  CUTLASS_DEVICE WorkTileInfo remap(WorkTileInfo work) const {
    if (work.is_valid() && static_cast<uint32_t>(work.M_idx) < m_tiles_) {
      work.M_idx = static_cast<int32_t>(__ldg(m_order_ + work.M_idx));
    }
    return work;
  }

  const uint32_t* m_order_;
  uint32_t m_tiles_;
  bool skip_;
};

}  // namespace tilelink::detail

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<tilelink::detail::RowOrderedSchedulerTag, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = tilelink::detail::Sm90RowOrderedTileScheduler;
};
}  // namespace cutlass::gemm::kernel::detail

