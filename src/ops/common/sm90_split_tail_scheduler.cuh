// Sm90SplitTailTileScheduler: the row-ordered scheduler (sm90_row_ordered_scheduler.cuh) with the
// last, partial wave split along K. A persistent grid of G CTAs runs P tiles in ceil(P / G) waves;
// when P is not a multiple of G, the last wave keeps R = P mod G CTAs busy and the rest idle for a
// whole tile's time (the paper's AG+GEMM 8192 x 14336 x 4096: 27.15 waves run as 28, a cap of 0.970
// of a kernel without the tail). Here the first floor(P / G) waves run whole tiles exactly as the
// row-ordered scheduler does (its M order, bands and tile order), and each of the R tail tiles is
// cut into S = min(G / R, K tiles / min_k_tiles, max_splits) runs of consecutive K tiles, one per
// idle CTA: the tail costs about 1 / S of a tile plus the fixup.
//
// The fixup (the kernel calls it after every unit's mainloop): split s < S - 1 of a tail tile
// stores each consumer warp group's fp32 accumulators into its own workspace slot and counts
// itself on the tile's flag (release); the last split waits for the S - 1 counts (acquire), adds
// the slots to its own accumulators in split order -- a fixed order, so the sums are the same bits
// call after call -- runs the epilogue (compute_epilogue: the last split only, so an op's epilogue
// hook and notify still run once per tile) and puts the flag back to 0 for the next launch. Every
// CTA of the grid is resident (the launcher sizes it so) and a split waits only for splits that
// wait for nobody, so the waits end.
//
// Cluster mates take the same split of their tiles (they share B's multicast loads; split_tail_unit
// in mapping/split_tail.hpp, CPU-tested); the producer's per-tile wait (AG+GEMM's all-gather rows)
// runs for every unit of a tile, as for a whole tile. The workspace is the op's, per rank
// (Sm90PersistentLauncher::init): kernels run one after another on a rank's stream may share it,
// two launches of one kernel at once on two streams may not.
// Not for a grouped GEMM's m_tiles_live (the MoE kernels): the host refuses that combination.
// Select it with the GemmUniversal scheduler tag SplitTailSchedulerTag.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cutlass.h>

#include <cstdint>
#include <string>

#include "ops/common/sm90_row_ordered_scheduler.cuh"
#include "ops/common/sm90_slot_sum.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/mapping/split_tail.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {

struct SplitTailSchedulerTag {};

template <class TileShape, class ClusterShape>
class Sm90SplitTailTileScheduler : public Sm90RowOrderedTileScheduler {
  using Base = Sm90RowOrderedTileScheduler;
  static constexpr uint32_t kTileM = cute::size<0>(TileShape{}), kTileN = cute::size<1>(TileShape{});
  static constexpr uint32_t kTileK = cute::size<2>(TileShape{});
  static constexpr uint32_t kClusterSize = cute::size(ClusterShape{});
  static constexpr uint32_t kWarpGroupThreads = 128;

 public:
  struct WorkTileInfo : Base::WorkTileInfo {
    uint32_t k_start = 0;
    uint32_t k_count = 0;    // 0 with splits == 1: every K tile
    uint32_t split = 0;
    uint32_t splits = 1;
    uint32_t tail_tile = 0;  // the tail tile's slot in the workspace (splits > 1)

    CUTLASS_HOST_DEVICE static WorkTileInfo invalid_work_tile() {
      WorkTileInfo w;
      static_cast<Base::WorkTileInfo&>(w) = Base::WorkTileInfo::invalid_work_tile();
      return w;
    }
    CUTLASS_HOST_DEVICE bool is_final_split(uint32_t) const { return split + 1 == splits; }
  };

  struct Arguments : Base::Arguments {
    uint32_t max_splits = 8;   // most runs of K tiles a tail tile is cut into (< 2: no split)
    uint32_t min_k_tiles = 4;  // fewest K tiles a run keeps
  };

  struct Params : Base::Params {
    SplitTail split;
    float* partials = nullptr;  // tail x warp groups x (splits - 1) slots of one warp group's accumulators
    uint64_t* flags = nullptr;  // tail x warp groups: the splits stored so far (0 between launches)
    uint32_t warp_groups = 2;
  };

  // The decomposition the kernel will run for these arguments (both halves call it alike).
  template <class ProblemShape>
  static SplitTail decompose(ProblemShape problem_shape, cutlass::KernelHardwareInfo const& hw_info,
                             Arguments const& args) {
    auto mnkl = cute::append<4>(problem_shape, cute::Int<1>{});
    const dim3 blocks = get_tiled_cta_shape_mnl(mnkl, TileShape{}, ClusterShape{});
    const dim3 grid = Base::Params::get_grid_shape(blocks, cutlass::gemm::to_gemm_coord(ClusterShape{}), hw_info, 1,
                                                   Base::Params::RasterOrderOptions::AlongN, true);
    const uint64_t tiles = uint64_t(blocks.x) * blocks.y * blocks.z;
    const uint32_t k_tiles = static_cast<uint32_t>((cute::get<2>(mnkl) + kTileK - 1) / kTileK);
    return plan_split_tail(tiles, uint64_t(grid.x) * grid.y * grid.z, k_tiles, args.max_splits, args.min_k_tiles);
  }

  // Bytes: the tail's accumulator slots, then its flags.
  static size_t partial_bytes(SplitTail const& s, uint32_t warp_groups) {
    if (s.splits < 2) return 0;
    return size_t(s.tail) * warp_groups * (s.splits - 1) * (size_t(kTileM) * kTileN / warp_groups) * sizeof(float);
  }

  template <class ProblemShape, class ElementAccumulator>
  static size_t get_workspace_size(Arguments const& args, ProblemShape problem_shape,
                                   cutlass::KernelHardwareInfo const& hw_info,
                                   uint32_t warp_groups, const uint32_t = 1, uint32_t = 1) {
    const SplitTail s = decompose(problem_shape, hw_info, args);
    if (s.splits < 2) return 0;
    return partial_bytes(s, warp_groups) + size_t(s.tail) * warp_groups * sizeof(uint64_t);
  }

  // The launcher zeroes the workspace once when it allocates it; the last split of each tail tile
  // puts its flag back to 0, so nothing is needed per launch.
  template <class ProblemShape, class ElementAccumulator>
  static cutlass::Status initialize_workspace(Arguments const&, void*, cudaStream_t, ProblemShape,
                                              cutlass::KernelHardwareInfo const&, uint32_t, const uint32_t = 1,
                                              uint32_t = 1, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape problem_shape, TileShape tile_shape, ClusterShape cluster_shape,
                                        cutlass::KernelHardwareInfo const& hw_info, Arguments const& args,
                                        void* workspace = nullptr, uint32_t epilogue_subtile = 1,
                                        uint32_t ktile_start_alignment = 1u) {
    // What decompose() assumes, so that the host's decomposition is the one the kernel runs.
    if (args.m_tiles_live != nullptr) {
      throw InvalidArgument("Sm90SplitTailTileScheduler: m_tiles_live (a grouped GEMM's live tile rows) is not "
                            "supported; expected the row-ordered scheduler for such kernels");
    }
    if (args.max_swizzle_size > 1 || hw_info.sm_count <= 0) {
      throw InvalidArgument("Sm90SplitTailTileScheduler: max_swizzle_size = " + std::to_string(args.max_swizzle_size) +
                            ", sm_count = " + std::to_string(hw_info.sm_count) +
                            ": expected 1 (bands are m_band) and the grid's SM count");
    }
    Params params;
    static_cast<Base::Params&>(params) = Base::to_underlying_arguments(
        problem_shape, tile_shape, cluster_shape, hw_info, args, nullptr, epilogue_subtile, ktile_start_alignment);
    params.split = decompose(problem_shape, hw_info, args);
    params.warp_groups = 2;  // the cooperative kernel's consumers (the only schedule this serves)
    if (params.split.splits > 1) {
      params.partials = static_cast<float*>(workspace);
      params.flags = reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) +
                                                 partial_bytes(params.split, params.warp_groups));
    }
    return params;
  }

  CUTLASS_DEVICE explicit Sm90SplitTailTileScheduler(Params const& params) : Base(params), split_(params.split) {
#if defined(__CUDA_ARCH__)
    idx_ = blockIdx.x + blockIdx.y * gridDim.x;  // AlongN, as the base
    grid_ = gridDim.x * gridDim.y * gridDim.z;
#endif
  }

  template <class Cluster>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(Cluster) {
    return work_at(idx_);
  }
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    idx_ += grid_;
    return cute::make_tuple(work_at(idx_), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }
  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t advance_count = 1) const {
    return idx_ + advance_count * grid_ >= split_.full + split_.tail * split_.splits;
  }

  template <class ProblemShapeMNKL, class BlockShape>
  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_count(WorkTileInfo const& work, ProblemShapeMNKL problem_shape,
                                                            BlockShape) {
    if (work.splits > 1) return work.k_count;
    return static_cast<uint32_t>((cute::get<2>(problem_shape) + kTileK - 1) / kTileK);
  }
  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_start(WorkTileInfo const& work) { return work.k_start; }

  CUTLASS_HOST_DEVICE static bool compute_epilogue(WorkTileInfo const& work, Params const&) {
    return work.split + 1 == work.splits;
  }
  CUTLASS_HOST_DEVICE static bool compute_epilogue(WorkTileInfo const& work) { return work.split + 1 == work.splits; }

  // After each unit's mainloop, by each consumer warp group (`warp_group` of `warp_groups`) with its
  // accumulators: nothing for a whole tile; see the head of the file for a tail tile's splits.
  template <class FrgTensorC>
  CUTLASS_DEVICE static void fixup(Params const& params, WorkTileInfo const& work, FrgTensorC& accumulators,
                                   uint32_t warp_groups, uint32_t warp_group) {
    if (work.splits < 2) return;
    constexpr int kElems = decltype(cute::size(accumulators))::value;
    static_assert(kElems * kWarpGroupThreads * 2 == kTileM * kTileN,
                  "each of the two consumer warp groups holds half of the tile");
    const size_t slot_floats = size_t(kElems) * kWarpGroupThreads;
    const size_t tile_wg = size_t(work.tail_tile) * warp_groups + warp_group;
    sum_runs_through_slots(params.partials + tile_wg * (work.splits - 1) * slot_floats, params.flags + tile_wg,
                           accumulators, work.split, work.splits,
                           static_cast<cutlass::arch::ReservedNamedBarriers>(
                               static_cast<uint32_t>(cutlass::arch::ReservedNamedBarriers::StreamkBarrier0) + warp_group));
  }

 private:
  // The unit at CTA position `idx`: a whole tile (the row-ordered scheduler's), a tail tile's run
  // of K tiles, or none.
  CUTLASS_DEVICE WorkTileInfo work_at(uint32_t idx) const {
    const SplitTail& s = split_;
    WorkTileInfo w;
    if (idx < s.full) {
      static_cast<Base::WorkTileInfo&>(w) = remap(band(get_current_work_for_linear_idx(idx)));
      return w;
    }
    const TailUnit unit = split_tail_unit(s, idx, kClusterSize);
    if (!unit.valid) return WorkTileInfo::invalid_work_tile();
    // The base maps `linear` as it maps a whole tile's position: the cluster from the position, the
    // CTA's M offset from its place in the cluster, its N offset from the position's parity.
    static_cast<Base::WorkTileInfo&>(w) = remap(band(get_current_work_for_linear_idx(unit.linear)));
    w.split = unit.split;
    w.splits = s.splits;
    w.k_start = split_k_start(s, unit.split);
    w.k_count = split_k_start(s, unit.split + 1) - w.k_start;
    w.tail_tile = unit.slot;
    return w;
  }

  SplitTail split_;  // the decomposition alone: the rest of Params is the base's
  uint32_t idx_ = 0, grid_ = 1;  // this CTA's position now, and the grid's CTAs
};

}  // namespace tilelink::detail

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<tilelink::detail::SplitTailSchedulerTag, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = tilelink::detail::Sm90SplitTailTileScheduler<TileShape, ClusterShape>;
};
}  // namespace cutlass::gemm::kernel::detail
