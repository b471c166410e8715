// One draw per op: the world, the shape, the offsets and the op's whole Config (fuzz_space.hpp).
#pragma once

#include "fuzz_knobs.hpp"

namespace tilelink::fuzz {

// ---- the ops' draws --------------------------------------------------------------------------------

// AllGather: rows_per_rank rows of row_bytes each from every rank, at gathered_offset.
struct AllGatherDraw {
  int world = 1;
  uint32_t rows_per_rank = 0;
  uint32_t row_bytes = 0;
  size_t gathered_offset = 0;
  AllGatherConfig config;
};

inline AllGatherDraw draw_all_gather(Rng& r, const Space& s) {
  AllGatherDraw d;
  d.world = draw::world(r);
  d.rows_per_rank = draw::rows(r, s);
  d.row_bytes = 2 * draw::width(r, s);  // rows of bf16 elements: 16-byte multiples unless refused
  d.gathered_offset = draw::offset(r);
  d.config = draw::all_gather_config(r, s, d.world, d.rows_per_rank);
  return d;
}

// ReduceScatter: world * rows_per_rank rows of `cols` floats on every rank.
struct ReduceScatterDraw {
  int world = 1;
  uint32_t rows_per_rank = 0;
  uint32_t cols = 0;
  ReduceScatterConfig config;
};

inline ReduceScatterDraw draw_reduce_scatter(Rng& r, const Space& s) {
  ReduceScatterDraw d;
  d.world = draw::world(r);
  d.rows_per_rank = draw::rows(r, s);
  d.cols = draw::width(r, s) / 2;  // floats: 16-byte rows when the width is a multiple of 8
  d.config.method = r.chance(50) ? RsMethod::kPush : RsMethod::kPull;
  d.config.path = r.chance(50) ? DataPath::kLdSt : DataPath::kBulk;
  d.config.comm_rows = draw::comm_rows(r, d.rows_per_rank);
  d.config.num_blocks = draw::blocks(r, s, d.world);
  d.config.threads = draw::threads(r);
  return d;
}

// AgGemm: C (world * m_per_rank x n) = allgather(A) * B^T, A at a_offset in its buffer.
struct AgGemmDraw {
  int world = 1;
  uint32_t m_per_rank = 0, n = 0, k = 0;
  size_t a_offset = 0;
  BLayout b_layout = BLayout::kNK;
  AgGemmConfig config;
};

inline AgGemmDraw draw_ag_gemm(Rng& r, const Space& s) {
  AgGemmDraw d;
  d.world = draw::world(r);
  d.m_per_rank = draw::rows(r, s);
  d.n = draw::width(r, s);
  d.k = draw::width(r, s);
  d.a_offset = draw::offset(r);
  d.b_layout = r.chance(95) ? BLayout::kNK : BLayout::kKN;  // K x N is refused
  d.config = draw::ag_gemm_config(r, s, d.world, d.m_per_rank);
  return d;
}

// M for the ops that split M over the ranks (GemmRs, Mlp): whole tile rows per rank, rows per
// rank off the grid (refused by GemmRs), M not a multiple of the world, M < world, M = 0.
inline uint32_t draw_split_m(Rng& r, const Space& s, int world) {
  const uint32_t w = static_cast<uint32_t>(world);
  switch (r.weighted({75, 10, 6, 6, 3})) {
    case 0: return w * s.tile_m * r.range32(1, 2);
    case 1: return w * r.small32(1, s.max_rows);
    case 2: return w * r.small32(1, s.max_rows) + r.range32(1, w > 1 ? w - 1 : 1);
    case 3: return w > 1 ? r.range32(1, w - 1) : 1;
    default: return 0;
  }
}

// GemmRs: every rank's M x K partial product, reduced and scattered in rows of M / world.
struct GemmRsDraw {
  int world = 1;
  uint32_t m = 0, n = 0, k = 0;
  bool with_recv = true;  // the receive slots (needed by the copy-engine scatter only)
  GemmRsConfig config;
};

inline GemmRsDraw draw_gemm_rs(Rng& r, const Space& s) {
  GemmRsDraw d;
  d.world = draw::world(r);
  d.m = draw_split_m(r, s, d.world);
  d.n = draw::width(r, s);
  d.k = draw::width(r, s);
  d.config = draw::gemm_rs_config(r, s, d.world);
  d.with_recv = r.chance(85);
  return d;
}

// Mlp: AG+GEMM (fc1) -> activation -> GEMM+RS (fc2); intermediate over all ranks.
struct MlpDraw {
  int world = 1;
  uint32_t m = 0, hidden = 0, intermediate = 0;
  bool with_recv = true;
  MlpConfig config;
};

inline MlpDraw draw_mlp(Rng& r, const Space& s) {
  MlpDraw d;
  d.world = draw::world(r);
  d.m = draw_split_m(r, s, d.world);
  d.hidden = draw::width(r, s);
  const uint32_t w = static_cast<uint32_t>(d.world);
  switch (r.weighted({93, 5, 2})) {
    case 0: d.intermediate = w * 8 * r.small32(1, s.max_width / 8); break;
    case 1: d.intermediate = w * r.range32(1, s.max_width); break;  // per-rank slice off 16 bytes: refused
    default: d.intermediate = 0; break;
  }
  d.config.activation = draw::activation(r);
  d.config.fc1 = draw::ag_gemm_config(r, s, d.world, d.m / w);
  d.config.fc2 = draw::gemm_rs_config(r, s, d.world);
  d.with_recv = r.chance(85);
  return d;
}

// MoeAgGroupGemm: all-gather of the tokens + gather by expert + grouped GEMM (n columns).
struct MoeAgDraw {
  int world = 1;
  uint32_t tokens_per_rank = 0, hidden = 0, n = 0, experts = 0, topk = 0;
  size_t x_offset = 0;
  SyntheticRouting routing = SyntheticRouting::kUniform;
  MoeAgGroupGemmConfig config;
};

inline MoeAgDraw draw_moe_ag(Rng& r, const Space& s) {
  MoeAgDraw d;
  d.world = draw::world(r);
  d.tokens_per_rank = draw::rows(r, s);
  d.hidden = draw::width(r, s);
  d.n = draw::width(r, s);
  draw::experts_topk(r, s, &d.experts, &d.topk);
  d.x_offset = draw::offset(r);
  d.routing = draw::routing(r);
  d.config = draw::moe_ag_config(r, s, d.world, d.tokens_per_rank);
  return d;
}

// MoeGemmRs: grouped GEMM (k columns in, n out) + top-k combine + reduce-scatter to the owners.
struct MoeRsDraw {
  int world = 1;
  uint32_t tokens_per_rank = 0, n = 0, k = 0, experts = 0, topk = 0;
  SyntheticRouting routing = SyntheticRouting::kUniform;
  MoeGemmRsConfig config;
};

inline MoeRsDraw draw_moe_rs(Rng& r, const Space& s) {
  MoeRsDraw d;
  d.world = draw::world(r);
  d.tokens_per_rank = draw::rows(r, s);
  d.n = draw::width(r, s);
  d.k = draw::width(r, s);
  draw::experts_topk(r, s, &d.experts, &d.topk);
  d.routing = draw::routing(r);
  d.config = draw::moe_rs_config(r, s, d.world, d.tokens_per_rank);
  return d;
}

// MoeLayer: part 1 -> activation -> part 2; intermediate over all ranks.
struct MoeLayerDraw {
  int world = 1;
  uint32_t tokens_per_rank = 0, hidden = 0, intermediate = 0, experts = 0, topk = 0;
  size_t x_offset = 0;
  SyntheticRouting routing = SyntheticRouting::kUniform;
  MoeLayerConfig config;
};

inline MoeLayerDraw draw_moe_layer(Rng& r, const Space& s) {
  MoeLayerDraw d;
  d.world = draw::world(r);
  d.tokens_per_rank = draw::rows(r, s);
  d.hidden = draw::width(r, s);
  const uint32_t w = static_cast<uint32_t>(d.world);
  d.intermediate = r.chance(95) ? w * 8 * r.small32(1, s.max_width / 8) : w * r.range32(0, s.max_width);
  draw::experts_topk(r, s, &d.experts, &d.topk);
  d.x_offset = draw::offset(r);
  d.routing = draw::routing(r);
  d.config.activation = draw::activation(r);
  d.config.part1 = draw::moe_ag_config(r, s, d.world, d.tokens_per_rank);
  d.config.part2 = draw::moe_rs_config(r, s, d.world, d.tokens_per_rank);
  d.config.use_tune_cache = r.chance(50);
  return d;
}

// SpAttention: the K/V all-gather under flash attention, seq_per_rank tokens per rank.
struct SpAttentionDraw {
  int world = 1;
  uint32_t seq_per_rank = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
  size_t kv_offset = 0;
  SpAttentionConfig config;
};

inline SpAttentionDraw draw_sp_attention(Rng& r, const Space& s) {
  SpAttentionDraw d;
  d.world = draw::world(r);
  d.seq_per_rank = draw::rows(r, s);
  d.config.layout = r.chance(50) ? SeqLayout::kContiguous : SeqLayout::kZigZag;
  // The zig-zag layout cuts a shard in two halves: an odd one (refused) now and then.
  if (d.config.layout == SeqLayout::kZigZag && d.seq_per_rank % 2 == 1 && r.chance(80)) ++d.seq_per_rank;
  d.kv_heads = r.chance(98) ? r.range32(1, s.max_kv_heads) : 0;
  // GQA, MQA (kv_heads 1) and MHA (group 1); rarely q_heads not a multiple of kv_heads (refused).
  d.q_heads = r.chance(96) ? (d.kv_heads > 0 ? d.kv_heads : 1) * r.range32(1, 4) : r.range32(1, 9);
  switch (r.weighted({48, 48, 4})) {
    case 0: d.head_dim = 64; break;
    case 1: d.head_dim = 128; break;
    default: d.head_dim = r.pick({0u, 32u, 96u, 256u}); break;  // no kernel: refused
  }
  d.causal = r.chance(50);
  d.kv_offset = draw::offset(r);
  d.config.comm = draw::all_gather_config(r, s, d.world, d.seq_per_rank);
  // The kernel's key tile is 128 tokens: chunks of whole tiles or at least a shard; rarely other
  // sizes (refused unless they cover the shard).
  const uint32_t shard = d.seq_per_rank > 0 ? d.seq_per_rank : 1;
  switch (r.weighted({40, 35, 15, 10})) {
    case 0: d.config.comm.comm_rows = 0; break;
    case 1: d.config.comm.comm_rows = 128 * r.range32(1, 3); break;
    case 2: d.config.comm.comm_rows = shard + r.range32(0, shard); break;
    default: break;  // draw::comm_rows's
  }
  d.config.local_first = r.chance(35);
  switch (r.weighted({60, 10, 20, 10})) {
    case 0: d.config.attention_sms = 0; break;
    case 1: d.config.attention_sms = 1; break;
    case 2: d.config.attention_sms = r.range32(2, s.sms / static_cast<uint32_t>(d.world)); break;
    default: d.config.attention_sms = r.range32(s.sms, 4 * s.sms); break;
  }
  switch (r.weighted({50, 42, 8})) {
    case 0: d.config.section_kv_heads = 0; break;
    case 1: {  // a divisor of kv_heads
      std::vector<uint32_t> divisors;
      for (uint32_t h = 1; h <= d.kv_heads; ++h) {
        if (d.kv_heads % h == 0) divisors.push_back(h);
      }
      d.config.section_kv_heads = divisors.empty() ? 1 : r.pick(divisors);
      break;
    }
    default: d.config.section_kv_heads = r.range32(1, 2 * s.max_kv_heads); break;  // often not a divisor
  }
  d.config.use_tune_cache = r.chance(50);
  return d;
}


}  // namespace tilelink::fuzz
