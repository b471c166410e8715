// CUTLASS 4.2 sm90 assembly of the fused AG+GEMM kernel (see docs/design/ag_gemm_kernel.md for
// the reading of CUTLASS this relies on). Included only by the one-configuration .cu files.
//
//  - Sm90AgGemmMainloop<Base>: Base = the builder's TMA + GMMA warp-specialized mainloop. Its
//    load() first waits, in the TMA-issuing lane of the producer warp, on the all-gather channels
//    that cover the tile's A rows (consumer_tile_wait: acquire, then fence.proxy.async so that
//    the TMA loads see the rows), then runs Base::load unchanged. The producer holds no pipeline
//    stage while it waits: the consumers finish the previous tile meanwhile.
//  - Sm90AgGemmTileScheduler: the static persistent scheduler, rastered along N (all N tiles of a
//    tile row before the next row) with every M index sent through the rank's m_order table, so
//    the mainloop, the epilogue and the MMA warps all see the same permuted tile.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <string>

#include "ops/ag_gemm/sm90_ag_gemm_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"

namespace tilelink::detail {

// What the producer warp waits on; travels in the mainloop's Params.
struct AgGemmWait {
  AllGatherPlan plan;
  SignalView sig;
  uint32_t m = 0;        // rows of A
  uint32_t n_tiles = 0;  // names a tile (m_tile * n_tiles + n_tile) in a timeout report
  uint32_t enabled = 0;  // 0: plain GEMM
};

// One thread's view of consumer_tile_wait, for all_gather_wait_rows (no block barriers: the
// other warps of a warp-specialized CTA never reach one).
struct ThreadWaitCtx {
  TL_DEVICE void consumer_tile_wait(const SignalView& sig, uint32_t channel, uint32_t count,
                                    uint32_t arrivals, int32_t tile) const {
    tilelink::consumer_tile_wait(sig, channel, count, arrivals, tile);
  }
};

template <class Base>
struct Sm90AgGemmMainloop : Base {
  struct Arguments : Base::Arguments {
    AgGemmWait ag;
  };
  struct Params : Base::Params {
    AgGemmWait ag;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    return Params{Base::to_underlying_arguments(problem_shape, args, workspace), args.ag};
  }

  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int thread_idx,
                           uint32_t block_rank_in_cluster, typename Base::TensorStorage& shared_tensors) {
    if (params.ag.enabled) {
      constexpr uint32_t kTileM = cute::size<0>(typename Base::TileShape{});
      const uint32_t m_tile = static_cast<uint32_t>(cute::get<0>(blk_coord));
      const uint32_t row0 = m_tile * kTileM;
      // Rows past M (the padding tile of an odd tile-row count) are zero-filled by TMA.
      if (cute::elect_one_sync() && row0 < params.ag.m) {
        const uint32_t rows = params.ag.m - row0 < kTileM ? params.ag.m - row0 : kTileM;
        const int32_t tile = static_cast<int32_t>(m_tile * params.ag.n_tiles +
                                                  static_cast<uint32_t>(cute::get<1>(blk_coord)));
        ThreadWaitCtx ctx;
        all_gather_wait_rows(ctx, params.ag.plan, params.ag.sig, row0, rows, tile);
      }
      // The acquire and proxy fence ran in the lane Base::load elects for its TMA copies; every
      // lane repeats the proxy fence after the warp barrier so that the order holds whichever
      // lane issues them.
      __syncwarp();
      asm volatile("fence.proxy.async.global;" ::: "memory");
    }
    Base::load(params, pipeline, smem_pipe_write, load_inputs, blk_coord, k_tile_iter, k_tile_count,
               thread_idx, block_rank_in_cluster, shared_tensors);
  }
};

struct AgGemmSchedulerTag {};

class Sm90AgGemmTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
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

  CUTLASS_DEVICE explicit Sm90AgGemmTileScheduler(Params const& params)
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
struct TileSchedulerSelector<tilelink::detail::AgGemmSchedulerTag, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = tilelink::detail::Sm90AgGemmTileScheduler;
};
}  // namespace cutlass::gemm::kernel::detail

namespace tilelink::detail {

// The kernel type for one configuration: bf16 A (row-major) and B (N x K, K contiguous), fp32
// accumulate, bf16 D (row-major), no C operand.
template <class TileShape, class ClusterShape>
struct Sm90AgGemmTypes {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = cutlass::bfloat16_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;  // (N, K) view with K contiguous
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlign = 8;  // 16 bytes of bf16: TMA's alignment

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, void, LayoutD, kAlign,
      ElementD, LayoutD, kAlign, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

  using BaseMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB, LayoutB,
      kAlign, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = Sm90AgGemmMainloop<BaseMainloop>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      CollectiveEpilogue, AgGemmSchedulerTag>;
  static_assert(std::is_same_v<typename Kernel::TileScheduler, Sm90AgGemmTileScheduler>);
};

template <class TileShape, class ClusterShape>
class Sm90AgGemmKernelImpl final : public Sm90AgGemmKernel {
  using Types = Sm90AgGemmTypes<TileShape, ClusterShape>;
  using Kernel = typename Types::Kernel;

 public:
  static constexpr uint32_t kTileM = cute::size<0>(TileShape{});
  static constexpr uint32_t kTileN = cute::size<1>(TileShape{});
  static constexpr uint32_t kClusterM = cute::size<0>(ClusterShape{});
  static constexpr uint32_t kClusterN = cute::size<1>(ClusterShape{});

  static std::string can_implement(const Sm90AgGemmProblem& p) {
    if (p.m == 0 || p.n == 0 || p.k == 0) {
      return "problem (m, n, k) = (" + std::to_string(p.m) + ", " + std::to_string(p.n) + ", " +
             std::to_string(p.k) + "): expected every extent > 0";
    }
    if (p.k % Types::kAlign != 0) {
      return "argument 'k' = " + std::to_string(p.k) + ": expected a multiple of 8 (TMA needs 16-byte rows of A and B)";
    }
    if (p.n % Types::kAlign != 0) {
      return "argument 'n' = " + std::to_string(p.n) + ": expected a multiple of 8 (TMA needs 16-byte rows of C)";
    }
    if (p.lda < p.k || p.lda % Types::kAlign != 0) {
      return "A row pitch = " + std::to_string(p.lda) + " elements: expected >= k and a multiple of 8";
    }
    if (p.sm_count < static_cast<int>(kClusterM * kClusterN)) {
      return "GEMM SM count = " + std::to_string(p.sm_count) + ": expected at least one " +
             std::to_string(kClusterM) + "x" + std::to_string(kClusterN) + " cluster";
    }
    if (p.swizzle != 1 && p.swizzle != 2 && p.swizzle != 4 && p.swizzle != 8) {
      return "argument 'config.swizzle' = " + std::to_string(p.swizzle) + ": expected 0 (automatic), 1, 2, 4 or 8";
    }
    return "";
  }

  static std::unique_ptr<Sm90AgGemmKernel> make(const Sm90AgGemmProblem& p) {
    return std::make_unique<Sm90AgGemmKernelImpl>(p);
  }

  static void preload() {
    TL_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Kernel::SharedStorageSize)));
  }

  explicit Sm90AgGemmKernelImpl(const Sm90AgGemmProblem& p) {
    const std::string why = can_implement(p);
    if (!why.empty()) throw InvalidArgument("ag_gemm kernel: " + why);
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);

    typename Kernel::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop.ptr_A = static_cast<const typename Types::ElementA*>(p.a);
    args.mainloop.dA = cute::make_stride(static_cast<int64_t>(p.lda), cute::Int<1>{}, int64_t(0));
    args.mainloop.ptr_B = static_cast<const typename Types::ElementB*>(p.b);
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(p.k), cute::Int<1>{}, int64_t(0));
    args.mainloop.ag.plan = p.plan;
    args.mainloop.ag.sig = p.sig;
    args.mainloop.ag.m = p.m;
    args.mainloop.ag.n_tiles = (p.n + kTileN - 1) / kTileN;
    args.mainloop.ag.enabled = p.wait ? 1u : 0u;
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<typename Types::ElementD*>(p.c);
    args.epilogue.dD = cute::make_stride(static_cast<int64_t>(p.n), cute::Int<1>{}, int64_t(0));
    args.epilogue.dC = args.epilogue.dD;
    args.scheduler.max_swizzle_size = p.swizzle;
    args.scheduler.m_order = p.m_order;
    args.scheduler.m_tiles = (p.m + kTileM - 1) / kTileM;

    TL_CUDA_CHECK(cudaSetDevice(p.device));
    // The grid: sm_count CTAs as whole clusters, no more than can be resident at once.
    int max_clusters = 0;
    {
      cudaLaunchAttribute attr{};
      const cudaLaunchConfig_t cfg = launch_config(dim3(kClusterM, kClusterN, 1), nullptr, attr);  // one cluster
      preload();
      TL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, cutlass::device_kernel<Kernel>, &cfg));
    }
    const int clusters = std::min(p.sm_count / static_cast<int>(kClusterM * kClusterN), max_clusters);
    if (clusters < 1) {
      throw InvalidArgument("ag_gemm kernel: no " + std::to_string(kClusterM) + "x" + std::to_string(kClusterN) +
                            " cluster of this kernel fits on device " + std::to_string(p.device));
    }
    args.hw_info.device_id = p.device;
    args.hw_info.sm_count = clusters * static_cast<int>(kClusterM * kClusterN);
    args.hw_info.max_active_clusters = clusters;

    if (!Kernel::can_implement(args)) {
      throw InvalidArgument("ag_gemm kernel: CUTLASS refused the problem (m, n, k) = (" + std::to_string(m) +
                            ", " + std::to_string(n) + ", " + std::to_string(k) + ")");
    }
    if (Kernel::get_workspace_size(args) != 0) {
      throw InvalidArgument("ag_gemm kernel: this configuration needs a CUTLASS workspace, which it does not provide");
    }
    params_ = Kernel::to_underlying_arguments(args, nullptr);
    grid_ = Kernel::get_grid_shape(params_);
  }

  void run(uint64_t epoch, cudaStream_t stream) override {
    params_.mainloop.ag.sig.epoch = epoch;
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = launch_config(grid_, stream, attr);
    TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cutlass::device_kernel<Kernel>, params_));
  }

  dim3 grid() const override { return grid_; }
  int ctas() const override { return static_cast<int>(grid_.x * grid_.y * grid_.z); }

  static Sm90AgGemmConfigInfo info(const char* name) {
    return {name, kTileM, kTileN, static_cast<uint32_t>(cute::size<2>(TileShape{})), kClusterM, kClusterN,
            &can_implement, &make, &preload};
  }

 private:
  // A cluster launch of `grid` CTAs; `attr` (the cluster shape) must outlive the config.
  static cudaLaunchConfig_t launch_config(dim3 grid, cudaStream_t stream, cudaLaunchAttribute& attr) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kClusterM;
    attr.val.clusterDim.y = kClusterN;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = Kernel::get_block_shape();
    cfg.dynamicSmemBytes = Kernel::SharedStorageSize;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cfg;
  }

  typename Kernel::Params params_{};
  dim3 grid_{};
};

}  // namespace tilelink::detail
