// The fused GEMM+RS kernel of one rank, behind a plain C++ interface; the CUTLASS assembly is in
// sm90_gemm_rs.cuh, one configuration per .cu.
//
// CUTLASS 4.2's persistent warp-specialized cooperative GEMM computes the rank's partial
// A_r * B_r^T, owner blocks in swizzled order (own last). Its epilogue stores owner block l's
// rows at d + l * d_batch_stride (the rank's own buffer, or, for the epilogue push, the owner's
// receive slot through an affine heap) and, once a tile's TMA stores have landed, notifies the
// tile's signal group (GemmRsFusedPlan). The reduction kernel (gemm_rs_reduce.cu) runs next to
// it on the comm stream, or, with plan.reducer == kEpilogue, the GEMM's consumers sum each own tile
// right after its epilogue and the reduction kernel (one block, after the GEMM) only passes the
// exit barrier.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

struct Sm90GemmRsProblem {
  const void* a = nullptr;  // M x K bf16 row-major (this rank's K slice), or packed e4m3 rows (fp8.hpp)
  uint64_t lda = 0;         // A's row pitch in elements (bf16: k; e4m3: fp8_row_pitch bytes)
  const void* b = nullptr;  // N x K bf16 or e4m3, K contiguous
  const float* a_scale = nullptr;  // e4m3, tensor scaling: A's scale (row and block: in A's rows)
  const float* b_scale = nullptr;  // e4m3: B's scales (fp8_b_scales)
  void* d = nullptr;        // row 0 of owner block d_origin's destination, bf16, rows of n elements
  int64_t d_batch_stride = 0;  // elements from owner block l's destination to block l + 1's
  // The epilogue push through a rotated affine heap (SymmetricHeap::affine_origin): owner l's
  // destination is block (l - d_origin) mod P of d's view. 0 everywhere else.
  uint32_t d_origin = 0;
  uint32_t m = 0, n = 0, k = 0;
  const uint32_t* m_order = nullptr;  // [m / tile_m]
  GemmRsFusedPlan plan;
  SignalView sig;
  // plan.reducer == kEpilogue: the sums' operands (gemm_rs_sender_rows: this rank's partial and
  // receive buffers) and the rank's output block.
  SymmetricView heap;
  const void* buf = nullptr;
  const void* recv = nullptr;
  void* out = nullptr;
  int device = 0;
  int sm_count = 0;
  int swizzle = 1;
};

class Sm90GemmRsKernel {
 public:
  virtual ~Sm90GemmRsKernel() = default;
  // notify = false: the GEMM alone, its epilogue notifies nothing (benchmarks).
  virtual void run(uint64_t epoch, cudaStream_t stream, bool notify = true) = 0;
  virtual int ctas() const = 0;
  // Later runs record each tile's epilogue and notify into `trace` (a default view: off).
  virtual void set_trace(const TraceView& trace) = 0;
};

struct Sm90GemmRsConfigInfo {
  const char* name;
  uint32_t tile_m, tile_n, tile_k;
  uint32_t cluster_m, cluster_n;
  std::string (*can_implement)(const Sm90GemmRsProblem& p);
  std::unique_ptr<Sm90GemmRsKernel> (*make)(const Sm90GemmRsProblem& p);
  DType dtype = DType::kBf16;                 // A's and B's
  Fp8Scaling scaling = Fp8Scaling::kTensor;  // e4m3: how the scales apply
};

// Every compiled configuration, the default first: bf16's, then e4m3's (one per scaling mode).
const std::vector<Sm90GemmRsConfigInfo>& sm90_gemm_rs_configs();
// The configuration GemmRs runs for operands of `dtype` (and `scaling`, e4m3): the first such.
const Sm90GemmRsConfigInfo& sm90_gemm_rs_config(DType dtype, Fp8Scaling scaling);

// The reduction of owner `rank`: for each tile of its block, wait for every sender's part, sum
// the senders' partial tiles in rank order in fp32 into `out` (rows_per_rank x n bf16), then the
// exit barrier. `buf`, `recv`: this rank's P * R x n bf16 buffers (R = plan.rows_per_rank) (recv: copy-engine scatter only).
// `blocks` CTAs (a multiple of `cluster`), in clusters of `cluster` CTAs (the GEMM's), on `stream`.
// Loads the reduction kernel's module on the current device (lazy loading, see World).
void preload_gemm_rs_reduce();
// With `trace` on, thread 0 of each CTA records its waits (TraceRole::kComm, tile = the channel)
// and each tile's reduction (TraceKind::kReduce, tile = the GEMM tile over the whole M).
void launch_gemm_rs_reduce(const GemmRsFusedPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const void* buf, const void* recv, void* out, uint32_t blocks, uint32_t cluster,
                           cudaStream_t stream, const TraceView& trace = {});

}  // namespace tilelink::detail
