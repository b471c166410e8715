// An epilogue visitor leaf (CUTLASS 4.2 sm90 EVT) for the row scales of packed FP8 A rows
// (tilelink/ops/common/fp8.hpp): the value of output element (m, n, l) is
// ptr[m * pitch + l * batch_stride], a float in the tail of A's row m of batch l (GEMM+RS's owner
// blocks are the epilogue's batches). CUTLASS's column broadcast reads a contiguous vector; these scales lie one
// A row apart. Each consumer thread loads the scales of the rows its fragment covers once per tile
// (begin), into registers that hold one value per distinct row (the N modes stay stride 0).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>

#include <cstdint>

namespace tilelink::detail {

struct Sm90PitchedRowScale {
  struct SharedStorage {};
  struct Arguments {
    const float* ptr = nullptr;  // row 0's scale
    int64_t pitch = 0;           // floats from one row's scale to the next
    int64_t batch_stride = 0;    // floats from batch l's row 0 to batch l + 1's
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr != nullptr && args.pitch > 0;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE Sm90PitchedRowScale() {}
  CUTLASS_HOST_DEVICE Sm90PitchedRowScale(Params const& params, SharedStorage const&) : params_(params) {}

  CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_C_load_needed() const { return false; }
  CUTLASS_DEVICE bool is_zero() const { return false; }

  template <class... Args>
  CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::ProducerLoadArgs<Args...> const&) {
    return cutlass::epilogue::fusion::EmptyProducerLoadCallbacks{};
  }

  template <class GTensor, class RTensor, class CTensor, class Residue>
  struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::EmptyConsumerStoreCallbacks {
    CUTLASS_DEVICE ConsumerStoreCallbacks(GTensor g, RTensor r, CTensor c, Residue residue)
        : g_(g), r_(r), c_(c), residue_(residue) {}

    GTensor g_;        // (CPY,CPY_M,CPY_N,EPI_M,EPI_N) the scales in global memory, stride 0 along N
    RTensor r_;        // the same shape in registers, one value per distinct row
    CTensor c_;        // the elements' coordinates
    Residue residue_;  // rows past M read nothing

    CUTLASS_DEVICE void begin() {
      using namespace cute;
      Tensor g = filter_zeros(g_);
      Tensor r = filter_zeros(r_);
      Tensor c = filter_zeros(c_, g_.stride());
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(r); ++i) r(i) = elem_less(c(i), residue_) ? g(i) : 0.0f;
    }

    template <class ElementAccumulator, int FragmentSize>
    CUTLASS_DEVICE cutlass::Array<float, FragmentSize> visit(cutlass::Array<ElementAccumulator, FragmentSize> const&,
                                                             int epi_v, int epi_m, int epi_n) {
      using namespace cute;
      cutlass::Array<float, FragmentSize> out;
      Tensor r_mn = r_(_, _, _, epi_m, epi_n);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < FragmentSize; ++i) out[i] = r_mn(epi_v * FragmentSize + i);
      return out;
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto [M, N, K, L] = args.problem_shape_mnkl;
    Tensor m_scale = make_tensor(make_gmem_ptr(params_.ptr),
                                 make_layout(make_shape(M, N, L), make_stride(params_.pitch, _0{}, params_.batch_stride)));
    Tensor g = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        m_scale, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy, args.thread_idx);
    // The registers' layout from the same partition of a unit-stride view: static strides (a
    // dynamic one would put the fragment in local memory), stride 0 along N kept.
    Tensor m_unit = make_tensor(make_gmem_ptr(params_.ptr), make_layout(make_shape(M, N, L), Stride<_1, _0, _0>{}));
    Tensor g_unit = cutlass::epilogue::fusion::sm90_partition_for_epilogue<ReferenceSrc>(
        m_unit, args.tile_shape_mnk, args.tile_coord_mnkl, args.epi_tile, args.tiled_copy, args.thread_idx);
    Tensor r = make_tensor_like<float>(g_unit);
    return ConsumerStoreCallbacks<decltype(g), decltype(r), decltype(args.tCcD), decltype(args.residue_tCcD)>(
        g, r, args.tCcD, args.residue_tCcD);
  }

 private:
  Params params_;
};

}  // namespace tilelink::detail
