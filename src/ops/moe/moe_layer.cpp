// The MoE layer: part 1, the activation on the sorted rows in use, part 2 on part 1's mapping.
#include "tilelink/ops/moe/moe_layer.hpp"

#include <string>

#include "ops/common/tuned_config.hpp"
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

std::string MoeLayer::can_implement(const World& world, const SymmetricHeap& heap, const MoeLayerArguments& a) {
  if (std::string e = check_one_process_world(world, "MoeLayer"); !e.empty()) return e;
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
      [](auto& tuned, const auto& callers) { tuned.activation = callers.activation; }, &tuned_from_);
  const uint32_t w = static_cast<uint32_t>(world.size());
  std::vector<void*> y;
  std::vector<const void*> h;
  MoeAgGroupGemmArguments p1 = part1_arguments(world, args_, {});
  const uint64_t rows = MoeAgGroupGemm::out_rows(world, p1);
  for (int r = 0; r < world.size(); ++r) {
    y_.emplace_back(size_t(rows) * part1_cols(args_, w) * 2, world.device(r));
    h_.emplace_back(size_t(rows) * (args_.intermediate / w) * 2, world.device(r));
    y.push_back(y_.back().get());
    h.push_back(h_.back().get());
  }
  p1.out = y;
  part1_ = std::make_unique<MoeAgGroupGemm>(world, heap, signals, p1, name + ".part1");
  std::vector<const MoeMappingBuffers*> mapping;
  for (int r = 0; r < world.size(); ++r) mapping.push_back(&part1_->mapping(r));
  // Part 2's combine runs on part 1's gather streams: the two never overlap (part 2 starts after
  // part 1 on every compute stream), and a third stream per rank would cost a hardware queue.
  MoeGemmRsArguments p2 = part2_arguments(world, args_, mapping, h);
  p2.combine_streams = &part1_->side_streams();
  part2_ = std::make_unique<MoeGemmRs>(world, heap, signals, p2, name + ".part2");
}

MoeLayer::~MoeLayer() = default;

void MoeLayer::run_activation() {
  const uint32_t w = static_cast<uint32_t>(world_->size());
  for (int r = 0; r < world_->size(); ++r) {
    world_->set_device(r);
    const MoeMappingBuffers& m = part1_->mapping(r);
    detail::launch_mlp_activation(args_.config.activation, y_[static_cast<size_t>(r)].get(),
                                  h_[static_cast<size_t>(r)].get(), m.max_rows(), args_.intermediate / w,
                                  world_->compute_stream(r), m.num_tiles_device(), m.bm());
  }
}

void MoeLayer::run() {
  part1_->run();     // the mapping and the sorted part-1 rows, complete on every compute stream
  run_activation();  // the rows in use, after part 1 on the same stream
  part2_->run();     // its GEMM after the activation on the compute stream; complete there
}

}  // namespace tilelink
