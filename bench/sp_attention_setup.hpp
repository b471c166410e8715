// The world, buffers and random inputs of an SP attention benchmark (bench sp_attention, trace
// sp_attention): make_bench_world's ranks, a heap with the gathered K/V rows (each rank's own rows
// filled), and per rank Q, O and LSE; `args` names them with the options' shape and config.
#pragma once

#include <string>
#include <vector>

#include "bench/sp_attention.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"

namespace tilelink::bench {

struct SpAttentionSetup : BenchMemory {
  int w;
  uint32_t spr;
  size_t kv_row_bytes, kv_bytes, q_elems, lse_elems;
  SymmetricBuffer kv;
  std::vector<DeviceBuffer> q, out, lse;
  SpAttentionArguments args;

  explicit SpAttentionSetup(const SpAttentionBenchOptions& o)
      : BenchMemory(o.world, size_t(o.seq) * 2 * o.kv_heads * o.head_dim * 2 + (16u << 20), 1u << 16),
        w(o.world),
        spr(o.seq / static_cast<uint32_t>(o.world)),
        kv_row_bytes(size_t(2) * o.kv_heads * o.head_dim * 2),
        kv_bytes(size_t(o.seq) * kv_row_bytes),
        q_elems(size_t(spr) * o.q_heads * o.head_dim),
        lse_elems(size_t(spr) * o.q_heads),
        kv(heap.allocate(kv_bytes)) {
    args.kv = &kv;
    args.seq_per_rank = spr;
    args.q_heads = o.q_heads;
    args.kv_heads = o.kv_heads;
    args.head_dim = o.head_dim;
    args.causal = o.causal;
    args.config = o.config;
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      const cudaStream_t s = world.compute_stream(r);
      q.emplace_back(q_elems * 2, dev);
      out.emplace_back(q_elems * 2, dev);
      lse.emplace_back(lse_elems * sizeof(float), dev);
      fill_bf16(q[r].get(), q_elems, rank_seed(o.seed ^ 0x51ull, r), s);
      fill_bf16(kv.as<char>(r) + size_t(r) * spr * kv_row_bytes, size_t(spr) * kv_row_bytes / 2,
                rank_seed(o.seed ^ 0x52ull, r), s);
      TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, q_elems * 2, s));
      args.q.push_back(q[r].get());
      args.o.push_back(out[r].get());
      args.lse.push_back(lse[r].get<float>());
    }
    check_implementable<SpAttention>(world, heap, args, "sp_attention");
  }
};

}  // namespace tilelink::bench
