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
#include <string>
#include <type_traits>

#include "ops/common/sm90_row_ordered_scheduler.cuh"
#include "ops/common/sm90_split_tail_scheduler.cuh"

namespace tilelink::detail {

template <class Base>
using NoWrap = Base;

struct Cooperative {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct PingPong {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

// What every configuration of the sm90 GEMMs (bf16 and FP8) checks and sets alike.
inline std::string check_nonempty(uint32_t m, uint32_t n, uint32_t k) {
  if (m == 0 || n == 0 || k == 0) {
    return "problem (m, n, k) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) +
           "): expected every extent > 0";
  }
  return "";
}
// The grid's SM count (whole clusters) and the swizzle.
inline std::string check_grid(int sm_count, int swizzle, uint32_t cluster_m, uint32_t cluster_n) {
  if (sm_count < static_cast<int>(cluster_m * cluster_n)) {
    return "GEMM SM count = " + std::to_string(sm_count) + ": expected at least one " + std::to_string(cluster_m) +
           "x" + std::to_string(cluster_n) + " cluster";
  }
  if (swizzle != 1 && swizzle != 2 && swizzle != 4 && swizzle != 8) {
    return "argument 'config.swizzle' = " + std::to_string(swizzle) + ": expected 1, 2, 4 or 8";
  }
  return "";
}
// D (m x n row-major, no C) and the tile order: the epilogue's and scheduler's arguments.
template <bool Ordered, uint32_t kTileM, class Arguments, class ElementD>
void set_output_and_order(Arguments& args, uint32_t m, uint32_t n, ElementD* d, const uint32_t* m_order, int swizzle) {
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = cute::make_stride(static_cast<int64_t>(n), cute::Int<1>{}, int64_t(0));
  args.epilogue.dC = args.epilogue.dD;
  args.scheduler.max_swizzle_size = swizzle;
  if constexpr (Ordered) {
    args.scheduler.m_order = m_order;
    args.scheduler.m_tiles = (m + kTileM - 1) / kTileM;
  }
}

// The tile and cluster extents of a configuration, as the ops' tables and checks read them.
template <class TileShape, class ClusterShape>
struct Sm90TileExtents {
  static constexpr uint32_t kTileM = cute::size<0>(TileShape{});
  static constexpr uint32_t kTileN = cute::size<1>(TileShape{});
  static constexpr uint32_t kTileK = cute::size<2>(TileShape{});
  static constexpr uint32_t kClusterM = cute::size<0>(ClusterShape{});
  static constexpr uint32_t kClusterN = cute::size<1>(ClusterShape{});
};

// Ordered: TileLink's row-ordered scheduler family, OrderedTag picking the member
// (RowOrderedSchedulerTag, or SplitTailSchedulerTag: the last wave split along K); else CUTLASS's
// persistent scheduler.
template <class TileShape, class ClusterShape, template <class> class MainloopWrap = NoWrap,
          template <class> class EpilogueWrap = NoWrap, class Schedule = Cooperative, bool Ordered = true,
          class OrderedTag = RowOrderedSchedulerTag>
struct Sm90Bf16TnGemm : Sm90TileExtents<TileShape, ClusterShape> {
  using Extents = Sm90TileExtents<TileShape, ClusterShape>;
  using Extents::kClusterM, Extents::kClusterN, Extents::kTileK, Extents::kTileM, Extents::kTileN;
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
      LayoutD, kAlign, typename Schedule::Epilogue>::CollectiveOp>;

  using Mainloop = MainloopWrap<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB, LayoutB, kAlign,
      ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue,
      std::conditional_t<Ordered, OrderedTag, cutlass::gemm::PersistentScheduler>>;
  static_assert(!Ordered || std::is_base_of_v<Sm90RowOrderedTileScheduler, typename Kernel::TileScheduler>);


  // "" if the extents, the A row pitch (elements), the SM count and the swizzle suit this kernel,
  // else why not. The ops add their own conditions.
  static std::string check(uint32_t m, uint32_t n, uint32_t k, uint64_t lda, int sm_count, int swizzle) {
    if (std::string e = check_nonempty(m, n, k); !e.empty()) return e;
    if (k % kAlign != 0) {
      return "argument 'k' = " + std::to_string(k) + ": expected a multiple of 8 (TMA needs 16-byte rows of A and B)";
    }
    if (n % kAlign != 0) {
      return "argument 'n' = " + std::to_string(n) + ": expected a multiple of 8 (TMA needs 16-byte rows of C)";
    }
    if (lda < k || lda % kAlign != 0) {
      return "A row pitch = " + std::to_string(lda) + " elements: expected >= k and a multiple of 8";
    }
    return check_grid(sm_count, swizzle, kClusterM, kClusterN);
  }

  // The problem, operands and tile order common to both ops; the op adds its own fields.
  static void set_problem(typename Kernel::Arguments& args, uint32_t m, uint32_t n, uint32_t k, const void* a,
                          uint64_t lda, const void* b, void* d, const uint32_t* m_order, int swizzle) {
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1};
    args.mainloop.ptr_A = static_cast<const ElementA*>(a);
    args.mainloop.dA = cute::make_stride(static_cast<int64_t>(lda), cute::Int<1>{}, int64_t(0));
    args.mainloop.ptr_B = static_cast<const ElementB*>(b);
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(k), cute::Int<1>{}, int64_t(0));
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    set_output_and_order<Ordered, kTileM>(args, m, n, static_cast<ElementD*>(d), m_order, swizzle);
  }
};

}  // namespace tilelink::detail
