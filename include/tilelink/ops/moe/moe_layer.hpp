// The tensor-parallel MoE layer as one call: part 1 (all-gather + gather + grouped GEMM with the
// experts' first weights) -> activation -> part 2 (grouped GEMM with the second weights + top-k
// weighted combine + reduce-scatter to the tokens' owners).
//
// Every rank r holds a row shard of the tokens X (tokens_per_rank x H, in the symmetric `x`
// buffer at rows [r T/P, (r+1) T/P), as MoeAgGroupGemm expects, or anywhere given `x_source`), every token's routing (ids and
// weights, tokens x topk), and for every expert e its slices W1_e,r ((2 I/P or I/P) x H: the gate
// rows then the up rows for SwiGLU) and W2_e,r (H x I/P). Rank r gets, for its tokens t,
//
//   out[t] = sum over ranks r of  sum over j of  weight[t][j] * act(X[t] W1_{e,r}^T) W2_{e,r}^T,  e = ids[t][j]
//
// (bf16 between the stages as each part documents; fp32 accumulation and reductions in fixed
// order: bit-identical run after run). Part 2 reads part 1's mapping tables: the routing is
// sorted once per call, on the device. With routing = kOwnTokens each rank passes its own tokens'
// routing and the layer all-gathers it first (a small all-gather on the heap).
//
// Every kind of World runs it: a process world (World::process, one rank per process) enqueues
// this process's rank; per-rank vectors then need only this rank's entry.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/common/mlp_activation.hpp"
#include "tilelink/ops/moe/moe_config.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/runtime/tune_cache.hpp"

namespace tilelink {

namespace detail {
class MoeRoutingGather;
}

// Whose routing MoeLayerArguments::ids and ::weights hold.
enum class MoeRoutingScope : uint32_t {
  kAllTokens = 0,  // every token's (tokens x topk), the same on every rank
  kOwnTokens = 1,  // the rank's own tokens' (tokens_per_rank x topk): what a router run on the
                   // rank's shard gives; the layer all-gathers the routing itself before part 1
};
const char* to_string(MoeRoutingScope v);

struct MoeLayerArguments {
  const SymmetricBuffer* x = nullptr;  // world * tokens_per_rank rows of hidden bf16
  size_t x_offset = 0;
  uint32_t tokens_per_rank = 0;
  uint32_t hidden = 0;        // H
  uint32_t intermediate = 0;  // I over all ranks (each expert's), a multiple of 8 * world
  uint32_t experts = 0;
  uint32_t topk = 0;
  std::vector<const int32_t*> ids;    // per rank: expert ids (x topk int32, valid), tokens as `routing` says
  std::vector<const float*> weights;  // per rank: routing weights (x topk fp32), tokens as `routing` says
  MoeRoutingScope routing = MoeRoutingScope::kAllTokens;
  std::vector<const void*> w1;        // per rank: experts x (2 I/P or I/P) x H bf16
  std::vector<const void*> w2;        // per rank: experts x H x I/P bf16
  std::vector<void*> out;             // per rank: tokens_per_rank x H bf16
  const SymmetricBuffer* recv = nullptr;  // world * tokens_per_rank x H bf16 (part 2's slots)
  MoeLayerConfig config;
  // Per rank, its tokens_per_rank x H bf16 token shard anywhere on its device (rows contiguous,
  // 16-byte aligned); empty: the caller wrote the rank's own rows of `x`. Part 1 takes it as
  // MoeAgGroupGemmArguments::x_source (copied in tile by tile under the all-gather; read in place
  // at world 1).
  std::vector<const void*> x_source;
};

// The tune cache's key of `args` on `world`: m = tokens over all ranks, n = hidden, k = intermediate
// over all ranks; variant: experts, top-k and activation.
TuneKey moe_tune_key(const World& world, const MoeLayerArguments& args);

class MoeLayer {
 public:
  // Validates (InvalidArgument naming the argument; nothing launched), allocates each rank's
  // part-1 output and activation (sorted rows) and builds both parts.
  MoeLayer(const World& world, SymmetricHeap& heap, SignalSet& signals, const MoeLayerArguments& args,
           const std::string& name = "moe_layer");
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap, const MoeLayerArguments& args);

  // Enqueues one call on every rank this process drives; complete on the compute streams.
  void run();
  // Points later calls of `rank` (one this process drives) at new routing, weights and output:
  // the per-call tensors of a PyTorch caller (shapes as built). The routing is read by the next
  // call; a part's grouped GEMM is rebuilt only when its weight moved. Nothing is launched.
  void set_operands(int rank, const int32_t* ids, const float* weights, const void* w1, const void* w2, void* out);
  // Built with x_source: the same with the rank's token shard for the next calls.
  void set_operands(int rank, const int32_t* ids, const float* weights, const void* w1, const void* w2, void* out,
                    const void* x_source);
  // The activation alone on every rank, on the rows of the last call (benchmarks).
  void run_activation();

  MoeAgGroupGemm& part1() { return *part1_; }
  MoeGemmRs& part2() { return *part2_; }
  const MoeAgGroupGemm& part1() const { return *part1_; }
  const MoeGemmRs& part2() const { return *part2_; }
  // The configuration that runs (the tune cache's when it supplied one) and the cache file it
  // came from ("" when none).
  const MoeLayerConfig& config() const { return args_.config; }
  const std::string& tuned_from() const { return tuned_from_; }
  // Rank r's part-1 output and activation (sorted rows; tests and benchmarks; a rank this process
  // drives).
  const void* part1_out(int rank) const {
    world_->check_local_rank(rank, "MoeLayer::part1_out");
    return y_[static_cast<size_t>(rank)].get();
  }
  const void* activation_out(int rank) const {
    world_->check_local_rank(rank, "MoeLayer::activation_out");
    return h_[static_cast<size_t>(rank)].get();
  }

 private:
  // The routing each part reads on `rank`: the caller's, or the all-gathered copy (kOwnTokens).
  const int32_t* part_ids(int rank) const;
  const float* part_weights(int rank) const;

  const World* world_;
  MoeLayerArguments args_;
  std::string tuned_from_;
  std::vector<DeviceBuffer> y_, h_;
  std::unique_ptr<detail::MoeRoutingGather> routing_;  // kOwnTokens with peers only
  std::unique_ptr<MoeAgGroupGemm> part1_;
  std::unique_ptr<MoeGemmRs> part2_;
};

}  // namespace tilelink
