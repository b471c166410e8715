// The fused GEMM+RS kernel of one rank (pull form), behind a plain C++ interface; the CUTLASS
// assembly is in sm90_gemm_rs.cuh, one configuration per .cu.
//
// CUTLASS 4.2's persistent warp-specialized cooperative GEMM writes the rank's partial
// A_r * B_r^T into its symmetric `partial` buffer, owner blocks in swizzled order (own last);
// its epilogue, once a tile's TMA stores have landed, notifies the tile's signal group
// (GemmRsPullPlan). The reduction kernel (gemm_rs_reduce.cu) runs next to it on the comm stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/gemm_rs/gemm_rs_pull.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"

namespace tilelink::detail {

struct Sm90GemmRsProblem {
  const void* a = nullptr;  // M x K bf16 row-major (this rank's K slice)
  const void* b = nullptr;  // N x K bf16, K contiguous
  void* partial = nullptr;  // M x N bf16 row-major (this rank's segment of the symmetric buffer)
  uint32_t m = 0, n = 0, k = 0;
  const uint32_t* m_order = nullptr;  // [m / tile_m]
  GemmRsPullPlan plan;
  SignalView sig;
  int device = 0;
  int sm_count = 0;
  int swizzle = 1;
};

class Sm90GemmRsKernel {
 public:
  virtual ~Sm90GemmRsKernel() = default;
  virtual void run(uint64_t epoch, cudaStream_t stream) = 0;
  virtual int ctas() const = 0;
};

struct Sm90GemmRsConfigInfo {
  const char* name;
  uint32_t tile_m, tile_n, tile_k;
  uint32_t cluster_m, cluster_n;
  std::string (*can_implement)(const Sm90GemmRsProblem& p);
  std::unique_ptr<Sm90GemmRsKernel> (*make)(const Sm90GemmRsProblem& p);
};

const std::vector<Sm90GemmRsConfigInfo>& sm90_gemm_rs_configs();

// The reduction of owner `rank`: for each tile of its block, wait for every sender's group,
// sum the senders' partial tiles in rank order in fp32 into `out` (rows_per_rank x n bf16), then
// the exit barrier. `blocks` CTAs on `stream`.
// Loads the reduction kernel's module on the current device (lazy loading, see World).
void preload_gemm_rs_reduce();
void launch_gemm_rs_reduce(const GemmRsPullPlan& plan, const SignalView& sig, const SymmetricView& heap,
                           const void* partial_local, void* out, uint32_t blocks, cudaStream_t stream);

}  // namespace tilelink::detail
