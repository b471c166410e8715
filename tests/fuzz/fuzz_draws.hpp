// One draw per op: the world, the shape, the offsets and the op's whole Config (fuzz_space.hpp).
#pragma once

#include <type_traits>

#include "fuzz_knobs.hpp"

namespace tilelink::fuzz {

// ---- the ops' draws --------------------------------------------------------------------------------
// A draw is the world and the op's Arguments with everything but the buffers (sizes, offsets,
// configuration): a runner copies them and attaches its buffers. The MoE ops' draws add the
// routing; GemmRs's and Mlp's whether the caller passes the receive slots (needed by the
// copy-engine scatter only).

template <class Args>
struct Draw {
  int world = 1;
  Args args;
  // The ops that take the rank's shard from anywhere (AgGemm's a_source, Mlp's and the MoE ops'
  // x_source): whether the runner hands it over so. Drawn last, so that a seed's other fields are
  // what they were before it existed.
  bool from_source = false;
};

template <class Args>
struct RoutedDraw : Draw<Args> {
  SyntheticRouting routing = SyntheticRouting::kUniform;
};

template <class Args>
struct RecvDraw : Draw<Args> {
  bool with_recv = true;
};

using AllGatherDraw = Draw<AllGatherArguments>;
using ReduceScatterDraw = Draw<ReduceScatterArguments>;
using AgGemmDraw = Draw<AgGemmArguments>;
using GemmRsDraw = RecvDraw<GemmRsArguments>;
using MlpDraw = RecvDraw<MlpArguments>;
using MoeAgDraw = RoutedDraw<MoeAgGroupGemmArguments>;
using MoeRsDraw = RoutedDraw<MoeGemmRsArguments>;
using MoeLayerDraw = RoutedDraw<MoeLayerArguments>;
using SpAttentionDraw = Draw<SpAttentionArguments>;

// AllGather: rows_per_rank rows of row_bytes each from every rank, at gathered_offset.
inline AllGatherDraw draw_all_gather(Rng& r, const Space& s) {
  AllGatherDraw d;
  d.world = draw::world(r);
  d.args.rows_per_rank = draw::rows(r, s);
  d.args.row_bytes = 2 * draw::width(r, s);  // rows of bf16 elements: 16-byte multiples unless refused
  d.args.gathered_offset = draw::offset(r);
  d.args.config = draw::all_gather_config(r, s, d.world, d.args.rows_per_rank);
  return d;
}

// ReduceScatter: world * rows_per_rank rows of `cols` floats on every rank.
inline ReduceScatterDraw draw_reduce_scatter(Rng& r, const Space& s) {
  ReduceScatterDraw d;
  d.world = draw::world(r);
  d.args.rows_per_rank = draw::rows(r, s);
  d.args.cols = draw::width(r, s) / 2;  // floats: 16-byte rows when the width is a multiple of 8
  d.args.config.method = r.chance(50) ? RsMethod::kPush : RsMethod::kPull;
  d.args.config.path = r.chance(50) ? DataPath::kLdSt : DataPath::kBulk;
  d.args.config.comm_rows = draw::comm_rows(r, d.args.rows_per_rank);
  d.args.config.num_blocks = draw::blocks(r, s, d.world);
  d.args.config.threads = draw::threads(r);
  return d;
}

// AgGemm: C (world * m_per_rank x n) = allgather(A) * B^T, A at a_offset in its buffer.
inline AgGemmDraw draw_ag_gemm(Rng& r, const Space& s) {
  AgGemmDraw d;
  d.world = draw::world(r);
  d.args.m_per_rank = draw::rows(r, s);
  d.args.n = draw::width(r, s);
  d.args.k = draw::width(r, s);
  d.args.a_offset = draw::offset(r);
  d.args.b_layout = r.chance(95) ? BLayout::kNK : BLayout::kKN;  // K x N is refused
  d.args.config = draw::ag_gemm_config(r, s, d.world, d.args.m_per_rank);
  d.from_source = r.chance(30);
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
inline GemmRsDraw draw_gemm_rs(Rng& r, const Space& s) {
  GemmRsDraw d;
  d.world = draw::world(r);
  d.args.m = draw_split_m(r, s, d.world);
  d.args.n = draw::width(r, s);
  d.args.k = draw::width(r, s);
  d.args.config = draw::gemm_rs_config(r, s, d.world);
  d.with_recv = r.chance(85);
  return d;
}

// Mlp: AG+GEMM (fc1) -> activation -> GEMM+RS (fc2); intermediate over all ranks.
inline MlpDraw draw_mlp(Rng& r, const Space& s) {
  MlpDraw d;
  d.world = draw::world(r);
  d.args.m = draw_split_m(r, s, d.world);
  d.args.hidden = draw::width(r, s);
  const uint32_t w = static_cast<uint32_t>(d.world);
  switch (r.weighted({93, 5, 2})) {
    case 0: d.args.intermediate = w * 8 * r.small32(1, s.max_width / 8); break;
    case 1: d.args.intermediate = w * r.range32(1, s.max_width); break;  // per-rank slice off 16 bytes: refused
    default: d.args.intermediate = 0; break;
  }
  d.args.config.activation = draw::activation(r);
  d.args.config.fc1 = draw::ag_gemm_config(r, s, d.world, d.args.m / w);
  d.args.config.fc2 = draw::gemm_rs_config(r, s, d.world);
  d.with_recv = r.chance(85);
  d.from_source = r.chance(30);
  return d;
}

// The MoE ops' configurations, drawn for `world` ranks of tokens_per_rank tokens.
inline void draw_moe_config(Rng& r, const Space& s, int world, uint32_t tokens_per_rank, MoeAgGroupGemmConfig& c) {
  c = draw::moe_ag_config(r, s, world, tokens_per_rank);
}
inline void draw_moe_config(Rng& r, const Space& s, int world, uint32_t tokens_per_rank, MoeGemmRsConfig& c) {
  c = draw::moe_rs_config(r, s, world, tokens_per_rank);
}
inline void draw_moe_config(Rng& r, const Space& s, int world, uint32_t tokens_per_rank, MoeLayerConfig& c) {
  c.activation = draw::activation(r);
  c.part1 = draw::moe_ag_config(r, s, world, tokens_per_rank);
  c.part2 = draw::moe_rs_config(r, s, world, tokens_per_rank);
  c.use_tune_cache = r.chance(50);
}

// A MoE op's draw, in this order: the world, the tokens per rank, the op's own sizes (`sizes`,
// given the args and the world), the experts and top-k, the offset of the tokens in x (the ops
// that gather x), the routing, the configuration.
template <class Args, class Sizes>
RoutedDraw<Args> draw_moe(Rng& r, const Space& s, Sizes&& sizes) {
  RoutedDraw<Args> d;
  d.world = draw::world(r);
  d.args.tokens_per_rank = draw::rows(r, s);
  sizes(d.args, static_cast<uint32_t>(d.world));
  draw::experts_topk(r, s, &d.args.experts, &d.args.topk);
  if constexpr (!std::is_same_v<Args, MoeGemmRsArguments>) d.args.x_offset = draw::offset(r);
  d.routing = draw::routing(r);
  draw_moe_config(r, s, d.world, d.args.tokens_per_rank, d.args.config);
  if constexpr (!std::is_same_v<Args, MoeGemmRsArguments>) d.from_source = r.chance(30);
  return d;
}

// MoeAgGroupGemm: all-gather of the tokens + gather by expert + grouped GEMM (n columns).
inline MoeAgDraw draw_moe_ag(Rng& r, const Space& s) {
  return draw_moe<MoeAgGroupGemmArguments>(r, s, [&](MoeAgGroupGemmArguments& a, uint32_t) {
    a.hidden = draw::width(r, s);
    a.n = draw::width(r, s);
  });
}

// MoeGemmRs: grouped GEMM (k columns in, n out) + top-k combine + reduce-scatter to the owners.
inline MoeRsDraw draw_moe_rs(Rng& r, const Space& s) {
  return draw_moe<MoeGemmRsArguments>(r, s, [&](MoeGemmRsArguments& a, uint32_t) {
    a.n = draw::width(r, s);
    a.k = draw::width(r, s);
  });
}

// MoeLayer: part 1 -> activation -> part 2; intermediate over all ranks.
inline MoeLayerDraw draw_moe_layer(Rng& r, const Space& s) {
  return draw_moe<MoeLayerArguments>(r, s, [&](MoeLayerArguments& a, uint32_t w) {
    a.hidden = draw::width(r, s);
    a.intermediate = r.chance(95) ? w * 8 * r.small32(1, s.max_width / 8) : w * r.range32(0, s.max_width);
  });
}

// SpAttention: the K/V all-gather under flash attention, seq_per_rank tokens per rank.
inline SpAttentionDraw draw_sp_attention(Rng& r, const Space& s) {
  SpAttentionDraw d;
  d.world = draw::world(r);
  d.args.seq_per_rank = draw::rows(r, s);
  d.args.config.layout = r.chance(50) ? SeqLayout::kContiguous : SeqLayout::kZigZag;
  // The zig-zag layout cuts a shard in two halves: an odd one (refused) now and then.
  if (d.args.config.layout == SeqLayout::kZigZag && d.args.seq_per_rank % 2 == 1 && r.chance(80)) ++d.args.seq_per_rank;
  d.args.kv_heads = r.chance(98) ? r.range32(1, s.max_kv_heads) : 0;
  // GQA, MQA (kv_heads 1) and MHA (group 1); rarely q_heads not a multiple of kv_heads (refused).
  d.args.q_heads = r.chance(96) ? (d.args.kv_heads > 0 ? d.args.kv_heads : 1) * r.range32(1, 4) : r.range32(1, 9);
  switch (r.weighted({48, 48, 4})) {
    case 0: d.args.head_dim = 64; break;
    case 1: d.args.head_dim = 128; break;
    default: d.args.head_dim = r.pick({0u, 32u, 96u, 256u}); break;  // no kernel: refused
  }
  d.args.causal = r.chance(50);
  d.args.kv_offset = draw::offset(r);
  d.args.config.comm = draw::all_gather_config(r, s, d.world, d.args.seq_per_rank);
  // The kernel's key tile is 128 tokens: chunks of whole tiles or at least a shard; rarely other
  // sizes (refused unless they cover the shard).
  const uint32_t shard = d.args.seq_per_rank > 0 ? d.args.seq_per_rank : 1;
  switch (r.weighted({40, 35, 15, 10})) {
    case 0: d.args.config.comm.comm_rows = 0; break;
    case 1: d.args.config.comm.comm_rows = 128 * r.range32(1, 3); break;
    case 2: d.args.config.comm.comm_rows = shard + r.range32(0, shard); break;
    default: break;  // draw::comm_rows's
  }
  d.args.config.local_first = r.chance(35);
  switch (r.weighted({60, 10, 20, 10})) {
    case 0: d.args.config.attention_sms = 0; break;
    case 1: d.args.config.attention_sms = 1; break;
    case 2: d.args.config.attention_sms = r.range32(2, s.sms / static_cast<uint32_t>(d.world)); break;
    default: d.args.config.attention_sms = r.range32(s.sms, 4 * s.sms); break;
  }
  switch (r.weighted({50, 42, 8})) {
    case 0: d.args.config.section_kv_heads = 0; break;
    case 1: {  // a divisor of kv_heads
      std::vector<uint32_t> divisors;
      for (uint32_t h = 1; h <= d.args.kv_heads; ++h) {
        if (d.args.kv_heads % h == 0) divisors.push_back(h);
      }
      d.args.config.section_kv_heads = divisors.empty() ? 1 : r.pick(divisors);
      break;
    }
    default: d.args.config.section_kv_heads = r.range32(1, 2 * s.max_kv_heads); break;  // often not a divisor
  }
  d.args.config.use_tune_cache = r.chance(50);
  return d;
}


}  // namespace tilelink::fuzz
