// The SP attention kernel's compile-time configuration for one head dim: tile sizes, the WGMMA
// atoms, shared-memory layouts, the TMA copies, the pipelines, the shared storage and the
// kernel's Params (built on the host by Sm90FlashAttentionKernelImpl, sm90_flash_attention_kernel.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <cstdint>

#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

template <int kHeadDim>
struct Sm90FlashAttentionTraits {
  using Element = cutlass::bfloat16_t;
  static constexpr int kBlockM = static_cast<int>(kFlashBlockM);
  static constexpr int kBlockN = static_cast<int>(kFlashBlockN);
  static constexpr int kStages = 2;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;

  using TileShapeMNK = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kHeadDim>>;
  using AtomLayoutMNK = cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>;  // a warpgroup per 64 rows
  using TiledMmaS = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float, TileShapeMNK>(), AtomLayoutMNK{}));
  using TiledMmaO = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float, decltype(cute::select<0, 2, 1>(TileShapeMNK{})),
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      AtomLayoutMNK{}));

  using SmemAtom = cute::GMMA::Layout_K_SW128_Atom<Element>;
  using SmemLayoutQ = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(cute::tile_to_shape(
      SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // V read as the B operand of O += P V: (head_dim, keys), the same bytes (MN-major).
  using SmemLayoutVt = decltype(cute::composition(
      SmemLayoutKV{}, cute::make_ordered_layout(cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                                cute::Step<cute::_2, cute::_1, cute::_3>{})));

  // Global views for TMA: (row, dim, head, shard). Q and O use shard = 1.
  using GmemShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using GmemStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GmemTensor = decltype(cute::make_tensor(cute::make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                                GmemShape{}, GmemStride{}));
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutQ{},
                                            cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}, cute::_1{}));
  using TmaKV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, GmemTensor{},
                                             cute::take<0, 2>(SmemLayoutKV{}),
                                             cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>>{}, cute::_1{}));

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;
  static constexpr uint32_t kTileBytes = kBlockN * kHeadDim * sizeof(Element);
  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutKV>, 1024> v;
    typename Pipeline::SharedStorage pipe_k;
    typename Pipeline::SharedStorage pipe_v;
    uint64_t q_full;   // transaction barrier: Q of the current item landed
    uint64_t q_empty;  // the consumers are done with Q (256 arrivals)
  };

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k;
    TmaKV tma_v;
    GmemShape q_shape;
    GmemShape kv_shape;
    Element* o;
    float* lse;
    SpAttentionPlan plan;
    const uint32_t* chunk_order;
    SignalView sig;
    uint32_t rank;
    uint32_t wait;
    int32_t only_shard;
    float scale_log2;  // softmax scale * log2(e)
    float scale;
    TraceView trace;   // on: the producer's wait and loads per chunk, the consumers' store per item
    float* o_acc;      // local_first: each item's parked fp32 o, seq_per_rank x q_heads x head_dim
    float* ml;         // local_first: parked m, then l, each q_heads x seq_per_rank
  };
};

}  // namespace tilelink::detail
