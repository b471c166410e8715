// The GEMM of GEMM+AR of one rank, behind a plain C++ interface; the CUTLASS assembly is in
// sm90_gemm_ar.cuh, one configuration per .cu.
//
// CUTLASS 4.2's persistent warp-specialized cooperative GEMM computes the rank's partial A_r *
// B_r^T as a batch of `k_slices` K slices (slice s: columns [s * k / k_slices, (s + 1) * k /
// k_slices) of A and B), tile rows in order, and its epilogue adds 1 to each finished tile's ready
// channel once the tile's TMA stores have landed (GemmArPlan). With plan.splits == k_slices each
// slice is a partial of its own, written at d + s * m * n; with plan.splits == 1 < k_slices the
// GEMM sums the slices itself (fp32, slice order, through `slots` and `flags`: the last slice of
// each tile stores the sum at d and notifies once). The reduction kernel (gemm_ar_reduce.cu) runs
// next to it on the comm stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/common/cluster_launch.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar_protocol.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

struct Sm90GemmArProblem {
  const void* a = nullptr;  // M x K bf16 row-major (this rank's K slice)
  const void* b = nullptr;  // N x K bf16, K contiguous
  void* d = nullptr;        // plan.splits slices of M x N bf16
  uint32_t m = 0, n = 0, k = 0;  // k: the rank's whole K (split into k_slices slices)
  uint32_t k_slices = 1;         // plan.splits, or more with plan.splits == 1 (summed in the GEMM)
  float* slots = nullptr;        // summed in the GEMM: slice_sum_workspace's slots, then its flags
  uint64_t* flags = nullptr;
  const uint32_t* m_order = nullptr;  // [ceil(m / tile_m)]
  GemmArPlan plan;
  SignalView sig;
  int device = 0;
  int sm_count = 0;
};

class Sm90GemmArKernel {
 public:
  virtual ~Sm90GemmArKernel() = default;
  // notify = false: the GEMM alone, its epilogue notifies nothing.
  virtual void run(uint64_t epoch, cudaStream_t stream, bool notify = true) = 0;
  virtual int ctas() const = 0;
  virtual void set_trace(const TraceView& trace) = 0;
};

struct Sm90GemmArConfigInfo {
  const char* name;
  uint32_t tile_m, tile_n, tile_k;
  uint32_t cluster_m, cluster_n;
  std::string (*can_implement)(const Sm90GemmArProblem& p);
  std::unique_ptr<Sm90GemmArKernel> (*make)(const Sm90GemmArProblem& p);
};

// The workspace of the K slices summed in the GEMM: the slots of every tile's slices but its last
// (fp32 accumulators), then a flag per tile and consumer warp group (at most 2), zero between
// launches (each tile's last slice puts its flags back).
struct SliceSumWorkspace {
  uint64_t slot_bytes = 0, flag_bytes = 0;
  uint64_t bytes() const { return slot_bytes + flag_bytes; }
};
inline SliceSumWorkspace slice_sum_workspace(const GemmArPlan& plan, uint32_t k_slices) {
  if (k_slices <= plan.splits) return {};
  return {uint64_t(plan.tiles()) * (k_slices - 1) * plan.bm * plan.bn * sizeof(float),
          uint64_t(plan.tiles()) * 2 * sizeof(uint64_t)};
}

const std::vector<Sm90GemmArConfigInfo>& sm90_gemm_ar_configs();
// The configuration the op runs at `m` rows (gemm_ar_policy::gemm_tile).
const Sm90GemmArConfigInfo& sm90_gemm_ar_config(uint32_t m);

// The reduction of one rank (gemm_ar_reduce_block): `partial` is this rank's splits x M x N
// partial (peers' through `heap`, or on the copy-engine path in `recv`: world slots of splits x M x
// N), `reduced` its two-shot staging (M x N), `out` M x N; with the plan's norm, residual /
// residual_out (M x N) and norm_weight (N); `queue` the rank's work counter for this kernel (zero
// when it starts, and again when it ends: BlockWorkQueue). `blocks` CTAs on `stream` run `pass`.
struct GemmArReduceArgs {
  uint32_t* queue = nullptr;
  const void* partial = nullptr;
  const void* recv = nullptr;
  GemmArPass pass = GemmArPass::kAll;
  void* reduced = nullptr;
  void* out = nullptr;
  const void* residual = nullptr;
  void* residual_out = nullptr;
  const void* norm_weight = nullptr;
  float eps = 1e-6f;
};
void preload_gemm_ar_reduce();
// With `trace` on, thread 0 of each CTA records its waits (TraceRole::kComm, tile = the channel)
// and each part's reduction (TraceKind::kReduce, tile = the GEMM tile). LaunchOrder::kEarly where
// the previous kernel on `stream` is this rank's GEMM (cluster_launch.hpp).
void launch_gemm_ar_reduce(const GemmArPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const GemmArReduceArgs& args, uint32_t blocks, cudaStream_t stream, LaunchOrder order,
                           const TraceView& trace = {});

}  // namespace tilelink::detail
