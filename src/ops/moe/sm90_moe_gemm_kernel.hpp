// The MoE grouped GEMM of one rank (part 1), behind a plain C++ interface; the CUTLASS assembly
// is in sm90_moe_gemm.cuh, one configuration per .cu.
//
// One persistent GEMM over the expert-sorted rows: tile row t (bm rows of one expert) times that
// expert's weight slice. Launched for the most tile rows a routing can give (max_tiles); the
// scheduler reads the routing's actual count from the device and walks the rank's tile order.
// Part 1: the producer waits per tile on the gather stage's channel (moe_gather_block) before its
// TMA loads, and picks B by the tile's expert. Part 2: the epilogue notifies every finished tile
// for the top-k combine (moe_rs_protocol.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

// Part 2's combine in the epilogue (MoeCombine::kEpilogue, moe_rs_protocol.hpp): what a finished
// tile counts on and what the CTA of an item's last tile reads and writes. The tile's own
// channel is not notified then (nothing waits for it); the owners are, on plan.recv_channel
// (notify_sig).
struct Sm90MoeEpilogueCombine {
  bool on = false;
  MoeRsPlan plan;            // recv_columns == plan.n_tiles()
  MoeMappingView m;          // tile_token0, tile_span, pair_row, topk of the call's mapping
  const float* weights = nullptr;  // tokens x topk routing weights
  SymmetricView heap;
  void* recv = nullptr;            // this rank's pointer to the slots (world > 1)
  void* out = nullptr;             // tokens_per_rank x n bf16 (world 1: the combine's destination)
  uint32_t* arrived = nullptr;     // [token blocks x n_tiles], zeroed per call (launch_moe_epilogue_counts)
  const uint32_t* expected = nullptr;  // [token blocks (+ 1)]: tiles per item (moe_block_tiles)
  uint32_t* lists = nullptr;       // [CTAs x (1 + 32)]: a CTA's items to combine, per round of 32 blocks
};

struct Sm90MoeGemmProblem {
  const void* a = nullptr;  // max_tiles * tile_m rows of k bf16 (expert-sorted, row pitch k)
  const void* b = nullptr;  // experts x n x k bf16 (expert e's N x K slice, K contiguous)
  void* d = nullptr;        // max_tiles * tile_m rows of n bf16
  uint32_t max_tiles = 0, n = 0, k = 0, experts = 0;
  const uint32_t* order = nullptr;        // [max_tiles]: the rank's tile order (first *num_tiles valid)
  const uint32_t* num_tiles = nullptr;    // on the device
  const uint32_t* tile_expert = nullptr;  // [max_tiles]
  SignalView sig;                         // the gather's channels; tile t on channel0 + t
  uint32_t channel0 = 0;
  bool wait = true;  // false: a plain grouped GEMM on rows already in place (part 2, benchmarks)
  // Part 2: each finished tile (tile row t, n tile j) sets channel notify_channel0 + t * n_tiles
  // + j of notify_sig (n_tiles = ceil(n / tile_n)).
  SignalView notify_sig;
  uint32_t notify_channel0 = 0;
  bool notify = false;
  Sm90MoeEpilogueCombine combine;  // part 2 with the combine in the epilogue (notify on)
  int device = 0;
  int sm_count = 0;
  int swizzle = 0;  // tile rows per band of the scheduler; 0 = automatic (moe_policy::swizzle)
};

class Sm90MoeGemmKernel {
 public:
  virtual ~Sm90MoeGemmKernel() = default;
  // `epoch`: of the signal slice the run waits on (part 1) or notifies (part 2).
  virtual void run(uint64_t epoch, cudaStream_t stream) = 0;
  virtual int ctas() const = 0;
  // Tile rows per band of the scheduler (the configured swizzle, else moe_policy::swizzle's).
  virtual uint32_t band() const = 0;
  // Later runs record into `trace` (a default view: off): per tile the producer's wait and loads
  // and the consumer's epilogue (with part 2's notify), tile = tile_row * n_tiles + n_tile.
  virtual void set_trace(const TraceView& trace) = 0;
  // Later runs combine with these routing weights into this output (part 2, combine on): the
  // operands set_operands may move without rebuilding the GEMM.
  virtual void set_combine_operands(const float* weights, void* out) = 0;
};

struct Sm90MoeGemmConfigInfo {
  const char* name;
  uint32_t tile_m, tile_n, tile_k;
  uint32_t cluster_m, cluster_n;
  std::string (*can_implement)(const Sm90MoeGemmProblem& p);
  std::unique_ptr<Sm90MoeGemmKernel> (*make)(const Sm90MoeGemmProblem& p);
};

const std::vector<Sm90MoeGemmConfigInfo>& sm90_moe_gemm_configs();
// The tile height of configuration `kernel` ("" = default); InvalidArgument from `where` if unknown.
uint32_t moe_gemm_tile_m(const std::string& kernel, const char* where);

}  // namespace tilelink::detail
