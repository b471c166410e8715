// FP8 two-level accumulation with the promotion off the tensor cores' critical path: a wrapper of
// CUTLASS 4.2's sm90 FP8 main loop (MainloopSm90TmaGmmaWarpSpecializedFP8, the collective the
// builder picks for e4m3 with the cooperative or ping-pong schedule) that replaces its consumer's
// mma().
//
// Hopper's FP8 WGMMA accumulates in a ~14-bit truncating accumulator, so the sums are promoted
// into fp32 every 128 products (one 128-deep k-tile: four 32-deep WGMMAs), as DeepSeek-V3 and
// cuBLASLt do. CUTLASS's GmmaFP8Accumulation promotes with warpgroup_wait<0>: every k-tile the
// warp group waits for all of its WGMMAs, adds, and only then issues the next k-tile, so the
// tensor cores idle for a WGMMA batch's latency plus the adds on every k-tile. Here two MMA
// accumulators take turns: k-tile t's WGMMAs go into part[t % 2] while part[(t - 1) % 2] (complete
// after warpgroup_wait<1>) is added into the fp32 accumulator. The products, their promotion
// points and the order of the fp32 adds are CUTLASS's (the same bits); one more accumulator's
// registers are the cost (64 a thread at 128x128 tiles).
//
// The buffer contract is the base's (K_PIPE_MMAS = 1): mma() releases every k-tile's stage but
// the last, which the kernel's mma_tail() releases.
//
// Measured on H100s at 8192^3 (128x128x128 tiles, 2x1 cluster; bench/experiments/fp8_schedules,
// docs/PERF.md, twentieth session):
// tensor scaling 970-984 -> 884-899 us, row scaling 1011-1038 -> 965-990 us, no element
// different. The same scheme on the blockwise-scaled main loop (a wrapper of its mma() with two
// parts and their k-tiles' scales) gave 997 -> 986 us, also bit-identical: not kept, as that
// main loop is bound elsewhere.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/dispatch_policy.hpp>

#include <type_traits>

namespace tilelink::detail {

// Whether a collective's dispatch policy is CUTLASS's two-level FP8 main loop (the one this
// wrapper replays): not the fast-accumulation or blockwise-scaled ones.
template <class Policy>
struct IsSm90Fp8PromotedMainloop : std::false_type {};
template <int Stages, class ClusterShape, class KernelSchedule>
struct IsSm90Fp8PromotedMainloop<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, ClusterShape, KernelSchedule>>
    : std::true_type {};

template <class Base>
struct Sm90Fp8PipelinedPromotion : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  static_assert(Base::K_PIPE_MMAS == 1, "the release contract below is the base's with one k-tile in flight");
  static_assert(IsSm90Fp8PromotedMainloop<typename Base::DispatchPolicy>::value,
                "wraps CUTLASS's two-level FP8 main loop only");
  // The promotion happens once per k-tile, which is CUTLASS's only when its promotion interval
  // (Arguments::mma_promotion_interval, default 4) is the WGMMAs of one k-tile (counted as the
  // base's can_implement counts them).
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, typename Base::Arguments const& args) {
    const int per_k_tile = cute::size<2>(typename Base::TileShape{}) / TiledMma().template tile_size_mnk<2>();
    return Base::can_implement(problem_shape, args) && args.mma_promotion_interval == uint32_t(per_k_tile);
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "the accumulator is in registers");
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    const Layout group_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int group = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(group_layout(group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, MMA_M, MMA_K, PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA, MMA_N, MMA_K, PIPE)
    Tensor part0 = make_fragment_like(accum);
    Tensor part1 = make_fragment_like(accum);
    clear(accum);
    if (k_tile_count <= 0) return;
    PipelineState release = smem_pipe_read;

    // One k-tile's WGMMAs into `part` (zeroed by the first), committed as one batch.
    auto issue = [&](auto& part) {
      const auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      const int stage = smem_pipe_read.index();
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(part);
      ++smem_pipe_read;
    };
    // A completed part into the fp32 accumulator; its stage back to the producer unless it is the
    // last k-tile's (mma_tail's).
    auto promote = [&](auto& part, bool release_stage) {
      warpgroup_fence_operand(part);
      warpgroup_fence_operand(accum);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += part(i);
      warpgroup_fence_operand(accum);
      if (release_stage) {
        pipeline.consumer_release(release);
        ++release;
      }
    };

    issue(part0);
    int left = k_tile_count - 1;
    CUTLASS_PRAGMA_NO_UNROLL
    while (left > 0) {
      issue(part1);
      --left;
      warpgroup_wait<1>();  // part0's batch is done; part1's runs on
      promote(part0, true);
      if (left == 0) {
        warpgroup_wait<0>();
        promote(part1, false);
        return;
      }
      issue(part0);
      --left;
      warpgroup_wait<1>();
      promote(part1, true);
    }
    warpgroup_wait<0>();
    promote(part0, false);
  }
};

}  // namespace tilelink::detail
