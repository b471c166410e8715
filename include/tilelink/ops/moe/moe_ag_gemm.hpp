// MoE part 1: all-gather of the tokens + gather by expert + grouped GEMM, overlapped.
//
// Tensor-parallel MoE: every rank holds a row shard of the tokens X (tokens_per_rank x hidden)
// and, for every expert, its slice of the expert's first weight (n x hidden: the rank's columns
// of the expert's up/gate projection). The routing (top-k expert ids of every token) decides at
// run time which rows each expert multiplies. The op leaves on every rank the expert-sorted rows
//
//   out[row] = X[token] * W_e^T   for the (token, k) pair the mapping puts at `row` (expert e),
//
// with each expert's rows padded to whole tiles (padding rows come out zero). The mapping
// (mapping(rank): row_pair, tile_expert, ..., num_tiles on the device) says which pair each row
// holds; part 2 reads the same tables. bf16 in/out, fp32 accumulation.
//
// One call (run), per rank:
//  - compute stream: the dynamic mapping from the routing ids (MoeMappingBuffers: sorted rows,
//    per-tile expert and token span, the rank's tile order -- tiles whose tokens arrive first go
//    first, the rank's own shard's tiles before all others), then the grouped GEMM: a persistent
//    CUTLASS 4.2 TMA + WGMMA kernel over the sorted rows whose producer waits per tile on the
//    gather stage and loads the tile's expert's B;
//  - comm stream: the all-gather of X (copy engine or SM blocks, config.comm);
//  - a gather stream: gather_blocks CTAs copy each tile's token rows into expert-sorted order as
//    soon as the all-gather channels of its token span have arrived, then notify the tile. Where
//    a stream more would not get a hardware queue of its own (World::check_extra_streams: a
//    process under MPS with CUDA_DEVICE_MAX_CONNECTIONS=3), the gather runs on the compute stream
//    before the GEMM instead (it still overlaps the all-gather; the GEMM no longer overlaps it).
// The call is complete on the compute stream. Every kind of World runs it: a process world
// (World::process, one rank per process) enqueues this process's rank, the others theirs.
//
// Layouts: X row-major in a SymmetricBuffer (world * tokens_per_rank rows, pitch hidden * 2
// bytes; rank r's rows in place before run(), unless x_source gives them elsewhere); ids int32 tokens x topk on every rank's device
// (every token's routing, valid: check_moe_routing -- ids are not checked on the device);
// W experts x n x hidden (K contiguous); out out_rows(args) x n. hidden and n multiples of 8.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/moe/moe_config.hpp"
#include "tilelink/ops/moe/moe_mapping_device.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/side_streams.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct MoeAgGroupGemmArguments {
  const SymmetricBuffer* x = nullptr;  // gathered tokens: world * tokens_per_rank rows of hidden bf16
  size_t x_offset = 0;                 // bytes into `x` (16-byte aligned)
  uint32_t tokens_per_rank = 0;
  uint32_t hidden = 0;                 // K
  uint32_t n = 0;                      // columns of every expert's slice on each rank
  uint32_t experts = 0;
  uint32_t topk = 0;
  std::vector<const int32_t*> ids;  // per rank: all tokens' expert ids (tokens x topk int32)
  std::vector<const void*> w;       // per rank: experts x n x hidden bf16
  std::vector<void*> out;           // per rank: out_rows(args) x n bf16
  MoeAgGroupGemmConfig config;
  // Per rank, its tokens_per_rank x hidden bf16 shard (rows contiguous, 16-byte aligned) anywhere
  // on its device; empty: the caller wrote the rank's own rows of `x` itself. Beyond one rank each
  // call's all-gather copies it into the rank's own rows tile by tile, each tile's channel set
  // once it has landed (AllGatherArguments::own_rows), so the gather starts on the first tile
  // rather than after a copy of the whole shard; at world 1 the gather reads it where it is (`x`
  // is then not read).
  std::vector<const void*> x_source;
};

namespace detail {
class Sm90MoeGemmKernel;
}

class MoeAgGroupGemm {
 public:
  // Validates (InvalidArgument with the reason; nothing is launched), claims signal slices,
  // allocates the mapping tables and the sorted rows, and builds every rank's kernels.
  MoeAgGroupGemm(const World& world, SymmetricHeap& heap, SignalSet& signals, const MoeAgGroupGemmArguments& args,
                 const std::string& name = "moe_ag_group_gemm");
  ~MoeAgGroupGemm();
  MoeAgGroupGemm(const MoeAgGroupGemm&) = delete;
  MoeAgGroupGemm& operator=(const MoeAgGroupGemm&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap,
                                   const MoeAgGroupGemmArguments& args);
  static std::vector<std::string> kernel_names();
  // The tile height (mapping rows per tile) of `kernel` ("" = default).
  static uint32_t tile_m_of(const std::string& kernel = "");
  // Rows `out` must hold: the most sorted rows any routing of these tokens can need.
  static uint64_t out_rows(const World& world, const MoeAgGroupGemmArguments& args);

  // Enqueues one call on every rank this process drives; returns the gather's epoch.
  uint64_t run();
  // Points later calls of `rank` (one this process drives) at new routing ids, weight and
  // output: the per-call tensors of a PyTorch caller. The ids are read by the next call's
  // mapping; the grouped GEMM is rebuilt only when the weight or output moved (both kernels or
  // neither). The shapes are the op's; nothing is launched.
  void set_operands(int rank, const int32_t* ids, const void* w, void* out);
  // Built with x_source: the same with the rank's token shard for the next calls (read at each
  // call: a new address rebuilds nothing).
  void set_operands(int rank, const int32_t* ids, const void* w, void* out, const void* x_source);
  // The grouped GEMM alone on the sorted rows and mapping of the last call (no waits): its
  // isolated compute time.
  void run_gemm_only();
  // Later calls record the device timeline into `trace` (nullptr: off): the grouped GEMM's
  // per-tile wait, loads and epilogue (tile = tile_row * n_tiles + n_tile), the gather blocks'
  // waits, copies and notifies, and on the SM path the all-gather blocks'. tilelink trace moe.
  void set_trace(const TraceBuffer* trace);
  // The device mapping alone (tables and every rank's tile order from the routing), as run()
  // builds it first on each compute stream: its share of the call.
  void run_mapping_only();

  // The mapping tables of `rank` (one this process drives).
  const MoeMappingBuffers& mapping(int rank) const;
  const AllGather& all_gather() const { return *ag_; }
  AllGather& all_gather() { return *ag_; }
  uint32_t tile_m() const { return tile_m_; }
  uint32_t gather_blocks() const { return gather_blocks_; }
  int gemm_ctas(int rank) const;
  // The grouped GEMM's tile rows per band on `rank` (config.swizzle, else the automatic count).
  uint32_t band(int rank) const;
  const std::string& kernel_name() const { return kernel_name_; }
  // The method that runs: MoeAgGroupGemmConfig::method; auto = moe_policy::method (fused with peers,
  // non-overlapped at world 1).
  OpMethod method() const { return method_; }
  // The gather stage's stream per rank (idle between calls: MoeLayer runs part 2's combine on it).
  SideStreams& side_streams() { return gather_streams_; }

 private:
  void build_mapping(int rank);  // on the rank's compute stream
  void make_kernels(int rank);   // the fused and plain grouped GEMMs of the rank's operands
  // The gather stage of one call of `rank` on `stream` with `blocks` CTAs.
  void launch_gather(int rank, cudaStream_t stream, uint32_t blocks);
  // The rows the gather reads on `rank`: the gathered `x`, or at world 1 the caller's x_source.
  const void* gather_source(int rank) const;
  uint64_t run_non_overlapped();

  const World* world_;
  MoeAgGroupGemmArguments args_;
  std::string kernel_name_;
  uint32_t tile_m_ = 0, gather_blocks_ = 1;
  OpMethod method_ = OpMethod::kFused;
  std::unique_ptr<AllGather> ag_;
  SignalSlice gather_slice_;  // tile t of the sorted rows on channel t
  SideStreams gather_streams_;
  std::vector<std::unique_ptr<MoeMappingBuffers>> mappings_;
  std::vector<DeviceBuffer> order_, sorted_;
  std::vector<DeviceBuffer> gather_queues_;  // per rank: the gather CTAs' work counter (zero between calls)
  std::vector<std::unique_ptr<detail::Sm90MoeGemmKernel>> kernels_, plain_kernels_;
  std::vector<std::unique_ptr<detail::Sm90MoeGemmKernel>> whole_kernels_;  // non-overlapped: the whole budget
  const TraceBuffer* trace_ = nullptr;
};

}  // namespace tilelink
