// The FP8 twin of Sm90Bf16TnGemm: e4m3 A (M x K, row-major, row pitch lda bytes: packed rows,
// tilelink/ops/common/fp8.hpp) times e4m3 B given as N x K (K contiguous), fp32 accumulation, bf16
// D (M x N, row-major), no C. CUTLASS 4.2's sm90 cooperative warp-specialized TMA + WGMMA
// collectives from the builders, the scales applied as the scaling mode says:
//  - kTensor: the FP8 main loop (two-level accumulation: the WGMMA's partial sums promoted into
//    fp32 every 4 k-blocks, the promotion pipelined: sm90_fp8_pipelined_promotion.cuh), then
//    D = acc * (a_scale[0] * b_scale[0]) in the epilogue;
//  - kRow:    the same main loop, then D = acc * a_scale[m * a_pitch] * b_scale[n] in the epilogue
//    (A's scales read from its rows' tails, Sm90PitchedRowScale);
//  - kBlock:  CUTLASS's blockwise-scaled FP8 main loop (KernelTmaWarpSpecializedCooperativeFP8
//    BlockScaledAccum) with A's 1 x 128 scales K-major in its rows' tails (row stride a_pitch
//    floats) and B's 128 x 128 scales K-major, ceil(N / 128) x (K / 128); a plain epilogue.
// The tile's M extent must be 128 per consumer warp group pair (the two accumulators of the FP8
// main loops take twice the registers of bf16's): 128x128x128 tiles.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

#include "ops/common/sm90_bf16_tn_gemm.cuh"
#include "ops/common/sm90_fp8_pipelined_promotion.cuh"
#include "ops/common/sm90_pitched_row_scale.cuh"
#include "ops/common/sm90_row_ordered_scheduler.cuh"
#include "tilelink/ops/common/fp8.hpp"

namespace tilelink::detail {

// The epilogue's fusion for a scaling mode; set() fills its arguments (the epilogue's `thread`).
template <Fp8Scaling kScaling, class TileShape>
struct Fp8EpilogueFusion;

template <class TileShape>
struct Fp8EpilogueFusion<Fp8Scaling::kTensor, TileShape> {
  // D = acc * (a_scale * b_scale): the scalar broadcast multiplies its two device scalars.
  using Callbacks = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, int64_t>, 2>,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  template <class Thread>
  static void set(Thread& thread, const float* a_scale, int64_t, const float* b_scale, int64_t = 0) {
    thread = {{{1.0f, 1.0f}, {a_scale, b_scale}, {}}, {}, {}};
  }
};

template <class TileShape>
struct Fp8EpilogueFusion<Fp8Scaling::kRow, TileShape> {
  // D = a_scale(m) * (b_scale(n) * acc).
  using Callbacks = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      Sm90PitchedRowScale,
      cutlass::epilogue::fusion::Sm90EVT<
          cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                 cutlass::FloatRoundStyle::round_to_nearest>,
          cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                      cute::Stride<cute::_0, cute::_1, int64_t>>,
          cutlass::epilogue::fusion::Sm90AccFetch>>;
  // a_batch_stride: floats from one batch's (GEMM+RS owner block's) row 0 scale to the next's.
  template <class Thread>
  static void set(Thread& thread, const float* a_scale, int64_t a_pitch, const float* b_scale,
                  int64_t a_batch_stride = 0) {
    thread = {{a_scale, a_pitch, a_batch_stride}, {{b_scale, 0.0f, {}}, {}, {}}, {}};
  }
};

template <class TileShape>
struct Fp8EpilogueFusion<Fp8Scaling::kBlock, TileShape> {
  // The main loop applied the scales: D = acc.
  using Callbacks =
      cutlass::epilogue::fusion::LinearCombination<cutlass::bfloat16_t, float, void, float,
                                                   cutlass::FloatRoundStyle::round_to_nearest>;
  template <class Thread>
  static void set(Thread& thread, const float*, int64_t, const float*, int64_t = 0) {
    thread.alpha = 1.0f;
    thread.beta = 0.0f;
  }
};

template <class TileShape, class ClusterShape, Fp8Scaling kScaling, template <class> class MainloopWrap = NoWrap,
          template <class> class EpilogueWrap = NoWrap, class Schedule = Cooperative, bool Ordered = true,
          bool kPipelinedPromotion = true>
struct Sm90Fp8TnGemm : Sm90TileExtents<TileShape, ClusterShape> {
  using Extents = Sm90TileExtents<TileShape, ClusterShape>;
  using Extents::kClusterM, Extents::kClusterN, Extents::kTileK, Extents::kTileM, Extents::kTileN;
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using ElementD = cutlass::bfloat16_t;
  using ElementAcc = float;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;  // the (N, K) view, K contiguous
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16;  // 16 bytes of e4m3
  static constexpr int kAlignD = 8;    // 16 bytes of bf16
  static constexpr Fp8Scaling kScalingMode = kScaling;
  static constexpr bool kBlockScaled = kScaling == Fp8Scaling::kBlock;

  // Block scaling's scale layouts: K-major for both, A's row stride set per problem (its rows'
  // pitch), B's ceil(K / 128).
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kFp8BlockN, kFp8BlockK, cute::GMMA::Major::K,
                                                                 cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using Fusion = Fp8EpilogueFusion<kScaling, TileShape>;
  using Epilogue = EpilogueWrap<typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, typename Schedule::Epilogue, typename Fusion::Callbacks>::CollectiveOp>;

  using MainloopLayoutA = std::conditional_t<kBlockScaled, cute::tuple<LayoutA, LayoutSFA>, LayoutA>;
  using MainloopLayoutB = std::conditional_t<kBlockScaled, cute::tuple<LayoutB, LayoutSFB>, LayoutB>;
  static constexpr bool kPingPong = std::is_same_v<Schedule, PingPong>;
  // CUTLASS's ping-pong kernel advances its tiles without fetch_next_work, so the ops' row order
  // would not apply: ping-pong runs CUTLASS's own scheduler (bench/experiments/fp8_schedules).
  static_assert(!(kPingPong && Ordered), "the row-ordered scheduler serves the cooperative kernel only");
  using BlockScaledSchedule = std::conditional_t<kPingPong, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum,
                                                 cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum>;
  using MainloopSchedule = std::conditional_t<kBlockScaled, BlockScaledSchedule, typename Schedule::Kernel>;
  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, MainloopLayoutA, kAlignAB, ElementB,
      MainloopLayoutB, kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  // Tensor and row scaling: CUTLASS's FP8 main loop with its promotion pipelined
  // (sm90_fp8_pipelined_promotion.cuh: the same bits; timed alone on H100s, tensor 8-9 %, row 2-7 %
  // faster), unless the kernel cannot spare the second MMA accumulator's registers
  // (kPipelinedPromotion = false).
  using Mainloop = MainloopWrap<std::conditional_t<kBlockScaled || !kPipelinedPromotion, BuiltMainloop,
                                                   Sm90Fp8PipelinedPromotion<BuiltMainloop>>>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<
      cute::Shape<int, int, int, int>, Mainloop, Epilogue,
      std::conditional_t<Ordered, RowOrderedSchedulerTag, cutlass::gemm::PersistentScheduler>>;
  static_assert(!Ordered || std::is_same_v<typename Kernel::TileScheduler, Sm90RowOrderedTileScheduler>);


  // "" if the extents, A's row pitch (bytes), the SM count and the swizzle suit this kernel, else
  // why not. The ops add their own conditions.
  static std::string check(uint32_t m, uint32_t n, uint32_t k, uint64_t lda, int sm_count, int swizzle) {
    if (std::string e = check_nonempty(m, n, k); !e.empty()) return e;
    if (std::string e = check_fp8_extents(k, kScaling); !e.empty()) return e;
    if (n % kAlignD != 0) {
      return "argument 'n' = " + std::to_string(n) + ": expected a multiple of 8 (TMA needs 16-byte rows of C)";
    }
    if (lda < fp8_row_pitch(k, kScaling) || lda % 16 != 0) {
      return "A row pitch = " + std::to_string(lda) + " bytes: expected >= " +
             std::to_string(fp8_row_pitch(k, kScaling)) + " (fp8_row_pitch) and a multiple of 16";
    }
    return check_grid(sm_count, swizzle, kClusterM, kClusterN);
  }

  // The problem and operands: A's packed rows (pitch lda bytes; row and block scales in the
  // tails), B and its scales (b_scale), the tensor mode's A scale (a_scale; ignored otherwise),
  // the tile order.
  static void set_problem(typename Kernel::Arguments& args, uint32_t m, uint32_t n, uint32_t k, const void* a,
                          uint64_t lda, const float* a_scale, const void* b, const float* b_scale, void* d,
                          const uint32_t* m_order, int swizzle) {
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1};
    args.mainloop.ptr_A = static_cast<const ElementA*>(a);
    args.mainloop.dA = cute::make_stride(static_cast<int64_t>(lda), cute::Int<1>{}, int64_t(0));
    args.mainloop.ptr_B = static_cast<const ElementB*>(b);
    args.mainloop.dB = cute::make_stride(static_cast<int64_t>(k), cute::Int<1>{}, int64_t(0));
    const auto* tail = reinterpret_cast<const float*>(static_cast<const char*>(a) + k);  // row 0's scales
    const int64_t tail_pitch = static_cast<int64_t>(lda / 4);                           // floats per row
    if constexpr (kBlockScaled) {
      args.mainloop.ptr_SFA = tail;
      args.mainloop.layout_SFA = block_scale_layout_a(m, k, tail_pitch);
      args.mainloop.ptr_SFB = b_scale;
      args.mainloop.layout_SFB = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(int(m), int(n), int(k), 1));
    }
    Fusion::set(args.epilogue.thread, kScaling == Fp8Scaling::kTensor ? a_scale : tail, tail_pitch, b_scale);
    set_output_and_order<Ordered, kTileM>(args, m, n, static_cast<ElementD*>(d), m_order, swizzle);
  }

  // A's 1 x 128 scales: (row, K block, batch) at row * pitch + block + batch * batch_stride
  // (floats): `batches` batches of m rows (GEMM+RS: its owner blocks, m = rows per owner).
  static LayoutSFA block_scale_layout_a(uint32_t m, uint32_t k, int64_t pitch, int32_t batches = 1,
                                        int64_t batch_stride = 0) {
    using namespace cute;
    const int32_t blocks = static_cast<int32_t>(k / kFp8BlockK);
    return make_layout(make_shape(make_shape(Int<1>{}, static_cast<int32_t>(m)), make_shape(Int<kFp8BlockK>{}, blocks),
                                  batches),
                       make_stride(make_stride(_0{}, static_cast<int32_t>(pitch)), make_stride(_0{}, _1{}),
                                   static_cast<int32_t>(batch_stride)));
  }
  // B's 128 x 128 scales, ceil(N / 128) x (K / 128) row-major, the same for each of `batches`
  // batches (stride 0: GEMM+RS's owner blocks share one weight).
  static LayoutSFB block_scale_layout_b(uint32_t n, uint32_t k, int32_t batches) {
    using namespace cute;
    const int32_t n_blocks = static_cast<int32_t>((n + kFp8BlockN - 1) / kFp8BlockN);
    const int32_t k_blocks = static_cast<int32_t>(k / kFp8BlockK);
    return make_layout(make_shape(make_shape(Int<kFp8BlockN>{}, n_blocks), make_shape(Int<kFp8BlockK>{}, k_blocks),
                                  batches),
                       make_stride(make_stride(_0{}, k_blocks), make_stride(_0{}, _1{}), int32_t(0)));
  }
};

}  // namespace tilelink::detail
