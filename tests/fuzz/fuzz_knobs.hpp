// The fuzzer's seeds, its random stream, the space's bounds and the knob draws the ops share
// (fuzz_space.hpp says what the space covers and why).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/attention/sp_attention.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/mlp/mlp.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::fuzz {

// ---- ops and seeds ---------------------------------------------------------------------------------

enum class Op { kAllGather, kReduceScatter, kAgGemm, kGemmRs, kMlp, kMoeAg, kMoeRs, kMoeLayer, kSpAttention };

inline constexpr Op kAllOps[] = {Op::kAllGather, Op::kReduceScatter, Op::kAgGemm,   Op::kGemmRs,     Op::kMlp,
                                 Op::kMoeAg,     Op::kMoeRs,         Op::kMoeLayer, Op::kSpAttention};

// The command-line names (tilelink_fuzz --op NAME).
inline const char* to_string(Op op) {
  switch (op) {
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAgGemm: return "ag_gemm";
    case Op::kGemmRs: return "gemm_rs";
    case Op::kMlp: return "mlp";
    case Op::kMoeAg: return "moe_ag";
    case Op::kMoeRs: return "moe_rs";
    case Op::kMoeLayer: return "moe_layer";
    case Op::kSpAttention: return "sp_attention";
  }
  return "?";
}

inline bool parse_op(const std::string& name, Op* op) {
  for (Op o : kAllOps) {
    if (name == to_string(o)) {
      *op = o;
      return true;
    }
  }
  return false;
}

// SplitMix64's finaliser: a bijection of 64-bit words that mixes every input bit into every output bit.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The seed of draw `index` of `op` in a run of seed `run_seed`. Hashes the op's name (FNV-1a), not
// its enum value, so that adding an op leaves the other ops' streams as they were.
inline uint64_t draw_seed(uint64_t run_seed, Op op, uint64_t index) {
  uint64_t name = 0xCBF29CE484222325ull;
  for (const char* c = to_string(op); *c != '\0'; ++c) name = (name ^ uint8_t(*c)) * 0x100000001B3ull;
  return mix64(mix64(run_seed ^ name) + index);
}

// ---- random draws ----------------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next() { return engine_(); }

  // Uniform in [lo, hi] (lo <= hi): rejection of the words below 2^64 mod n, then x mod n.
  uint64_t range(uint64_t lo, uint64_t hi) {
    const uint64_t n = hi - lo + 1;
    if (n == 0) return next();  // the whole 64-bit range
    const uint64_t threshold = (0 - n) % n;
    uint64_t x = next();
    while (x < threshold) x = next();
    return lo + x % n;
  }
  uint32_t range32(uint32_t lo, uint32_t hi) { return static_cast<uint32_t>(range(lo, hi)); }
  // In [lo, hi], small values more likely (uniform below a uniform bound; mean about (hi - lo) / 4):
  // most draws stay cheap to check, a few reach the bound.
  uint32_t small32(uint32_t lo, uint32_t hi) { return range32(lo, range32(lo, hi)); }

  // True with probability percent / 100.
  bool chance(uint32_t percent) { return range(0, 99) < percent; }

  // Index i with probability weights[i] / sum(weights).
  uint32_t weighted(std::initializer_list<uint32_t> weights) {
    uint64_t total = 0;
    for (uint32_t w : weights) total += w;
    uint64_t x = range(0, total - 1);
    uint32_t i = 0;
    for (uint32_t w : weights) {
      if (x < w) return i;
      x -= w;
      ++i;
    }
    return i - 1;
  }

  template <class T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + range(0, values.size() - 1));
  }
  template <class T>
  T pick(const std::vector<T>& values) {
    return values[range(0, values.size() - 1)];
  }

 private:
  std::mt19937_64 engine_;
};

// The sizes the draws are made around. The GPU fuzzer keeps shapes small (coverage, not speed:
// >= 10^4 calls in minutes); the CPU executor runs every element on a thread, so its space is
// smaller still. Rows and widths keep their relations to the tiles and the world either way.
struct Space {
  uint32_t tile_m;       // the GEMM kernels' tile height: shapes "on the grid" are multiples of it
  uint32_t max_rows;     // rows (tokens) per rank
  uint32_t max_width;    // n, k, hidden, intermediate per rank (bf16 elements)
  uint32_t max_experts;  // MoE experts
  uint32_t max_kv_heads;
  uint32_t sms;  // SMs of the device the SM-count knobs are drawn around (the H200's 132); the
                 // draws only need to land below, at and past the per-rank budget sms / world

  static Space gpu() { return {128, 256, 320, 32, 4, 132}; }
  static Space cpu() { return {4, 20, 24, 10, 3, 16}; }
};

// ---- knob and shape draws shared by the ops ----------------------------------------------------------

namespace draw {

inline int world(Rng& r) { return static_cast<int>(r.range(1, 8)); }

// Rows (tokens) per rank: one row, a few, whole tiles, anything up to the bound, rarely none.
inline uint32_t rows(Rng& r, const Space& s) {
  switch (r.weighted({12, 18, 25, 43, 2})) {
    case 0: return 1;  // one-row shards
    case 1: return r.range32(2, 8);
    case 2: return s.tile_m * r.range32(1, s.max_rows / s.tile_m > 0 ? s.max_rows / s.tile_m : 1);
    case 3: return r.small32(1, s.max_rows);
    default: return 0;  // refused: no rows
  }
}

// A width in bf16 elements (n, k, hidden): the minimum 8, multiples of 8 (16-byte rows), rarely one
// that is not (refused: TMA and the 16-byte data path need 16-byte rows) or zero.
inline uint32_t width(Rng& r, const Space& s) {
  switch (r.weighted({15, 78, 5, 2})) {
    case 0: return 8;  // K at the minimum
    case 1: return 8 * r.small32(1, s.max_width / 8);
    case 2: return r.range32(1, s.max_width);  // mostly not a multiple of 8
    default: return 0;
  }
}

// Bytes into a symmetric buffer where the op's tensor starts: 0, 16-byte aligned, or misaligned
// (refused).
inline size_t offset(Rng& r) {
  switch (r.weighted({72, 24, 4})) {
    case 0: return 0;
    case 1: return 16 * r.range(1, 64);
    default: return 16 * r.range(0, 8) + r.range(1, 15);
  }
}

// Rows per communication tile (signal): automatic (0, refused by the standalone collectives),
// one row, the whole shard in one tile, more than a shard, whole tiles of 128, anything.
inline uint32_t comm_rows(Rng& r, uint32_t rows_per_rank) {
  const uint32_t shard = rows_per_rank > 0 ? rows_per_rank : 1;
  switch (r.weighted({15, 13, 14, 8, 10, 40})) {
    case 0: return 0;
    case 1: return 1;
    case 2: return shard;
    case 3: return shard + r.range32(1, 2 * shard);
    case 4: return 128 * r.range32(1, 4);
    default: return r.range32(1, shard);
  }
}

// A CTA count per rank where 0 is automatic: automatic, one, a few, up to the rank's budget,
// past it (refused: every rank's blocks must be resident at once), or absurd.
inline uint32_t blocks(Rng& r, const Space& s, int world) {
  const uint32_t budget = s.sms / static_cast<uint32_t>(world);
  switch (r.weighted({30, 15, 30, 19, 4, 2})) {
    case 0: return 0;
    case 1: return 1;
    case 2: return r.range32(2, 8);
    case 3: return r.range32(1, budget > 1 ? budget : 1);
    case 4: return budget + r.range32(1, s.sms);
    default: return 1u << 20;
  }
}

// Threads per CTA of an SM path: the default 512, the other powers of two, any multiple of 32, or
// one the launch cannot take (refused).
inline uint32_t threads(Rng& r) {
  switch (r.weighted({35, 35, 25, 5})) {
    case 0: return 512;
    case 1: return r.pick({32u, 64u, 128u, 256u, 1024u});
    case 2: return 32 * r.range32(1, 32);
    default: return r.pick({0u, 16u, 33u, 100u, 1000u, 1056u, 2048u});
  }
}

// Rasterization swizzle: automatic, 1, 2, 4, 8, or one the kernels refuse.
inline uint32_t swizzle(Rng& r) {
  switch (r.weighted({35, 60, 5})) {
    case 0: return 0;
    case 1: return r.pick({1u, 2u, 4u, 8u});
    default: return r.pick({3u, 5u, 16u, 0xFFFFFFFFu});
  }
}

// GEMM CTAs: automatic, fewer than a cluster (refused), a few, most of a budget, or more than any
// budget (the op takes what is left).
inline uint32_t gemm_sms(Rng& r, const Space& s, int world) {
  const uint32_t budget = s.sms / static_cast<uint32_t>(world);
  switch (r.weighted({50, 4, 20, 16, 10})) {
    case 0: return 0;
    case 1: return 1;
    case 2: return r.range32(2, 6);
    case 3: return r.range32(2, budget > 2 ? budget : 2);
    default: return r.range32(s.sms, 4 * s.sms);
  }
}

// A kernel configuration by name: the default (""), one of `names`, or an unknown one (refused).
inline std::string kernel(Rng& r, const std::vector<std::string>& names) {
  switch (r.weighted({40, 56, 4})) {
    case 0: return "";
    case 1: return r.pick(names);
    default: return r.pick({std::string("64x64x64_c1x1"), std::string("128x256x64"), std::string("bogus")});
  }
}

// The all-gather half of an op (or the standalone AllGather): every field. comm_rows 0 means
// automatic for the ops; the standalone collective refuses it. The copy engine runs a full-mesh
// pull only: with it, a push or a ring (refused) is drawn rarely.
inline AllGatherConfig all_gather_config(Rng& r, const Space& s, int world, uint32_t rows_per_rank) {
  AllGatherConfig c;
  c.resource = r.chance(50) ? CommResource::kSm : CommResource::kCopyEngine;
  const uint32_t other = c.resource == CommResource::kSm ? 40 : 6;
  c.method = r.chance(other) ? AgMethod::kPush : AgMethod::kPull;
  c.path = r.chance(50) ? DataPath::kLdSt : DataPath::kBulk;
  c.order = r.chance(other) ? CommOrder::kRing : CommOrder::kFullMesh;
  c.comm_rows = comm_rows(r, rows_per_rank);
  c.num_blocks = blocks(r, s, world);
  c.threads = threads(r);
  return c;
}

inline AgGemmConfig ag_gemm_config(Rng& r, const Space& s, int world, uint32_t m_per_rank) {
  AgGemmConfig c;
  c.comm = all_gather_config(r, s, world, m_per_rank);
  c.gemm_sms = gemm_sms(r, s, world);
  c.swizzle = swizzle(r);
  c.kernel = kernel(r, AgGemm::kernel_names());
  c.use_tune_cache = r.chance(50);  // the harnesses turn the cache off: no effect, drawn all the same
  return c;
}

inline GemmRsConfig gemm_rs_config(Rng& r, const Space& s, int world) {
  GemmRsConfig c;
  switch (r.weighted({30, 28, 28, 11, 3})) {
    case 0: c.scatter = GemmRsScatter::kPull; break;
    case 1: c.scatter = GemmRsScatter::kEpiloguePush; break;
    case 2: c.scatter = GemmRsScatter::kCopyEngine; break;
    case 3: c.scatter = GemmRsScatter::kAuto; break;
    default: c.scatter = static_cast<GemmRsScatter>(r.range32(4, 9)); break;  // refused
  }
  // Per tile with the copy engine is refused (it moves whole groups of contiguous rows): rare.
  const bool ce = c.scatter == GemmRsScatter::kCopyEngine;
  switch (r.weighted({ce ? 8u : 34u, 46, 46})) {
    case 0: c.granularity = SignalGranularity::kTile; break;
    case 1: c.granularity = SignalGranularity::kTileRow; break;
    default: c.granularity = SignalGranularity::kRank; break;
  }
  const uint32_t budget = s.sms / static_cast<uint32_t>(world);
  switch (r.weighted({40, 35, 20, 5})) {
    case 0: c.reduce_blocks = 0; break;
    case 1: c.reduce_blocks = r.range32(1, 4); break;
    case 2: c.reduce_blocks = r.range32(1, budget); break;             // at the budget: no SM left
    default: c.reduce_blocks = budget + r.range32(1, s.sms); break;  // refused
  }
  c.gemm_sms = gemm_sms(r, s, world);
  c.swizzle = swizzle(r);
  switch (r.weighted({40, 25, 33, 2})) {
    case 0: c.reducer = GemmRsReducer::kAuto; break;
    case 1: c.reducer = GemmRsReducer::kBlocks; break;
    case 2:  // the GEMM's epilogue sums: a signal per tile (so no copy engine), no reduction CTAs
      c.reducer = GemmRsReducer::kEpilogue;
      if (r.chance(85)) {
        c.reduce_blocks = 0;
        c.granularity = SignalGranularity::kTile;
        if (c.scatter == GemmRsScatter::kCopyEngine) c.scatter = GemmRsScatter::kPull;
      }
      break;
    default: c.reducer = static_cast<GemmRsReducer>(r.range32(3, 9)); break;  // refused
  }
  c.use_tune_cache = r.chance(50);
  switch (r.weighted({60, 38, 2})) {  // drawn last: the draws above keep their streams
    case 0: c.push_notify = GemmRsPushNotify::kDeferred; break;
    case 1: c.push_notify = GemmRsPushNotify::kImmediate; break;
    default: c.push_notify = static_cast<GemmRsPushNotify>(r.range32(2, 9)); break;  // refused
  }
  switch (r.weighted({60, 22, 16, 2})) {  // after the others, for the same reason
    case 0: c.engine = GemmRsEngine::kAuto; break;
    case 1: c.engine = GemmRsEngine::kOwnerTiles; break;
    case 2: c.engine = GemmRsEngine::kSmallM; break;  // any M; refused beside push, decomposed, the epilogue
    default: c.engine = static_cast<GemmRsEngine>(r.range32(3, 9)); break;  // refused
  }
  return c;
}

inline MlpActivation activation(Rng& r) {
  switch (r.weighted({48, 49, 3})) {
    case 0: return MlpActivation::kSwiGlu;
    case 1: return MlpActivation::kGelu;
    default: return static_cast<MlpActivation>(r.range32(2, 9));  // refused
  }
}

inline SyntheticRouting routing(Rng& r) {
  return r.pick({SyntheticRouting::kUniform, SyntheticRouting::kSkewed, SyntheticRouting::kFewExperts});
}

// Experts and top-k: one expert, a few, many, rarely none or more than the ops' 1024; top-k from
// 1 to min(experts, 8), rarely more than the experts (refused).
inline void experts_topk(Rng& r, const Space& s, uint32_t* experts, uint32_t* topk) {
  switch (r.weighted({8, 50, 39, 2, 1})) {
    case 0: *experts = 1; break;
    case 1: *experts = r.range32(2, 8); break;
    case 2: *experts = r.range32(2, s.max_experts); break;
    case 3: *experts = 0; break;
    default: *experts = 1025; break;
  }
  const uint32_t most = *experts < 8 ? (*experts > 0 ? *experts : 1) : 8;
  *topk = r.chance(96) ? r.range32(1, most) : most + r.range32(1, 3);
}

inline MoeAgGroupGemmConfig moe_ag_config(Rng& r, const Space& s, int world, uint32_t tokens_per_rank) {
  MoeAgGroupGemmConfig c;
  c.comm = all_gather_config(r, s, world, tokens_per_rank);
  c.gather_blocks = blocks(r, s, world);  // past the budget: nothing left for the GEMM, refused
  c.gemm_sms = gemm_sms(r, s, world);
  c.swizzle = swizzle(r);
  c.kernel = kernel(r, MoeAgGroupGemm::kernel_names());
  return c;
}

inline MoeGemmRsConfig moe_rs_config(Rng& r, const Space& s, int world, uint32_t tokens_per_rank) {
  MoeGemmRsConfig c;
  switch (r.weighted({40, 10, 37, 8, 5})) {
    case 0: c.comm_rows = 0; break;
    case 1: c.comm_rows = 1; break;
    case 2: c.comm_rows = r.range32(1, tokens_per_rank > 0 ? tokens_per_rank : 1); break;
    case 3: c.comm_rows = tokens_per_rank + r.range32(1, 64); break;
    default: c.comm_rows = r.pick({2048u, 4096u, 4097u}); break;  // * topk past the combine's 4096 pairs
  }
  c.combine_blocks = blocks(r, s, world);
  c.gemm_sms = gemm_sms(r, s, world);
  c.swizzle = swizzle(r);
  switch (r.weighted({40, 20, 30, 10})) {
    case 0: c.weight_sweeps = 0; break;
    case 1: c.weight_sweeps = MoeGemmRsConfig::kTokenOrder; break;
    case 2: c.weight_sweeps = r.range32(1, 4); break;
    default: c.weight_sweeps = r.range32(5, 64); break;  // more sweeps than rounds
  }
  c.kernel = kernel(r, MoeAgGroupGemm::kernel_names());
  switch (r.weighted({45, 15, 35, 5})) {
    case 0: c.combine = MoeCombine::kAuto; break;
    case 1: c.combine = MoeCombine::kBlocks; break;
    case 2: c.combine = MoeCombine::kEpilogue; break;
    default: c.combine = static_cast<MoeCombine>(r.range32(3, 9)); break;  // refused
  }
  return c;
}

}  // namespace draw

}  // namespace tilelink::fuzz
