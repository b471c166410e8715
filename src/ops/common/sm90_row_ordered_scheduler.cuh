// Sm90RowOrderedTileScheduler: CUTLASS 4.2's static persistent tile scheduler, rastered along N
// (all N tiles of a tile row before the next row), with every M index sent through a per-rank
// table (m_order), so that the mainloop, the epilogue and the MMA warps all see the same permuted
// tile. AG+GEMM orders tile rows by arrival; GEMM+RS by owner (other ranks' rows first).
// With m_tiles_live (a count on the device, written before the kernel starts) only the first
// *m_tiles_live entries of m_order are tiles: the MoE grouped GEMM is launched for the most tile
// rows a routing can need and skips the positions past the routing's actual count (clusters of
// one tile row only: the CTAs of a cluster must skip together). Without it, a position past
// m_tiles is the padding tile of a cluster whose tile rows overrun M: kept, not remapped.
// With m_band > 1 (cluster rows per band), the linear order walks bands of that many cluster
// rows column by column -- every cluster row of the band at one cluster column, then the next
// column -- the last band holding the rows left: a wave then reads its B tiles once for the
// band's rows instead of re-reading all of B for each row. Unlike the base's swizzle (which rounds
// both extents up to the swizzle and computes the padding tiles), it adds no work; the bands cut
// the order positions (before m_order), so time order stays m_order's band by band.
// Select it with the GemmUniversal scheduler tag RowOrderedSchedulerTag.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "tilelink/mapping/mapping.hpp"

namespace tilelink::detail {

struct RowOrderedSchedulerTag {};

class Sm90RowOrderedTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  struct Arguments : Base::Arguments {
    const uint32_t* m_order = nullptr;  // [m_tiles], on the device
    uint32_t m_tiles = 0;
    const uint32_t* m_tiles_live = nullptr;  // optional, on the device: tile rows actually present
    uint32_t m_band = 1;                     // cluster rows per band (1: row by row)
  };
  struct Params : Base::Params {
    const uint32_t* m_order = nullptr;
    uint32_t m_tiles = 0;
    const uint32_t* m_tiles_live = nullptr;
    uint32_t m_band = 1;
    uint32_t n_clusters = 1;  // cluster columns (N tiles rounded up to whole clusters)
    uint32_t cluster_m = 1, cluster_n = 1;
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
    params.m_band = args.m_band > 1 ? args.m_band : 1u;
    params.cluster_m = static_cast<uint32_t>(cute::size<0>(cluster_shape));
    params.cluster_n = static_cast<uint32_t>(cute::size<1>(cluster_shape));
    const uint32_t n_tiles = (static_cast<uint32_t>(cute::get<1>(problem_shape)) +
                              static_cast<uint32_t>(cute::size<1>(tile_shape)) - 1) /
                             static_cast<uint32_t>(cute::size<1>(tile_shape));
    params.n_clusters = (n_tiles + params.cluster_n - 1) / params.cluster_n;
    return params;
  }

  CUTLASS_DEVICE explicit Sm90RowOrderedTileScheduler(Params const& params)
      : Base(params),
        m_order_(params.m_order),
        m_tiles_(params.m_tiles_live != nullptr ? min(params.m_tiles, __ldg(params.m_tiles_live)) : params.m_tiles),
        skip_(params.m_tiles_live != nullptr),
        m_band_(params.m_band),
        n_clusters_(params.n_clusters),
        cluster_m_(params.cluster_m),
        cluster_n_(params.cluster_n) {}

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape cluster_shape) {
    return remap(band(skip_absent(Base::initial_work_tile_info(cluster_shape))));
  }

  // The static scheduler never continues a tile (continue_current_work is false), so the next
  // tile is always the next linear index (past absent rows), remapped once.
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(remap(band(skip_absent(get_current_work()))), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }

 protected:  // Sm90SplitTailTileScheduler (sm90_split_tail_scheduler.cuh) maps its whole tiles through these
  // Every warp of the CTA walks the same linear indices, so all skip the same positions. With a
  // swizzle band, absent rows can come before present ones in time: skip, never stop.
  CUTLASS_DEVICE WorkTileInfo skip_absent(WorkTileInfo work) {
    while (skip_ && work.is_valid() && static_cast<uint32_t>(work.M_idx) >= m_tiles_) {
      advance_to_next_work();
      work = get_current_work();
    }
    return work;
  }

  // The base's tile (row by row: linear cluster c = cluster row * n_clusters + cluster column)
  // moved to position c of the banded order; the CTA keeps its place within its cluster.
  CUTLASS_DEVICE WorkTileInfo band(WorkTileInfo work) const {
    const uint32_t rows = (m_tiles_ + cluster_m_ - 1) / cluster_m_;  // cluster rows present
    const uint32_t row = static_cast<uint32_t>(work.M_idx) / cluster_m_;
    if (m_band_ <= 1 || !work.is_valid() || row >= rows) return work;
    const GridCell cell = banded_cell(uint64_t(row) * n_clusters_ + static_cast<uint32_t>(work.N_idx) / cluster_n_,
                                      rows, n_clusters_, m_band_);
    work.M_idx = static_cast<int32_t>(cell.row * cluster_m_ + static_cast<uint32_t>(work.M_idx) % cluster_m_);
    work.N_idx = static_cast<int32_t>(cell.col * cluster_n_ + static_cast<uint32_t>(work.N_idx) % cluster_n_);
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
  uint32_t m_band_, n_clusters_, cluster_m_, cluster_n_;
};

}  // namespace tilelink::detail

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<tilelink::detail::RowOrderedSchedulerTag, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = tilelink::detail::Sm90RowOrderedTileScheduler;
};
}  // namespace cutlass::gemm::kernel::detail

