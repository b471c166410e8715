// Sequence-parallel attention forward: the all-gather of K/V overlapped with flash attention.
//
// Every rank holds seq_per_rank tokens of Q, K and V of one sequence of S = world * seq_per_rank
// tokens (contiguous shards, or zig-zag: see SeqLayout), and gets O and LSE for its own queries
// over every key of the sequence (under the causal mask, keys at or before the query's position).
// bf16 in, bf16 out, fp32 softmax and accumulation; GQA (q_heads a multiple of kv_heads); head
// dim 64 or 128; scale 1 / sqrt(head_dim).
//
// Layouts (per rank, on the rank's device):
//  - q, o: seq_per_rank x q_heads x head_dim, packed (token-major, as a projection writes them);
//  - kv: the gathered K/V rows in a SymmetricBuffer, world * seq_per_rank rows of
//    [K (kv_heads x head_dim) | V (kv_heads x head_dim)], packed; rank r's own rows
//    [r * seq_per_rank, (r + 1) * seq_per_rank) must be in place before run();
//  - lse: q_heads x seq_per_rank fp32 (natural log).
//
// One call (run) enqueues, on every rank, the all-gather of the K/V rows on the comm stream (copy
// engine or SM pull, SpAttentionConfig::comm) and the attention kernel on the compute stream; the
// kernel's producer waits on each K/V chunk's channel before it loads the chunk, visiting chunks
// in the order they arrive (own shard first). The call is complete on the compute stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/attention/sp_attention_config.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/trace_buffer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/tune_cache.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

struct SpAttentionArguments {
  std::vector<const void*> q;          // per rank
  const SymmetricBuffer* kv = nullptr;  // gathered K/V rows
  size_t kv_offset = 0;                 // bytes into `kv` (16-byte aligned)
  std::vector<void*> o;                // per rank
  std::vector<float*> lse;             // per rank
  uint32_t seq_per_rank = 0;
  uint32_t q_heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  bool causal = false;
  SpAttentionConfig config;
};

// The tune cache's key of `args` on `world`: m = tokens over all ranks, n = q heads, k = kv heads;
// variant: head dim, mask and layout.
TuneKey sp_attention_tune_key(const World& world, const SpAttentionArguments& args);

namespace detail {
class Sm90FlashAttentionKernel;
}

class SpAttention {
 public:
  // Validates (InvalidArgument with the reason; nothing is launched), claims a signal slice,
  // builds every rank's kernel parameters and preloads the kernels.
  SpAttention(const World& world, SymmetricHeap& heap, SignalSet& signals, const SpAttentionArguments& args,
              const std::string& name = "sp_attention");
  ~SpAttention();
  SpAttention(const SpAttention&) = delete;
  SpAttention& operator=(const SpAttention&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap, const SpAttentionArguments& args);

  // Enqueues one call on every rank this process drives by the method that runs (method(): fused
  // unless SpAttentionConfig::method or the automatic choice says otherwise); returns its epoch
  // (0 for the ring, which has none).
  uint64_t run();
  // The method run() runs and why: "configured", the tune cache's measured winner, or the
  // estimate's fastest with its estimates.
  OpMethod method() const { return method_; }
  const std::string& method_why() const { return method_why_; }
  // Later calls of `rank` (a rank this process drives) read Q from `q` and write O and LSE to `o`
  // and `lse` (the same shapes and layouts; 16-byte aligned): the PyTorch operator's fresh tensors
  // every call. K/V stay in the symmetric buffer. Throws InvalidArgument naming a bad pointer.
  void set_operands(int rank, const void* q, void* o, float* lse);
  // The attention alone on K/V already gathered (no waits): the non-overlapped baseline's second
  // half and the kernel's isolated time.
  void run_attention_only();
  // The non-overlapped baseline: the same all-gather, then (the compute stream waiting for the
  // whole of it) the kernel without waits.
  void run_non_overlapped();
  // The ring-attention schedule (a baseline; one-process worlds only): world steps; at step s rank r attends to the shard
  // of rank r - s while the copy engine passes the shard it holds on to rank r + 1, and merges
  // the step's partial O by LSE. Same outputs as run().
  void run_ring();

  // Later fused calls record the device timeline into `trace` (nullptr: off): per work item each
  // K/V chunk's wait and loads (the loads are paced by the MMAs: the chunk's compute) and the
  // store of O, and on the SM path the all-gather blocks' waits, copies and notifies.
  // tilelink trace sp_attention renders it.
  void set_trace(const TraceBuffer* trace);

  const AllGather& all_gather() const { return *ag_; }
  AllGather& all_gather() { return *ag_; }
  const SpAttentionPlan& plan() const { return plan_; }
  // The configuration that runs (the tune cache's when it supplied one) and the cache file it
  // came from ("" when none).
  const SpAttentionConfig& config() const { return args_.config; }
  const std::string& tuned_from() const { return tuned_from_; }
  int attention_ctas(int rank) const;  // a rank this process drives
  // FLOPs of the attention on `rank` (4 * d per visible query-key pair and q head).
  double flops(int rank) const;

 private:
  struct Ring;
  const World* world_;
  SpAttentionArguments args_;
  std::string tuned_from_;
  SpAttentionPlan plan_;
  std::unique_ptr<AllGather> ag_;
  std::vector<DeviceBuffer> chunk_order_;  // per rank: the K/V chunks in arrival order
  std::vector<DeviceBuffer> o_acc_, ml_;   // per rank, with local_first: the parked state
  std::vector<std::unique_ptr<detail::Sm90FlashAttentionKernel>> kernels_;
  std::vector<std::unique_ptr<detail::Sm90FlashAttentionKernel>> plain_kernels_;
  std::unique_ptr<Ring> ring_;
  OpMethod method_ = OpMethod::kFused;
  std::string method_why_;
  uint64_t run_fused();
  void choose_method(OpMethod callers);
};

}  // namespace tilelink
