// The GEMM both fused ops are built on: bf16 A (M x K, row-major) times bf16 B given as N x K
// (K contiguous, the nn.Linear weight), fp32 accumulation, bf16 D (M x N, row-major), no C; CUTLASS
// 4.2's sm90 cooperative warp-specialized TMA + WGMMA collectives from the builders. An op wraps
// the builder's mainloop and/or epilogue (MainloopWrap<Base>, EpilogueWrap<Base>) and the kernel
// uses the row-ordered tile scheduler.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <cstdint>
#include <type_traits>

#include "ops/common/sm90_row_ordered_scheduler.cuh"

namespace tilelink::detail {

template <class Base>
using NoWrap = Base;

template <class TileShape, class ClusterShape, template <class> class MainloopWrap = NoWrap,
          template <class> class EpilogueWrap = NoWrap>
struct Sm90Bf16TnGemm {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = cutlass::bfloat16_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;  // the (N, K) view, K contiguous
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlign = 8;  // 16 bytes of bf16: TMA's alignment

  using Epilogue = EpilogueWrap<typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, void, LayoutD, kAlign, ElementD,
      LayoutD, kAlign, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp>;

  using Mainloop = MainloopWrap<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB, LayoutB, kAlign,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      RowOrderedSchedulerTag>;
  static_assert(std::is_same_v<typename Kernel::TileScheduler, Sm90RowOrderedTileScheduler>);

  // The problem, operands and tile order common to both ops; the op adds its own fields.
  static void set_problem(typename Kernel::Arguments& args, uint32_t m, uint32_t n, uint32_t k, const void* a,
                          uint64_t lda, const void* b, void* d, const uint32_t* m_order, int swizzle) {
    constexpr uint32_t kTileM = cute::size<0>(TileShape{});
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1};
    args.mainloop.ptr_A = static_cast<const ElementA*>(a);
    args.mainloop.dA = cute::make_stride(static_cast<int64_t>(lda), cute::Int<1>{}, int64_t(0));
    args.mainloop.ptr_B = static_cast<const ElementB*>(b);
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(k), cute::Int<1>{}, int64_t(0));
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.ptr_D = static_cast<ElementD*>(d);
    args.epilogue.dD = cute::make_stride(static_cast<int64_t>(n), cute::Int<1>{}, int64_t(0));
    args.epilogue.dC = args.epilogue.dD;
    args.scheduler.max_swizzle_size = swizzle;
    args.scheduler.m_order = m_order;
    args.scheduler.m_tiles = (m + kTileM - 1) / kTileM;
  }
};

}  // namespace tilelink::detail
