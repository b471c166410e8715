// The MoE layer: part 1, the activation on the sorted rows in use, part 2 on part 1's mapping.
#include "tilelink/ops/moe/moe_layer.hpp"

#include <string>

#include "ops/common/repoint.hpp"
#include "ops/common/tuned_config.hpp"
#include "ops/moe/moe_routing_gather.hpp"
#include "runtime/checks.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink {

namespace {

uint32_t part1_cols(const MoeLayerArguments& a, uint32_t world) {
  return (a.config.activation == MlpActivation::kSwiGlu ? 2 : 1) * (a.intermediate / world);
}

MoeAgGroupGemmArguments part1_arguments(const World& world, const MoeLayerArguments& a, const std::vector<void*>& y) {
  MoeAgGroupGemmArguments p;
  p.x = a.x;
  p.x_offset = a.x_offset;
  p.tokens_per_rank = a.tokens_per_rank;
  p.hidden = a.hidden;
  p.n = part1_cols(a, static_cast<uint32_t>(world.size()));
  p.experts = a.experts;
  p.topk = a.topk;
  p.ids = a.ids;
  p.w = a.w1;
  p.out = y;
  p.config = a.config.part1;
  p.x_source = a.x_source;
  return p;
}

MoeGemmRsArguments part2_arguments(const World& world, const MoeLayerArguments& a,
                                   const std::vector<const MoeMappingBuffers*>& mapping,
                                   const std::vector<const void*>& h) {
  MoeGemmRsArguments p;
  p.tokens_per_rank = a.tokens_per_rank;
  p.n = a.hidden;
  p.k = a.intermediate / static_cast<uint32_t>(world.size());
  p.experts = a.experts;
  p.topk = a.topk;
  p.mapping = mapping;
  p.h = h;
  p.w = a.w2;
  p.weights = a.weights;
  p.out = a.out;
  p.recv = a.recv;
  p.config = a.config.part2;
  return p;
}

}  // namespace

const char* to_string(MoeRoutingScope v) {
  switch (v) {
    case MoeRoutingScope::kAllTokens: return "all_tokens";
    case MoeRoutingScope::kOwnTokens: return "own_tokens";
  }
  return "?";
}

std::string MoeLayer::can_implement(const World& world, const SymmetricHeap& heap, const MoeLayerArguments& a) {
  if (a.routing != MoeRoutingScope::kAllTokens && a.routing != MoeRoutingScope::kOwnTokens) {
    return "argument 'routing' = " + std::to_string(static_cast<uint32_t>(a.routing)) +
           ": expected kAllTokens or kOwnTokens";
  }
  if (a.routing == MoeRoutingScope::kOwnTokens) {
    if (std::string e = detail::MoeRoutingGather::can_implement(a.tokens_per_rank, a.topk); !e.empty()) return e;
  }
  if (std::string e = detail::check_ffn(world.size(), a.intermediate, a.config.activation, "part 2"); !e.empty()) {
    return e;
  }
  if (std::string e = check_rank_pointers(world, a.w1, "w1"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.w2, "w2"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  // The intermediates are the layer's: the user's `out` pointers stand in for them (only their
  // presence is checked).
  const std::vector<void*> y(a.out.begin(), a.out.end());
  if (std::string e = MoeAgGroupGemm::can_implement(world, heap, part1_arguments(world, a, y)); !e.empty()) {
    return "part 1 (all-gather + grouped GEMM, n = " +
           std::string(a.config.activation == MlpActivation::kSwiGlu ? "2 * " : "") +
           "intermediate / world, k = hidden): " + e;
  }
  MoeGemmRsArguments p2 = part2_arguments(world, a, {}, {});
  SideStreams shared;  // stands for part 1's streams: only its presence is checked
  p2.combine_streams = &shared;
  if (std::string e = MoeGemmRs::can_implement_shape(world, heap, p2); !e.empty()) {
    return "part 2 (grouped GEMM + combine + reduce-scatter, n = hidden, k = intermediate / world): " + e;
  }
  const uint32_t bm1 = MoeAgGroupGemm::tile_m_of(a.config.part1.kernel), bm2 = MoeGemmRs::tile_m_of(a.config.part2.kernel);
  if (bm1 != bm2) {
    return "argument 'config.part2.kernel' = '" + a.config.part2.kernel + "': tiles of " + std::to_string(bm2) +
           " rows, expected part 1's " + std::to_string(bm1) + " (the parts share the mapping)";
  }
  return "";
}

TuneKey moe_tune_key(const World& world, const MoeLayerArguments& a) {
  return make_tune_key(world, "moe", a.tokens_per_rank * static_cast<uint32_t>(world.size()), a.hidden,
                       a.intermediate,
                       std::to_string(a.experts) + " experts, top-" + std::to_string(a.topk) + ", " +
                           to_string(a.config.activation));
}

MoeLayer::MoeLayer(const World& world, SymmetricHeap& heap, SignalSet& signals, const MoeLayerArguments& args,
                   const std::string& name)
    : world_(&world), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("MoeLayer '" + name + "': " + why);
  }
  args_ = detail::with_tuned_config<MoeLayer>(
      world, heap, args, [&] { return moe_tune_key(world, args); },
      [](auto& tuned, const auto& callers) {
        tuned.activation = callers.activation;
        if (callers.part1.method != OpMethod::kAuto) tuned.part1.method = callers.part1.method;
        if (callers.part2.method != OpMethod::kAuto) tuned.part2.method = callers.part2.method;
      },
      &tuned_from_);
  const uint32_t w = static_cast<uint32_t>(world.size());
  if (args_.routing == MoeRoutingScope::kOwnTokens && world.size() > 1) {
    routing_ = std::make_unique<detail::MoeRoutingGather>(world, heap, signals, args_.tokens_per_rank, args_.topk,
                                                          name + ".routing");
  }
  // One entry per rank; those of other processes' ranks stay empty.
  const size_t ranks = static_cast<size_t>(w);
  std::vector<void*> y(ranks, nullptr);
  std::vector<const void*> h(ranks, nullptr);
  std::vector<const int32_t*> ids(ranks, nullptr);
  std::vector<const float*> weights(ranks, nullptr);
  MoeAgGroupGemmArguments p1 = part1_arguments(world, args_, {});
  const uint64_t rows = MoeAgGroupGemm::out_rows(world, p1);
  y_.resize(ranks);
  h_.resize(ranks);
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    y_[i] = DeviceBuffer(size_t(rows) * part1_cols(args_, w) * 2, world.device(r));
    h_[i] = DeviceBuffer(size_t(rows) * (args_.intermediate / w) * 2, world.device(r));
    y[i] = y_[i].get();
    h[i] = h_[i].get();
    ids[i] = part_ids(r);
    weights[i] = part_weights(r);
  }
  p1.out = y;
  p1.ids = ids;
  part1_ = std::make_unique<MoeAgGroupGemm>(world, heap, signals, p1, name + ".part1");
  std::vector<const MoeMappingBuffers*> mapping(ranks, nullptr);
  for (int r : world.local_ranks()) mapping[static_cast<size_t>(r)] = &part1_->mapping(r);
  // Part 2's combine runs on part 1's gather streams: the two never overlap (part 2 starts after
  // part 1 on every compute stream), and a third stream per rank would cost a hardware queue.
  MoeGemmRsArguments p2 = part2_arguments(world, args_, mapping, h);
  p2.weights = weights;
  p2.combine_streams = &part1_->side_streams();
  part2_ = std::make_unique<MoeGemmRs>(world, heap, signals, p2, name + ".part2");
}

const int32_t* MoeLayer::part_ids(int rank) const {
  return routing_ != nullptr ? routing_->ids(rank) : args_.ids[static_cast<size_t>(rank)];
}

const float* MoeLayer::part_weights(int rank) const {
  return routing_ != nullptr ? routing_->weights(rank) : args_.weights[static_cast<size_t>(rank)];
}

void MoeLayer::set_operands(int rank, const int32_t* ids, const float* weights, const void* w1, const void* w2,
                            void* out) {
  // Built with x_source, the overload below refuses the null shard by name (require_as_built).
  set_operands(rank, ids, weights, w1, w2, out, nullptr);
}

void MoeLayer::set_operands(int rank, const int32_t* ids, const float* weights, const void* w1, const void* w2,
                            void* out, const void* x_source) {
  world_->check_local_rank(rank, "MoeLayer::set_operands");
  constexpr const char* where = "MoeLayer::set_operands";
  require_aligned(where, "ids", ids, "16-byte aligned expert ids (int32) on the rank's device");
  require_aligned(where, "weights", weights, "16-byte aligned routing weights (fp32) on the rank's device");
  require_aligned(where, "w1", w1, "a 16-byte aligned experts x (2 I/P or I/P) x H bf16 weight on the rank's device");
  require_aligned(where, "w2", w2, "a 16-byte aligned experts x H x I/P bf16 weight on the rank's device");
  require_aligned(where, "out", out, "a 16-byte aligned tokens_per_rank x H bf16 output on the rank's device");
  detail::require_as_built(where, "x_source", !args_.x_source.empty(), x_source, "the rank's bf16 token shard");
  const size_t i = static_cast<size_t>(rank);
  auto set_part1 = [&](const int32_t* part_ids, const void* w, const void* source) {
    if (source != nullptr) {
      part1_->set_operands(rank, part_ids, w, y_[i].get(), source);
    } else {
      part1_->set_operands(rank, part_ids, w, y_[i].get());
    }
  };
  // Every pointer is checked above: what the parts refuse now is a kernel they could not rebuild.
  // Both parts take the new operands or neither does.
  set_part1(routing_ != nullptr ? routing_->ids(rank) : ids, w1, x_source);
  try {
    part2_->set_operands(rank, h_[i].get(), w2, routing_ != nullptr ? routing_->weights(rank) : weights, out);
  } catch (...) {  // part 1's kernels and shard as they were
    set_part1(part_ids(rank), args_.w1[i], x_source != nullptr ? args_.x_source[i] : nullptr);
    throw;
  }
  args_.ids[i] = ids;
  args_.weights[i] = weights;
  args_.w1[i] = w1;
  args_.w2[i] = w2;
  args_.out[i] = out;
  if (x_source != nullptr) args_.x_source[i] = x_source;
}

MoeLayer::~MoeLayer() = default;

void MoeLayer::run_activation() {
  const uint32_t w = static_cast<uint32_t>(world_->size());
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    const MoeMappingBuffers& m = part1_->mapping(r);
    detail::launch_mlp_activation(args_.config.activation, y_[static_cast<size_t>(r)].get(),
                                  h_[static_cast<size_t>(r)].get(), m.max_rows(), args_.intermediate / w,
                                  world_->compute_stream(r), m.num_tiles_device(), m.bm());
  }
}

void MoeLayer::run() {
  // Every token's routing on every rank, complete on the compute streams before part 1's mapping.
  if (routing_ != nullptr) routing_->run(args_.ids, args_.weights);
  part1_->run();     // the mapping and the sorted part-1 rows, complete on every compute stream
  run_activation();  // the rows in use, after part 1 on the same stream
  part2_->run();     // its GEMM after the activation on the compute stream; complete there
}

}  // namespace tilelink
