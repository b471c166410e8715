// GEMM+RS: the row-parallel linear layer with its reduce-scatter hidden under the GEMM.
//
// Every rank r holds A_r (M x K_r, row-major bf16) and B_r (N x K_r, K contiguous, the
// nn.Linear layout; K x N is refused) and gets rows [r*R, min((r+1)*R, M)) of sum_q A_q * B_q^T,
// R = ceil(M/P) (torch.chunk's split; M/P when P divides M, and ranks past the end own no rows
// when M < P), in bf16, from an fp32 reduction in rank order 0..P-1: bit-identical run after run.
//
// The fused CUTLASS 4.2 kernel computes the rank's bf16 partial, owner blocks of other ranks
// first, and its epilogue notifies each finished tile's signal group; `reduce_blocks` CTAs of
// every owner, running next to the GEMM on the comm stream, sum the senders' tiles of the owner's
// rows as they arrive. How tiles reach their owner (config.scatter, gemm_rs_fused.hpp):
//  - pull: the GEMM writes `partial` (its own rows); owners read the senders' partials.
//  - push: the GEMM's epilogue stores each tile straight into its owner's `partial`, in slot r
//    (rows [r*R, (r+1)*R)) -- needs an affine heap (SymmetricHeap::affine_stride).
//  - ce: the GEMM writes `partial`; the copy engine moves each finished group (tile row or owner
//    block) into the owner's `recv`, slot r.
// config.method = decomposed instead runs async-TP's chain (gemm_rs_decomposed): a plain GEMM per
// owner block, each peer block copied into its owner's `recv` once done, the reduction last.
// With one rank the reduce-scatter is the identity: the GEMM writes `out` itself, nothing else runs.
// At decode's M the owner blocks of whole tile rows are mostly padding; config.engine = small_m
// (automatic where its estimate is faster) runs GEMM+AR's engine instead: 64- or 128-row tiles
// over all M rows with K slices, each owner summing its block of every rank's and slice's partial
// in rank order (gemm_ar_protocol.hpp's reduce-scatter; its partials from the heap, not
// `partial`). The sums stay fp32 in rank order and bit-identical from call to call; each K slice
// is rounded to bf16 before them.
// Any M >= 1 (the GEMM tiles each owner block on its own, a partial tile row at its end); N and
// K_r multiples of 8.
// FP8 (dtype e4m3, ops/common/fp8.hpp): A_r as packed e4m3 rows carrying their row or block scales
// (or a per-rank tensor scale), B_r e4m3 with its scales apart, fp32 accumulation; the partials
// stay bf16 and the reduction fp32 in rank order, as for bf16. With `a_source` the op quantises
// each rank's bf16 A_r itself (one pass, on the compute stream) before the GEMM. K_r a multiple
// of 16 (128 with block scaling).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_config.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_fused.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/side_streams.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct GemmRsArguments {
  std::vector<const void*> a;              // per rank: M x K bf16 (e4m3: packed rows; empty with a_source)
  std::vector<const void*> b;              // per rank: N x K bf16 (e4m3)
  std::vector<void*> out;                  // per rank: GemmRs::rows_of(m, P, r) x N bf16
  const SymmetricBuffer* partial = nullptr;  // P * ceil(M/P) x N bf16 on every rank (M x N when P | M)
  const SymmetricBuffer* recv = nullptr;     // as partial; scatter 'ce' and method decomposed only
  uint32_t m = 0, n = 0, k = 0;            // k: each rank's slice of the inner dimension
  GemmRsConfig config;
  // FP8 (ops/common/fp8.hpp). With dtype e4m3, `a` holds each rank's M packed FP8 rows (row pitch
  // fp8_row_pitch(k, scaling)), `b` e4m3 weights, and:
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  std::vector<const float*> a_scale;  // tensor scaling: per rank, its A_r's one scale (each rank its own)
  std::vector<const float*> b_scale;  // per rank: B's fp8_b_scales(n, k, scaling) scales
  // Quantise first: per rank, its M x K bf16 A_r (K contiguous). Each call quantises it into the
  // op's own packed rows (quantize_rows_e4m3; with tensor scaling after tensor_scale_e4m3 over it,
  // so each rank's scale is its own) before the GEMM; `a` and `a_scale` stay empty.
  std::vector<const void*> a_source;
};

// The tune cache's key of `args` on `world`: m = rows of the output over all ranks, n, k per rank.
TuneKey gemm_rs_tune_key(const World& world, const GemmRsArguments& args);

namespace detail {
class Sm90GemmRsKernel;
}
class GemmAr;

class GemmRs {
 public:
  GemmRs(const World& world, SymmetricHeap& heap, SignalSet& signals, const GemmRsArguments& args,
         const std::string& name = "gemm_rs");
  ~GemmRs();
  GemmRs(const GemmRs&) = delete;
  GemmRs& operator=(const GemmRs&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap, const GemmRsArguments& args);
  // Rows of the output rank `rank` of `world` ranks gets for M = m (R = ceil(m / world) or fewer),
  // and the rows `partial` and `recv` hold (world * R).
  static uint32_t rows_of(uint32_t m, int world, int rank);
  static uint64_t buffer_rows(uint32_t m, int world);
  // The compiled kernel configurations: the bf16 one first, then e4m3's (one per scaling mode).
  static std::vector<std::string> kernel_names();
  // The configuration the op runs for operands of `dtype` (and, e4m3, `scaling`): its name carries
  // the tile, "[<dtype>_<scaling>_]<bm>x<bn>x<bk>_c<cm>x<cn>" (the plan and tune models read it).
  static std::string kernel_name(DType dtype, Fp8Scaling scaling = Fp8Scaling::kRow);

  // Enqueues one call on every rank (fused: the GEMM on the compute stream, the reduction on the
  // comm stream; non-overlapped and decomposed: both on the compute stream, decomposed's copies on
  // the comm stream joined back); the call is complete on the compute stream. Returns its epoch.
  uint64_t run();
  // The GEMM alone (no notifies, no scatter, no reduction): the fused kernel's isolated compute
  // time. Leaves the signals as they were.
  void run_gemm_only();
  // Points `rank`'s next calls at other operands: A (M x K), the weight (N x K) and the output
  // (rows_of(M, P, rank) x N), as a framework that allocates a call's output itself needs (the PyTorch ops):
  // host-only, no synchronisation; the GEMM's descriptors are rebuilt when a pointer they hold
  // changed. Call it between calls (the stream order keeps the previous call's operands).
  // Throws InvalidArgument on a null or misaligned pointer.
  void set_operands(int rank, const void* a, const void* b, void* out);
  // FP8: the same with the scales. `a`: the rank's packed rows, or, built with a_source, its bf16
  // A (the op quantises it); a_scale: tensor scaling without a_source, else nullptr.
  void set_operands(int rank, const void* a, const float* a_scale, const void* b, const float* b_scale, void* out);

  // Later calls record the device timeline into `trace` (nullptr: off): every GEMM tile's
  // epilogue and notify (consumer thread 0; tile = m_tile * n_tiles + n_tile over the whole M),
  // and the reduction blocks' waits (tile = the channel) and per-tile reductions (tile = the same
  // GEMM tile numbering). The copy-engine scatter's copies are not recorded. tilelink trace
  // gemm_rs renders it.
  void set_trace(const TraceBuffer* trace);

  const GemmRsFusedPlan& plan() const { return plan_; }
  // The configuration in use (the tune cache's, when it supplied one) and the cache file it
  // came from ("" when none).
  const GemmRsConfig& config() const { return args_.config; }
  const std::string& tuned_from() const { return tuned_from_; }
  uint32_t reduce_blocks() const { return reduce_blocks_; }
  uint32_t swizzle() const { return swizzle_; }
  const std::string& kernel_name() const { return kernel_name_; }
  // The method that runs (GemmRsConfig::method resolved) and why: "configured", the tune cache's
  // measured winner, the estimate's faster (with both estimates), or fused because the epilogue
  // reducer sums inside the GEMM.
  OpMethod method() const { return method_; }
  const std::string& method_why() const { return method_why_; }
  const gemm_rs_policy::MethodEstimates& method_estimates() const { return estimates_; }
  // The engine that runs (GemmRsConfig::engine resolved) and why; with small_m, the GEMM+AR op
  // that runs it (its choice, trace and partials), else null. plan(), reduce_blocks(), swizzle()
  // and kernel_name() describe the owner_tiles engine.
  GemmRsEngine engine() const { return small_m_ != nullptr ? GemmRsEngine::kSmallM : GemmRsEngine::kOwnerTiles; }
  const std::string& engine_why() const { return engine_why_; }
  const GemmAr* small_m() const { return small_m_.get(); }

 private:
  const World* world_;
  SymmetricHeap* heap_;
  GemmRsArguments args_;
  void enqueue_scatter(int rank, cudaStream_t after);
  void make_kernel(int rank);
  void choose_method(OpMethod callers, GemmRsReducer asked);
  uint64_t run_decomposed(uint64_t epoch);
  void launch_reduce(int rank, const char* what, uint32_t blocks, uint32_t cluster, cudaStream_t stream);
  void quantize_a();
  void repoint_operands(int rank, const void* a, const float* a_scale, const void* b, const float* b_scale, void* out);
  const void* a_of(int rank) const;

  std::string kernel_name_;
  uint64_t a_row_bytes_ = 0;               // bytes of one row of A (bf16 K * 2, or the packed row's)
  std::vector<DeviceBuffer> a_packed_;     // a_source: per rank, the op's M packed FP8 rows
  std::vector<DeviceBuffer> a_scale_own_;  // a_source with tensor scaling: per rank, the scale it computes

  GemmRsFusedPlan plan_;
  SignalSlice slice_;
  uint32_t reduce_blocks_ = 0;
  uint32_t swizzle_ = 1;
  uint32_t kernel_cluster_ = 1;
  std::vector<DeviceBuffer> m_order_;               // per rank, the kernel's tile-row order
  std::vector<std::vector<uint32_t>> host_m_order_;  // the same, for the copy-engine scatter
  // Copy-engine scatter: per rank a stream of its own (its waits must not hold back the
  // reduction kernel on the comm stream), or the comm stream where no hardware queue is left for
  // one (the reduction then follows the copies); decomposed: the comm stream.
  SideStreams scatter_;
  std::vector<std::unique_ptr<detail::Sm90GemmRsKernel>> kernels_;
  // Decomposed: per rank a plain GEMM per owner block (null past M) and their tile-row order.
  std::vector<std::vector<std::unique_ptr<detail::Sm90GemmRsKernel>>> block_kernels_;
  std::vector<DeviceBuffer> block_order_;
  const TraceBuffer* trace_ = nullptr;
  std::string tuned_from_;
  OpMethod method_ = OpMethod::kFused;
  std::string method_why_;
  gemm_rs_policy::MethodEstimates estimates_;
  std::unique_ptr<GemmAr> small_m_;  // the small-M engine, when it runs
  std::string engine_why_;
};

}  // namespace tilelink
