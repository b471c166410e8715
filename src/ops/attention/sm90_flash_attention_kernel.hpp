// The flash-attention forward kernel of one rank behind a plain C++ interface: sp_attention.cpp
// never sees a CuTe type. One compiled instantiation per head dim
// (sm90_flash_attention_hd<D>.cu), listed in sm90_flash_attention_configs().
//
// The kernel (sm90_flash_attention_kernel.cuh, its parts by role beside it) is persistent and
// warp-specialized on CuTe sm_90a: one producer thread issues the TMA loads of Q and of K and V
// key tiles, and before the first key tile of each K/V chunk it waits on the chunk's all-gather
// channel (consumer_tile_wait) in the rank's arrival order, own shard first; two consumer
// warpgroups each own 64 query rows of a 128-row work item and run S = Q K^T and O += P V on WGMMA
// with the online softmax in registers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/attention/sm90_flash_attention_tile_walk.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

// Everything one rank's kernel needs; pointers are on the rank's device, bf16 unless said.
struct Sm90FlashAttentionProblem {
  const void* q = nullptr;   // seq_per_rank x q_heads x head_dim, packed
  const void* kv = nullptr;  // world * seq_per_rank gathered rows [K | V], plan.ag.pitch bytes apart
  void* o = nullptr;         // seq_per_rank x q_heads x head_dim, packed
  float* lse = nullptr;      // q_heads x seq_per_rank (natural log)
  SpAttentionPlan plan;      // plan.bq = kFlashBlockM; comm_rows a multiple of kFlashBlockN or >= seq_per_rank
  uint32_t rank = 0;
  const uint32_t* chunk_order = nullptr;  // [plan.num_kv_chunks()]: kv_chunk(rank, j) for every j
  SignalView sig;            // epoch is set per call by run()
  bool wait = true;          // false: K/V already gathered (no waits)
  // >= 0: only the keys of that source shard (a ring-attention step). Rows that see none of them
  // get O = 0 and LSE = -inf, so that partial results merge by LSE.
  int32_t only_shard = -1;
  // plan.local_first: the state each item parks between the passes (fp32 o, seq_per_rank x
  // q_heads x head_dim; m then l, each q_heads x seq_per_rank).
  float* o_acc = nullptr;
  float* ml = nullptr;
  int device = 0;
  int sm_count = 0;          // CTAs of the persistent grid
};

class Sm90FlashAttentionKernel {
 public:
  virtual ~Sm90FlashAttentionKernel() = default;
  // Launches on `stream` with the signals' epoch of this call.
  virtual void run(uint64_t epoch, cudaStream_t stream) = 0;
  // A ring step: the same launch restricted to the keys of `shard` (no waits).
  virtual void set_only_shard(int32_t shard) = 0;
  // Later runs record, per work item, the producer's wait and loads of each K/V chunk (role 0,
  // tile = the chunk's channel) and the consumers' store of O (role 1, tile = the item); a
  // default TraceView: off.
  virtual void set_trace(const TraceView& trace) = 0;
  // Later runs read Q from `q` and write O and LSE to `o` and `lse` (same shapes).
  virtual void set_operands(const void* q, void* o, float* lse) = 0;
  virtual int ctas() const = 0;
};

struct Sm90FlashAttentionConfigInfo {
  uint32_t head_dim;
  std::string (*can_implement)(const Sm90FlashAttentionProblem& p);
  std::unique_ptr<Sm90FlashAttentionKernel> (*make)(const Sm90FlashAttentionProblem& p);
};

const std::vector<Sm90FlashAttentionConfigInfo>& sm90_flash_attention_configs();

// The ring schedule's merge of one partial result (bf16 O_s, LSE_s) into a running one (fp32 O,
// LSE); `last` writes the merged bf16 O and LSE to `o_out` / `lse_out` instead. rows x heads x d.
void ring_merge(const void* o_part, const float* lse_part, float* o_acc, float* lse_acc, void* o_out,
                float* lse_out, uint32_t rows, uint32_t heads, uint32_t head_dim, bool first, bool last,
                cudaStream_t stream);

}  // namespace tilelink::detail
