// AG+GEMM: the column-parallel linear layer with its all-gather hidden under the GEMM.
//
// Every rank r holds a row shard A_r (m_per_rank x K) of A and its own weight slice B_r; the op
// leaves C_r = allgather(A) * B_r^T (M x N, M = world * m_per_rank) on every rank. bf16 or FP8
// (e4m3 with tensor, row or block scales: ops/common/fp8.hpp) in, bf16 out, fp32 accumulation.
// In FP8 the all-gather moves e4m3 rows with their scales (about half the bytes of bf16), and
// with `a_source` the op quantises a bf16 shard itself before sending it.
//
// Layouts (the ones supported; anything else is refused by can_implement):
//  - A: row-major; the gathered tensor lives in a SymmetricBuffer (M x K, row pitch K * 2 bytes),
//    and rank r's own rows [r * m_per_rank, (r + 1) * m_per_rank) must be in place before run()
//    -- unless `a_source` gives the rank's shard elsewhere (a framework's tensor): bf16's is
//    copied in by the all-gather as its first work, one communication tile at a time under the
//    GEMM (at world 1 the GEMM reads it where it is), FP8's quantised in before the call.
//  - B: N x K row-major (K contiguous: torch.nn.Linear's weight, the "TN" GEMM). A K x N weight
//    (BLayout::kKN) is refused.
//  - C: M x N row-major, packed.
//  - FP8: A's gathered rows are packed FP8 rows (fp8.hpp: K e4m3 bytes, then the row's scales,
//    row pitch fp8_row_pitch(k, scaling)); B is N x K e4m3 with its scales apart.
//  K and N must be multiples of 8 (16-byte rows for TMA; FP8: K a multiple of 16, of 128 with
//  block scaling); M is any size.
//
// One call (run) enqueues, on every rank, the all-gather of A on the comm stream (SM blocks or the
// copy engine, AgGemmConfig::comm) and the fused GEMM on the compute stream: a persistent
// CUTLASS 4.2 warp-specialized TMA + WGMMA kernel whose producer warp waits on the all-gather's
// channels before it loads a tile's A rows (consumer_tile_wait), visiting tile rows in the order
// they arrive (the rank's own shard first). The call is complete on the compute stream.
// AgGemmConfig::method runs the same call decomposed (the compute stream waits for each shard's
// channels, then a plain GEMM of the shard's rows) or non-overlapped (the whole all-gather, then
// the plain GEMM); method() says which runs and why.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_config.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_policy.hpp"
#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

enum class BLayout : uint32_t {
  kNK = 0,  // N x K row-major (K contiguous). Supported.
  kKN = 1,  // K x N row-major (N contiguous). Refused.
};
const char* to_string(BLayout v);

struct AgGemmArguments {
  const SymmetricBuffer* a = nullptr;  // gathered A: world * m_per_rank rows of K bf16 (FP8: packed rows)
  size_t a_offset = 0;                 // bytes into `a` (16-byte aligned)
  std::vector<const void*> b;          // per rank: N x K bf16 (e4m3) on the rank's device
  std::vector<void*> c;                // per rank: M x N bf16 on the rank's device
  uint32_t m_per_rank = 0;
  uint32_t n = 0;
  uint32_t k = 0;
  BLayout b_layout = BLayout::kNK;
  AgGemmConfig config;
  // FP8 (ops/common/fp8.hpp). With dtype e4m3, `a` holds packed FP8 rows, `b` e4m3 weights, and:
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  std::vector<const float*> a_scale;  // tensor scaling: per rank, A's one scale (the same value on every rank)
  std::vector<const float*> b_scale;  // per rank: B's fp8_b_scales(n, k, scaling) scales
  // Per rank, its m_per_rank x K bf16 shard (K contiguous, 16-byte aligned) anywhere on its device;
  // empty: the caller wrote the rank's own rows of `a` itself.
  //  - bf16: each call's all-gather copies it into the rank's own rows, one communication tile at a
  //    time, each tile's channel set when it has landed (AllGatherArguments::own_rows), so the GEMM
  //    and the pulling peers start on the first tile rather than after a copy of the whole shard.
  //    At world 1 the GEMM reads it where it is: `a` is then not written.
  //  - FP8, quantise on send (row or block scaling): each call first quantises it into the rank's
  //    own packed rows of `a` (quantize_rows_e4m3, one pass), so that a bf16 caller sends FP8.
  std::vector<const void*> a_source;
};

// The tune cache's key of `args` on `world`: m = rows of C (all ranks), n = columns per rank, k.
TuneKey ag_gemm_tune_key(const World& world, const AgGemmArguments& args);

namespace detail {
class Sm90AgGemmKernel;
struct Sm90AgGemmConfigInfo;
}

class AgGemm {
 public:
  // Validates (InvalidArgument with the reason; nothing is launched), claims a signal slice,
  // builds every rank's kernel parameters and preloads the kernels.
  AgGemm(const World& world, SymmetricHeap& heap, SignalSet& signals, const AgGemmArguments& args,
         const std::string& name = "ag_gemm");
  ~AgGemm();
  AgGemm(const AgGemm&) = delete;
  AgGemm& operator=(const AgGemm&) = delete;

  // "" if `args` can run on `world`, else why not (argument, value, expectation).
  static std::string can_implement(const World& world, const SymmetricHeap& heap, const AgGemmArguments& args);
  // The compiled kernel configurations for bf16 operands, or for e4m3 ones of a scaling mode.
  static std::vector<std::string> kernel_names();
  static std::vector<std::string> kernel_names(DType dtype, Fp8Scaling scaling = Fp8Scaling::kTensor);

  // Enqueues one call on every rank; returns its epoch.
  uint64_t run();
  // The GEMM alone, on data already gathered (no waits): the fused kernel's isolated compute time.
  void run_gemm_only();
  // Points `rank`'s next calls at another weight (N x K) and output (M x N), as a framework that
  // allocates a call's output itself needs (the PyTorch ops): host-only, no synchronisation; the
  // kernels' descriptors are rebuilt when a pointer changed. Enqueue it after the previous call
  // (the stream order keeps that call's operands). Throws InvalidArgument on a null or misaligned
  // pointer.
  void set_operands(int rank, const void* b, void* c);
  // Built with a_source: the same with the rank's shard for the next calls. A new shard address
  // costs nothing beyond world 1, where the GEMM's descriptors hold it and are rebuilt.
  void set_operands(int rank, const void* b, void* c, const void* a_source);
  // FP8: the same with B's scales (and, quantising on send, the rank's bf16 shard; else nullptr).
  void set_operands(int rank, const void* b, const float* b_scale, void* c, const void* a_source);
  // Bytes of one gathered row of A: K bf16, or fp8_row_pitch(k, scaling).
  uint64_t row_bytes() const { return row_bytes_; }
  // Later calls record the device timeline into `trace` (nullptr: off): every GEMM tile's wait
  // for its rows and its TMA loads (producer) and epilogue (consumer), and, on the SM path, the
  // all-gather blocks' waits, copies and notifies. tilelink trace renders it.
  void set_trace(const TraceBuffer* trace);

  // The all-gather half (benchmarks time it alone).
  const AllGather& all_gather() const { return *ag_; }
  AllGather& all_gather() { return *ag_; }
  uint32_t m() const { return m_; }
  int gemm_ctas(int rank) const;
  const std::string& kernel_name() const { return kernel_name_; }
  uint32_t swizzle() const { return swizzle_; }
  // The configuration in use (the caller's, or the tune cache's), and the cache file it came
  // from ("" when not from the cache).
  const AgGemmConfig& config() const { return args_.config; }
  const std::string& tuned_from() const { return tuned_from_; }
  // The method that runs (AgGemmConfig::method resolved) and why: "configured", the tune
  // cache's measured winner, or the estimate's fastest with the three estimates.
  OpMethod method() const { return method_; }
  const std::string& method_why() const { return method_why_; }
  const ag_gemm_policy::MethodEstimates& method_estimates() const { return estimates_; }
  // The rank's tile-row visiting order (host copy).
  const std::vector<uint32_t>& m_order(int rank) const { return m_order_host_[static_cast<size_t>(rank)]; }

 private:
  const World* world_;
  AgGemmArguments args_;
  uint32_t m_ = 0;
  uint64_t row_bytes_ = 0;
  std::string kernel_name_;
  std::string tuned_from_;
  uint32_t swizzle_ = 1;
  std::unique_ptr<AllGather> ag_;
  std::vector<std::vector<uint32_t>> m_order_host_;
  std::vector<DeviceBuffer> m_order_;
  // Per rank: the kernels' scheduler workspaces (the split tail's), kept across kernel rebuilds.
  std::vector<std::vector<DeviceBuffer>> workspaces_;
  std::vector<std::unique_ptr<detail::Sm90AgGemmKernel>> kernels_;
  std::vector<std::unique_ptr<detail::Sm90AgGemmKernel>> plain_kernels_;
  const detail::Sm90AgGemmConfigInfo* kernel_info_ = nullptr;
  const TraceBuffer* trace_ = nullptr;
  OpMethod method_ = OpMethod::kFused;
  std::string method_why_;
  ag_gemm_policy::MethodEstimates estimates_;
  std::vector<DeviceBuffer> shard_order_;  // decomposed: identity tile-row order of one shard
  std::vector<std::vector<uint32_t>> shard_arrival_;  // decomposed: the shards as they land on the rank
  std::vector<std::vector<std::unique_ptr<detail::Sm90AgGemmKernel>>> shard_kernels_;  // [rank][shard]
  std::vector<std::unique_ptr<detail::Sm90AgGemmKernel>> whole_kernels_;  // non-overlapped: on the whole budget

  void make_kernels(int rank);
  void quantize_own_rows();
  void choose_method(OpMethod callers, const detail::Sm90AgGemmConfigInfo& kernel);
  uint64_t run_non_overlapped();
  uint64_t run_decomposed();
};

}  // namespace tilelink
