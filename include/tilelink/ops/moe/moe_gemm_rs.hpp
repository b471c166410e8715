// MoE part 2: grouped GEMM + top-k weighted combine + reduce-scatter to the tokens' owners,
// overlapped.
//
// Tensor-parallel MoE after part 1 and the activation: every rank holds, in the expert-sorted
// row order of the dynamic mapping (moe_mapping.hpp, the same tables part 1 used), the rows H_r
// of its slice of the intermediate activations (k = I / P columns) and, for every expert, its
// slice of the expert's second weight W2_e (n x k, the nn.Linear layout: n = the hidden size).
// Rank q gets, for each token t it owns (tokens [q T/P, (q+1) T/P)),
//
//   out[t] = sum over ranks r in order 0..P-1 of  bf16( sum over j in order of  weight[t][j] * Y_r[row(t, j)] )
//   Y_r    = bf16(H_r * W2_e^T) row by row (e = the row's expert)
//
// in fp32 between the roundings: the same inputs give the same bits, run after run.
//
// One call (run), per rank:
//  - compute stream: the rank's GEMM tile order (tiles whose tokens the combine needs first go
//    first), then the grouped GEMM (the part-1 CUTLASS 4.2 kernel: TMA + WGMMA, B by the tile's
//    expert) whose epilogue notifies every finished tile;
//  - a combine stream: combine_blocks CTAs walk the tokens in rounds of comm_rows tokens per
//    owner (owner rank+1's first); each token block, once the tiles of all its pairs are done,
//    gets each token's top-k rows summed with the routing weights, stored straight into the
//    owner's receive slot of this rank, and the owner notified; after each round the same CTAs
//    sum the rank's own block of the round over the P senders' slots, in rank order, into `out`
//    (moe_rs_protocol.hpp); then an exit barrier (slots are rewritten by the next call). With no
//    peers the combine writes `out` directly.
// The call is complete on the compute stream. Every kind of World runs it: a process world
// (World::process, one rank per process) enqueues this process's rank; the combine's stores and
// reads of peers' slots go through the heap's peer pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/moe/moe_config.hpp"
#include "tilelink/ops/moe/moe_mapping_device.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/side_streams.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct MoeGemmRsArguments {
  uint32_t tokens_per_rank = 0;
  uint32_t n = 0;  // output columns (the hidden size), a multiple of 8
  uint32_t k = 0;  // each rank's slice of the intermediate size, a multiple of 8
  uint32_t experts = 0;
  uint32_t topk = 0;
  // Per rank: the mapping of all world * tokens_per_rank tokens' routing, tiles of tile_m(kernel)
  // rows, built on the rank's compute stream before run() (MoeAgGroupGemm::run builds it).
  std::vector<const MoeMappingBuffers*> mapping;
  std::vector<const void*> h;         // per rank: mapping max_rows() x k bf16, in the mapping's row order
  std::vector<const void*> w;         // per rank: experts x n x k bf16
  std::vector<const float*> weights;  // per rank: all tokens' routing weights (tokens x topk fp32)
  std::vector<void*> out;             // per rank: tokens_per_rank x n bf16
  const SymmetricBuffer* recv = nullptr;  // world * tokens_per_rank x n bf16 (the senders' slots); world > 1 only
  // The combine's stream per rank: an op's own (nullptr), or one a caller shares with work that
  // never overlaps this op's calls (MoeLayer: part 1's gather streams), which saves a hardware
  // queue per rank.
  SideStreams* combine_streams = nullptr;
  MoeGemmRsConfig config;
};

namespace detail {
class Sm90MoeGemmKernel;
}

class MoeGemmRs {
 public:
  // Validates (InvalidArgument with the reason; nothing is launched), claims a signal slice,
  // allocates the sorted GEMM output and tile order per rank, and builds every rank's kernel.
  MoeGemmRs(const World& world, SymmetricHeap& heap, SignalSet& signals, const MoeGemmRsArguments& args,
            const std::string& name = "moe_gemm_rs");
  ~MoeGemmRs();
  MoeGemmRs(const MoeGemmRs&) = delete;
  MoeGemmRs& operator=(const MoeGemmRs&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap, const MoeGemmRsArguments& args);
  // can_implement's checks of everything but `mapping` and `h`, for a caller that builds those
  // itself (MoeLayer: part 1's mapping and the activation's rows).
  static std::string can_implement_shape(const World& world, const SymmetricHeap& heap,
                                         const MoeGemmRsArguments& args);
  // The tile height the mapping must be built with for `kernel` ("" = default).
  static uint32_t tile_m_of(const std::string& kernel = "");

  // Enqueues one call on every rank this process drives; returns the call's epoch.
  uint64_t run();
  // Points later calls of `rank` (one this process drives) at new activation rows, weight,
  // routing weights and output. The routing weights and output are read at launch; the grouped
  // GEMM is rebuilt only when the rows or weight moved (both kernels or neither). The mapping
  // stays the one the op was built with; nothing is launched.
  void set_operands(int rank, const void* h, const void* w, const float* weights, void* out);
  // The grouped GEMM alone (no notifies) on the rows and mapping in place: its isolated time.
  void run_gemm_only();
  // Later calls record the device timeline into `trace` (nullptr: off): the grouped GEMM's
  // per-tile loads and epilogue with its notify (tile = tile_row * n_tiles + n_tile), and the
  // combine blocks' waits and notifies. tilelink trace moe.
  void set_trace(const TraceBuffer* trace);

  const MoeRsPlan& plan() const { return plan_; }
  // Rank r's grouped GEMM output (mapping max_rows() x n bf16, padding rows unspecified; a rank
  // this process drives).
  const void* y(int rank) const {
    world_->check_local_rank(rank, "MoeGemmRs::y");
    return y_[static_cast<size_t>(rank)].get();
  }
  // Blocks: the combine CTAs beside the GEMM; epilogue: the reduction's CTAs after it.
  uint32_t combine_blocks() const { return combine_blocks_; }
  // Who combines: MoeGemmRsConfig::combine, resolved (moe_policy::combine).
  MoeCombine combine() const { return combine_; }
  uint32_t weight_sweeps() const { return sweeps_; }  // 0: token order
  // The method that runs: MoeGemmRsConfig::method; auto = moe_policy::method (fused with peers or
  // with the epilogue combine, else non-overlapped at world 1).
  OpMethod method() const { return method_; }
  int gemm_ctas(int rank) const;
  const std::string& kernel_name() const { return kernel_name_; }

 private:
  void make_kernels(int rank);  // the rank's notifying and plain grouped GEMMs of its operands
  void launch_combine(int rank, uint32_t blocks, cudaStream_t stream);
  // Staged (put-with-signal): on `compute`, after the GEMM and beside the combine kernel, the puts
  // of the staged blocks, the join of the combine stream, then the exit barrier.
  void staged_put_and_exit(int rank, cudaStream_t compute);

  const World* world_;
  const SymmetricHeap* heap_;
  MoeGemmRsArguments args_;
  std::string kernel_name_;
  MoeRsPlan plan_;
  uint32_t combine_blocks_ = 1, cluster_ = 1, sweeps_ = 0;
  OpMethod method_ = OpMethod::kFused;
  MoeCombine combine_ = MoeCombine::kBlocks;
  SignalSlice slice_;
  SymmetricBuffer send_;  // staged: the peers' combined rows before the stream puts them
  SideStreams own_streams_;
  SideStreams* combine_streams_ = nullptr;  // own_streams_ or the caller's
  std::vector<DeviceBuffer> y_, order_;
  std::vector<DeviceBuffer> arrived_, expected_, lists_;  // the epilogue combine's (per rank)
  std::vector<std::unique_ptr<detail::Sm90MoeGemmKernel>> kernels_, plain_kernels_;
  const TraceBuffer* trace_ = nullptr;
};

}  // namespace tilelink
