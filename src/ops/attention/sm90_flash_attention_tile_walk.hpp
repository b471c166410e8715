// The SP attention kernel's walk over its work: which items a CTA takes and in which order, in
// how many passes, and which key tiles of which K/V chunks an item visits. Plain
// __host__ __device__ code over SpAttentionPlan: the producer and the consumers of the kernel
// (sm90_flash_attention_kernel.cuh) run it on the GPU, and tests/cpu/test_attention_tile_walk.cpp
// runs the same code on the CPU against a reference.
//
// Items and their order are SpAttentionPlan::item's (sections of section_kv_heads kv heads for L2,
// the q heads of one query block together, the heaviest causal query blocks first); this file adds
// how the persistent grid deals them and how an item's chunks become key tiles.
#pragma once

#include <cstdint>

#include "tilelink/comm/protocol_common.hpp"
#include "tilelink/ops/attention/sp_attention_protocol.hpp"

namespace tilelink::detail {

// Key rows per key tile and query rows per work item of every compiled kernel.
constexpr uint32_t kFlashBlockN = 128;
constexpr uint32_t kFlashBlockM = 128;

// One key tile of a work item: gathered rows [g0, g0 + rows) of source shard `shard`, its index
// among the shard's tiles, and whether it starts a chunk (the producer waits there).
struct FlashKeyTile {
  uint32_t shard, tile, g0, rows, chunk;
  bool first_of_chunk;
};

// One pass over the work items: chunks [j0, j1) of the arrival order. One pass over all chunks;
// with the local pass first (SpAttentionPlan::local_first), the own shard's chunks, then the
// rest. `resume`: items start from the state the previous pass parked; `park`: they end by
// parking it (fp32 o, m, l) instead of writing O and LSE.
struct FlashPass {
  uint32_t j0, j1;
  bool resume, park;
};
TL_HOST_DEVICE FlashPass flash_pass(const SpAttentionPlan& plan, uint32_t pass) {
  const uint32_t own = plan.ag.map.chunks_per_rank(), chunks = plan.num_kv_chunks();
  if (!plan.local_first) return {0, chunks, false, false};
  return pass == 0 ? FlashPass{0, own, false, own < chunks} : FlashPass{own, chunks, true, false};
}
// Passes to run: 1, or 2 with the local pass first (1 at world 1, where it is everything).
TL_HOST_DEVICE uint32_t flash_passes(const SpAttentionPlan& plan) {
  return plan.local_first && plan.ag.map.chunks_per_rank() < plan.num_kv_chunks() ? 2 : 1;
}

// The persistent grid's deal of the work items (FA3's tile scheduler): CTA `cta` of `ctas` takes
// items cta, cta + ctas, ... (round-robin) in every pass, so the state an item parks at the end of
// pass 0 is resumed by the same consumer threads. for_each calls f(pass, i, n), n counting the
// CTA's items over all passes (the phase of the Q barriers). The kernel's producer runs for_each;
// its consumers write the same two loops out (sm90_flash_attention_kernel.cuh says why).
struct FlashItemScheduler {
  const SpAttentionPlan* plan;
  uint32_t num_items;

  TL_HOST_DEVICE explicit FlashItemScheduler(const SpAttentionPlan& p) : plan(&p), num_items(p.num_items()) {}

  TL_PROTOCOL
  template <class F>
  TL_HOST_DEVICE void for_each(uint32_t cta, uint32_t ctas, F&& f) const {
    uint32_t n = 0;
    for (uint32_t pass = 0; pass < flash_passes(*plan); ++pass)
      for (uint32_t i = cta; i < num_items; i += ctas, ++n) f(pass, i, n);
  }
};

// The key tiles of one work item in the order both sides visit them: the item's chunks in the
// rank's arrival order (chunk_order[j] = SpAttentionPlan::kv_chunk(rank, j), a table the host
// builds: kv_chunk itself walks the all-gather's schedule), tiles of a chunk in row order; under
// the causal mask a chunk or tile whose first key comes after the item's last query is skipped.
// only_shard >= 0 (a ring step): only that source shard's chunks.
struct FlashTileCursor {
  const SpAttentionPlan* plan;
  const uint32_t* chunk_order;
  uint32_t rank;
  int32_t only_shard;
  RowRange q;        // the item's valid local query rows
  uint32_t q_last;   // position of its last query
  uint32_t j = 0;    // chunk index in arrival order
  uint32_t j_end;    // the pass's chunks: [j, j_end) of the arrival order
  uint32_t t = 0;    // tile within the chunk
  uint32_t chunk = 0;
  RowRange keys{0, 0};

  TL_HOST_DEVICE FlashTileCursor(const SpAttentionPlan& p, const uint32_t* order, uint32_t r, int32_t only,
                                 RowRange qr, FlashPass pass)
      : plan(&p),
        chunk_order(order),
        rank(r),
        only_shard(only),
        q(qr),
        q_last(p.position(r, qr.row0 + qr.rows - 1)),
        j(pass.j0),
        j_end(pass.j1) {}

  TL_HOST_DEVICE bool next(FlashKeyTile& out) {
    const uint32_t spr = plan->seq_per_rank();
    while (true) {
      if (t * kFlashBlockN < keys.rows) {
        const uint32_t g0 = keys.row0 + t * kFlashBlockN;
        const uint32_t shard = g0 / spr;
        if (plan->causal && plan->position(shard, g0 - shard * spr) > q_last) {
          keys.rows = 0;  // positions grow with rows: the rest of the chunk is later still
          continue;
        }
        const uint32_t left = keys.row0 + keys.rows - g0;
        out.shard = shard;
        out.tile = (g0 - shard * spr) / kFlashBlockN;
        out.g0 = g0;
        out.rows = left < kFlashBlockN ? left : kFlashBlockN;
        out.chunk = chunk;
        out.first_of_chunk = t == 0;
        ++t;
        return true;
      }
      if (j >= j_end) return false;
      chunk = chunk_order[j++];
      keys = plan->ag.map.rows_of_channel(chunk);
      t = 0;
      if ((only_shard >= 0 && keys.row0 / spr != static_cast<uint32_t>(only_shard)) ||
          !plan->chunk_needed(rank, q, chunk)) {
        keys.rows = 0;
      }
    }
  }
};

}  // namespace tilelink::detail
