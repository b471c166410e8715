// Host side of the fused MLP: validation, the intermediates, the two ops, the call sequence.
#include "tilelink/ops/mlp/mlp.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "ops/common/repoint.hpp"
#include "runtime/checks.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink {

namespace {

uint32_t fc1_cols(const MlpArguments& a, uint32_t world) {
  const uint32_t i_local = a.intermediate / world;
  return a.config.activation == MlpActivation::kSwiGlu ? 2 * i_local : i_local;
}

// The two ops' arguments; y and h: each rank's fc1 output and activation.
AgGemmArguments fc1_arguments(const World& world, const MlpArguments& a, const std::vector<void*>& y) {
  AgGemmArguments f;
  f.a = a.x;
  f.b = a.w1;
  f.c = y;
  f.m_per_rank = a.m / static_cast<uint32_t>(world.size());
  f.n = fc1_cols(a, static_cast<uint32_t>(world.size()));
  f.k = a.hidden;
  f.config = a.config.fc1;
  f.dtype = a.dtype;
  f.scaling = a.scaling;
  f.a_scale = a.x_scale;
  f.b_scale = a.w1_scale;
  f.a_source = a.x_source;
  return f;
}

GemmRsArguments fc2_arguments(const World& world, const MlpArguments& a, const std::vector<const void*>& h) {
  GemmRsArguments f;
  if (a.dtype == DType::kE4m3) {  // fc2 quantises the activation itself
    f.a_source = h;
  } else {
    f.a = h;
  }
  f.dtype = a.dtype;
  f.scaling = a.scaling;
  f.b_scale = a.w2_scale;
  f.b = a.w2;
  f.out = a.out;
  f.partial = a.partial;
  f.recv = a.recv;
  f.m = a.m;
  f.n = a.hidden;
  f.k = a.intermediate / static_cast<uint32_t>(world.size());
  f.config = a.config.fc2;
  return f;
}

}  // namespace

std::string Mlp::can_implement(const World& world, const SymmetricHeap& heap, const MlpArguments& a) {
  const uint32_t w = static_cast<uint32_t>(world.size());
  if (a.m == 0 || a.m % w != 0) {
    return "argument 'm' = " + std::to_string(a.m) + ": expected a positive multiple of the world size " +
           std::to_string(w);
  }
  if (std::string e = detail::check_ffn(world.size(), a.intermediate, a.config.activation, "fc2"); !e.empty()) {
    return e;
  }
  if (std::string e = check_rank_pointers(world, a.w1, "w1"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.w2, "w2"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  if (!a.x_source.empty()) {
    if (std::string e = check_rank_pointers(world, a.x_source, "x_source"); !e.empty()) {
      return e + " (each rank's m / world x hidden bf16 tokens)";
    }
  }
  // The ops' own checks; the intermediates are the Mlp's, so the user's `out` pointers stand in
  // for them (only their presence is checked).
  std::vector<void*> y(a.out.begin(), a.out.end());
  std::vector<const void*> h(a.out.begin(), a.out.end());
  if (std::string e = AgGemm::can_implement(world, heap, fc1_arguments(world, a, y)); !e.empty()) {
    return "fc1 (all-gather + GEMM, n = " + std::string(a.config.activation == MlpActivation::kSwiGlu ? "2 * " : "") +
           "intermediate / world, k = hidden): " + e;
  }
  if (std::string e = GemmRs::can_implement(world, heap, fc2_arguments(world, a, h)); !e.empty()) {
    return "fc2 (GEMM + reduce-scatter, n = hidden, k = intermediate / world): " + e;
  }
  return "";
}

Mlp::Mlp(const World& world, SymmetricHeap& heap, SignalSet& signals, const MlpArguments& args,
         const std::string& name)
    : world_(&world), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("Mlp '" + name + "': " + why);
  }
  const uint32_t w = static_cast<uint32_t>(world.size());
  const uint32_t i_local = args.intermediate / w;
  // Per rank; the entries of ranks other processes drive stay empty.
  std::vector<void*> y(w, nullptr);
  std::vector<const void*> h(w, nullptr);
  y_.resize(w);
  h_.resize(w);
  for (int r : world.local_ranks()) {
    y_[static_cast<size_t>(r)] = DeviceBuffer(size_t(args.m) * fc1_cols(args, w) * 2, world.device(r));
    h_[static_cast<size_t>(r)] = DeviceBuffer(size_t(args.m) * i_local * 2, world.device(r));
    y[static_cast<size_t>(r)] = y_[static_cast<size_t>(r)].get();
    h[static_cast<size_t>(r)] = h_[static_cast<size_t>(r)].get();
  }
  fc1_ = std::make_unique<AgGemm>(world, heap, signals, fc1_arguments(world, args, y), name + ".fc1");
  fc2_ = std::make_unique<GemmRs>(world, heap, signals, fc2_arguments(world, args, h), name + ".fc2");
}

Mlp::~Mlp() = default;

void Mlp::run_activation() {
  const uint32_t i_local = args_.intermediate / static_cast<uint32_t>(world_->size());
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    detail::launch_mlp_activation(args_.config.activation, y_[static_cast<size_t>(r)].get(),
                                  h_[static_cast<size_t>(r)].get(), args_.m, i_local, world_->compute_stream(r));
  }
}

void Mlp::set_operands(int rank, const void* w1, const void* w2, void* out) {
  set_operands(rank, w1, w2, out, nullptr);
}

void Mlp::set_operands(int rank, const void* w1, const void* w2, void* out, const void* x_source) {
  constexpr const char* where = "Mlp::set_operands";
  if (args_.dtype != DType::kBf16) {
    throw InvalidArgument(std::string(where) + ": this op's weights are e4m3; expected the overload with their scales");
  }
  world_->check_local_rank(rank, where);
  // Checked here first, so that a refusal leaves both GEMMs on the previous operands.
  detail::require_as_built(where, "x_source", !args_.x_source.empty(), x_source, "the rank's token shard");
  for (const auto& [name, p] : {std::pair<const char*, const void*>{"w1", w1}, {"w2", w2}, {"out", out}}) {
    require_aligned(where, name, p, "a 16-byte aligned device pointer (TMA)");
  }
  const size_t r = static_cast<size_t>(rank);
  fc1_->set_operands(rank, w1, y_[r].get<void>(), x_source);
  try {
    fc2_->set_operands(rank, h_[r].get<void>(), w2, out);
  } catch (...) {  // both GEMMs on the previous operands
    fc1_->set_operands(rank, args_.w1[r], y_[r].get<void>(), args_.x_source.empty() ? nullptr : args_.x_source[r]);
    throw;
  }
  args_.w1[r] = w1;
  args_.w2[r] = w2;
  args_.out[r] = out;
  if (x_source != nullptr) args_.x_source[r] = x_source;
}

void Mlp::set_operands(int rank, const void* w1, const float* w1_scale, const void* w2, const float* w2_scale,
                       void* out, const void* x_source) {
  const char* where = "Mlp::set_operands";
  if (args_.dtype != DType::kE4m3) throw InvalidArgument(std::string(where) + ": this op's weights are bf16; expected the bf16 overload");
  world_->check_local_rank(rank, where);
  for (const auto& [name, p] : {std::pair<const char*, const void*>{"w1", w1}, {"w1_scale", w1_scale}, {"w2", w2},
                                {"w2_scale", w2_scale}, {"out", out}}) {
    require_aligned(where, name, p, "a 16-byte aligned device pointer");
  }
  const size_t r = static_cast<size_t>(rank);
  fc1_->set_operands(rank, w1, w1_scale, y_[r].get<void>(), x_source);
  try {
    fc2_->set_operands(rank, h_[r].get<void>(), nullptr, w2, w2_scale, out);
  } catch (...) {  // both GEMMs on the previous operands
    fc1_->set_operands(rank, args_.w1[r], args_.w1_scale[r], y_[r].get<void>(),
                       args_.x_source.empty() ? nullptr : args_.x_source[r]);
    throw;
  }
  args_.w1[r] = w1;
  args_.w1_scale[r] = w1_scale;
  args_.w2[r] = w2;
  args_.w2_scale[r] = w2_scale;
  args_.out[r] = out;
  if (x_source != nullptr) args_.x_source[r] = x_source;
}

void Mlp::run() {
  fc1_->run();       // C1 on every rank's compute stream
  run_activation();  // after fc1 on the same stream
  fc2_->run();       // its GEMM after the activation on the compute stream; complete there
}

}  // namespace tilelink
