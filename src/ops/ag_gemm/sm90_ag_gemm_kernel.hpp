// The fused AG+GEMM kernel of one rank, behind a plain C++ interface: ag_gemm.cpp never sees a
// CUTLASS type. Each compiled configuration (tile shape, cluster shape) lives in its own .cu
// (sm90_ag_gemm_<tile>_<cluster>.cu) and registers itself in sm90_ag_gemm_configs().
//
// The kernel is CUTLASS 4.2's persistent warp-specialized cooperative GEMM (TMA + WGMMA) with two
// substitutions (sm90_ag_gemm.cuh): the mainloop's producer warp waits on the all-gather channels
// of a tile's A rows before its first TMA load of them, and the tile scheduler visits tile rows in
// the rank's arrival order (m_order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/trace.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink::detail {

// Everything one rank's kernel needs; pointers are on the rank's device.
struct Sm90AgGemmProblem {
  const void* a = nullptr;  // M x K bf16, or packed e4m3 rows (fp8.hpp), row pitch lda elements (the gathered buffer)
  uint64_t lda = 0;
  const void* b = nullptr;  // N x K bf16 or e4m3, K contiguous
  const float* a_scale = nullptr;  // e4m3, tensor scaling: A's scale (row and block: in A's rows)
  const float* b_scale = nullptr;  // e4m3: B's scales (fp8_b_scales)
  void* c = nullptr;        // M x N bf16, row-major, packed
  uint32_t m = 0, n = 0, k = 0;
  const uint32_t* m_order = nullptr;  // [ceil(m / tile_m)] tile rows in visiting order
  bool wait = true;                   // false: a plain GEMM (A already complete)
  AllGatherPlan plan;                 // what the producer waits on (when `wait`)
  SignalView sig;                     // epoch is set per call by run()
  int device = 0;
  int sm_count = 0;                   // CTAs the persistent grid may occupy
  int swizzle = 1;                    // CUTLASS max_swizzle_size (1, 2, 4 or 8)
  // The op's workspaces for this rank (the split tail's, Sm90PersistentLauncher::init): they outlive
  // the kernels; null: the kernel keeps its own.
  std::vector<DeviceBuffer>* workspaces = nullptr;
};

class Sm90AgGemmKernel {
 public:
  virtual ~Sm90AgGemmKernel() = default;
  // Launches on `stream` with the signals' epoch of this call.
  virtual void run(uint64_t epoch, cudaStream_t stream) = 0;
  virtual int ctas() const = 0;
  // Later runs record per-tile spans (producer: wait, loads; consumer: epilogue) into `trace`
  // (a default TraceView: off).
  virtual void set_trace(const TraceView& trace) = 0;
};

struct Sm90AgGemmConfigInfo {
  const char* name;  // e.g. "128x256x64_c2x1"
  uint32_t tile_m, tile_n, tile_k;
  uint32_t cluster_m, cluster_n;
  // "" if this configuration can run `p`, else why not (argument, value, expectation).
  std::string (*can_implement)(const Sm90AgGemmProblem& p);
  // Builds the kernel's parameters (TMA descriptors) once and loads its module on the device
  // (lazy loading, see World); throws InvalidArgument / CudaError.
  std::unique_ptr<Sm90AgGemmKernel> (*make)(const Sm90AgGemmProblem& p);
  DType dtype = DType::kBf16;                 // A's and B's
  Fp8Scaling scaling = Fp8Scaling::kTensor;  // e4m3: how the scales apply
  // A split-tail configuration (sm90_split_tail_scheduler.cuh): the runs of K tiles each tile of the
  // last, partial wave is cut into on p's grid (p.m, p.n, p.k, p.sm_count), 1 where nothing splits.
  // nullptr: a configuration without the split tail.
  uint32_t (*tail_splits)(const Sm90AgGemmProblem& p) = nullptr;
};

// Every compiled configuration, the default first: bf16's, then e4m3's (one per scaling mode).
const std::vector<Sm90AgGemmConfigInfo>& sm90_ag_gemm_configs();

}  // namespace tilelink::detail
