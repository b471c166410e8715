// GEMM+AR: the row-parallel linear layer of decode-time tensor parallelism with its all-reduce
// started per tile by the GEMM (issue 21), and optionally the layer boundary after it.
//
// Every rank r holds A_r (M x K_r, row-major bf16; any M > 0) and B_r (N x K_r, K contiguous, the
// nn.Linear weight) and gets C = sum_q A_q * B_q^T (M x N bf16) in `out`, summed in fp32 in rank
// order 0..P-1: every rank's C is the same bits, call after call.
// With the decode boundary (`residual`, `residual_out`, `norm_weight` given): h = C + residual is
// written to residual_out (which may be `residual` itself) and out = RMSNorm(h) * norm_weight --
// what vLLM's fused_add_rms_norm does after the all-reduce, here in fp32 with one rounding each:
// h = bf16(fp32 sum + residual), out = bf16(h * rsqrt(mean(h^2) + eps) * weight). (vLLM rounds
// the all-reduce's sum to bf16 before the add, so the bits may differ from its.)
//
// The CUTLASS 4.2 sm90 GEMM writes the rank's partial into a symmetric buffer the op owns, K cut
// into `splits` slices for small M (more CTAs streaming the weight; the reduction sums the slices
// with the ranks, or with config.slice_sum = gemm each tile's last slice sums them in fp32 and the
// GEMM writes one partial), and its epilogue notifies each finished tile; reduction CTAs on the comm stream
// sum the ranks' tiles as they arrive, one-shot or two-shot (gemm_ar_protocol.hpp), reading the
// peers' partials themselves or, on the copy-engine path, what the streams put into this rank.
// With one rank, one partial and no norm the GEMM writes `out` itself and nothing else runs.
//
// The same engine runs GemmRs at decode's M (`scatter`, gemm_rs.hpp's small_m engine): rank r's
// `out` then gets only its block of rows of C, [r R, min((r + 1) R, M)) with R = ceil(M / P),
// summed as one-shot sums them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar_policy.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar_protocol.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct GemmArConfig {
  // auto: the estimate's fastest (gemm_ar_policy.hpp) of one-shot and two-shot and of the K slices;
  // the schedule auto is non-overlapped (the fused one measured slower so far).
  AllReduceMethod method = AllReduceMethod::kAuto;
  GemmArSchedule schedule = GemmArSchedule::kAuto;
  uint32_t splits = 0;         // K slices per rank; 0 = automatic (enough work units for the GEMM's SMs)
  uint32_t reduce_blocks = 0;  // reduction CTAs per rank; 0 = automatic
  uint32_t gemm_sms = 0;       // GEMM CTAs per rank; 0 = budget - reduce_blocks (fused) or budget
  // sm (the reduction CTAs read the peers), copy_engine (the streams put into the peers' staging:
  // the path under the put-with-signal transport), auto (copy_engine there, else sm).
  GemmArPath path = GemmArPath::kAuto;
  // Where the K slices are summed (gemm_ar_policy.hpp): in the reduction, each slice a partial of
  // its own, or in the GEMM, one partial per rank; auto: the GEMM.
  GemmArSliceSum slice_sum = GemmArSliceSum::kAuto;
  // With every knob above on automatic, use the configuration `tilelink tune gemm_ar` stored for
  // this GPU, world and shape, if the tune cache has one (runtime/tune_cache.hpp); else the
  // estimate's.
  bool use_tune_cache = true;
};

// "method one_shot, schedule fused, splits auto, reduction CTAs auto".
std::string describe(const GemmArConfig& c);
// True when every knob is on automatic (use_tune_cache is not a knob).
bool is_automatic(const GemmArConfig& c);
// The knobs as a JSON object (text), and back (InvalidArgument naming `source` and the field).
std::string to_config_json(const GemmArConfig& c);
void from_config_json(const std::string& json, const std::string& source, GemmArConfig& c);

struct GemmArArguments {
  std::vector<const void*> a;  // per rank: M x K bf16
  std::vector<const void*> b;  // per rank: N x K bf16
  std::vector<void*> out;      // per rank: M x N bf16
  // The decode boundary; all empty: off. Per rank: residual M x N (read), residual_out M x N
  // (written; may equal residual), norm_weight N. The ranks' residuals must be equal (the
  // two-shot owner of a tile adds its own).
  std::vector<const void*> residual;
  std::vector<void*> residual_out;
  std::vector<const void*> norm_weight;
  float eps = 1e-6f;
  uint32_t m = 0, n = 0, k = 0;  // k: each rank's slice of the inner dimension
  GemmArConfig config;
  // Reduce-scatter instead of all-reduce (GemmRs's small-M engine): rank r's `out` holds
  // GemmArPlan::owned(r).rows x N bf16, its block of C. No norm; the method is one-shot's (auto or
  // one_shot).
  bool scatter = false;

  bool has_norm() const { return !residual.empty() || !residual_out.empty() || !norm_weight.empty(); }
};

// The configuration the op runs for `config` on one rank's problem (the same on every rank: it
// depends only on the shape, the world, the budget and the rates): each knob as configured, the
// automatic ones by the estimate (gemm_ar_policy.hpp), and why in words.
GemmArChoice gemm_ar_choice(const GemmArShape& shape, const GemmArConfig& config, const GemmArRates& rates = {});
// The rates GemmAr's estimate runs at on `world` for the configured `path`: an H200's; virtual
// ranks share one GPU's HBM, which also carries their peers' traffic; the copy-engine path (as
// configured, or automatic under put_signal) with its per-put cost.
GemmArRates gemm_ar_rates(const World& world, GemmArPath path = GemmArPath::kAuto);
// Whether GemmAr runs its copy-engine path on `world` for the configured `path`.
bool gemm_ar_copy_engine(const World& world, GemmArPath path);

// The tune cache's key of `args` on `world`: m, n and k per rank.
TuneKey gemm_ar_tune_key(const World& world, const GemmArArguments& args);

namespace detail {
class Sm90GemmArKernel;
}

class GemmAr {
 public:
  GemmAr(const World& world, SymmetricHeap& heap, SignalSet& signals, const GemmArArguments& args,
         const std::string& name = "gemm_ar");
  ~GemmAr();
  GemmAr(const GemmAr&) = delete;
  GemmAr& operator=(const GemmAr&) = delete;

  // "" when `args` can run on `world`, else why not (argument, value, expectation). The op allocates
  // its partials from `heap` (splits x M x N bf16 per rank, and M x N for two-shot; the copy-engine
  // path world x splits x M x N more for the peers' partials).
  static std::string can_implement(const World& world, const SymmetricHeap& heap, const GemmArArguments& args);

  // Enqueues one call on every local rank (fused: GEMM on the compute stream, reduction on the comm
  // stream; non-overlapped: both on the compute stream); the call is complete on the compute
  // stream. Returns its epoch.
  uint64_t run();
  // The GEMM alone (no notifies, no reduction; benchmarks): into the partial buffer, or into `out`
  // when the GEMM writes the output itself (one rank, one slice, no norm).
  void run_gemm_only();
  // The all-reduce alone of what the partial buffer holds (every slice), on the compute stream
  // with the non-overlapped schedule's CTAs: the chain's second half after another GEMM (cuBLAS
  // in the benchmarks) wrote `partial(rank)`. With splits > 1 every slice is summed.
  uint64_t run_all_reduce_only();
  // This rank's partial buffer: splits() partials of M x N bf16, partial s at s * M * N elements.
  void* partial(int rank) const { return partial_.data(rank); }
  // Points `rank`'s next calls at other operands (a, b, out; and with the norm residual,
  // residual_out, norm_weight, else nullptr). Host-only; between calls.
  void set_operands(int rank, const void* a, const void* b, void* out, const void* residual = nullptr,
                    void* residual_out = nullptr, const void* norm_weight = nullptr);

  // Later calls record the device timeline into `trace` (nullptr: off): every GEMM tile's epilogue
  // and notify (consumer thread 0; tile = m_tile * n_tiles + n_tile, each K slice its own), and the
  // reduction blocks' waits (tile = the channel) and reductions (TraceKind::kReduce, one per part,
  // tile = the same GEMM tile numbering). tilelink trace gemm_ar renders it.
  void set_trace(const TraceBuffer* trace);

  const GemmArPlan& plan() const { return plan_; }
  ArMethod method() const { return plan_.method; }
  // The partials per rank the reduction sums: the GEMM's K slices, or 1 where the GEMM sums them
  // (choice().splits is the GEMM's count either way).
  uint32_t splits() const { return plan_.splits; }
  // The path in use (config.path resolved by the world's transport).
  GemmArPath path() const { return plan_.copy_engine ? GemmArPath::kCopyEngine : GemmArPath::kSm; }
  uint32_t reduce_blocks() const { return reduce_blocks_; }
  int gemm_ctas() const;
  // The configuration asked for (the tune cache's, when it supplied one) and the cache file it came
  // from ("" when none).
  const GemmArConfig& config() const { return args_.config; }
  const std::string& tuned_from() const { return tuned_from_; }
  // The configuration in use (every automatic knob resolved) and the estimate it was chosen by.
  const GemmArChoice& choice() const { return choice_; }
  // One line: the method, schedule, splits and CTAs in use, and why (for the tool's output).
  std::string describe_choice() const;

 private:
  void make_kernel(int rank);
  bool gemm_writes_out() const;
  // `early`: the previous kernel on `stream` is this rank's GEMM; the reduction's CTAs are placed
  // while its last tiles finish and wait there for its writes (a programmatic dependent launch).
  void launch_reduce(int rank, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks,
                     GemmArPass pass = GemmArPass::kAll, bool early = false);
  // The all-reduce on the copy-engine path, on `stream`: the pushes, the kernel(s), the two-shot
  // gather, the exit barrier.
  void enqueue_copy_engine(int rank, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks);
  // Where the reduction of `plan` (plan_ or chain_plan_) runs its reduction.
  void enqueue_all_reduce(int rank, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks,
                          bool early = false);

  const World* world_;
  SymmetricHeap* heap_;
  GemmArArguments args_;
  GemmArPlan plan_;
  GemmArPlan chain_plan_;  // in_place: the all-reduce after a GEMM that notified nothing
  SignalSlice slice_;
  SignalSlice chain_slice_;
  SymmetricBuffer partial_;
  SymmetricBuffer reduced_;  // two-shot only
  SymmetricBuffer recv_;     // copy-engine path, world > 1: the peers' partials
  uint32_t reduce_blocks_ = 0;
  uint32_t chain_blocks_ = 0;
  int gemm_sms_ = 0;
  GemmArChoice choice_;
  std::vector<DeviceBuffer> m_order_;  // per rank, identity tile-row order
  // Per rank, the reduction kernels' work counters (gemm_ar_work's units): [0] for plan_'s, [1] for
  // chain_plan_'s. Each kernel leaves its counter at zero for the next one on its stream.
  std::vector<DeviceBuffer> queues_;
  // Per rank, the slots and flags of the K slices summed in the GEMM (detail::slice_sum_workspace);
  // empty when the reduction sums them. The rank's GEMMs run one after another on its stream.
  std::vector<DeviceBuffer> slice_sums_;
  std::vector<std::unique_ptr<detail::Sm90GemmArKernel>> kernels_;
  const TraceBuffer* trace_ = nullptr;
  std::string tuned_from_;
};

}  // namespace tilelink
