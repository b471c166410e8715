// GEMM+RS's engines (GemmRsEngine): the small-M engine's arguments and checks, and the automatic
// choice between it and the owner-tile GEMM by their estimates.
#include <string>

#include "ops/gemm_rs/gemm_rs_internal.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink::gemm_rs_internal {

namespace {

std::string us(double seconds) { return std::to_string(static_cast<long long>(seconds * 1e6 + 0.5)) + " us"; }

}  // namespace

gemm_rs_policy::MethodShape method_shape(const World& world, const GemmRsArguments& a, uint32_t reduce_blocks) {
  gemm_rs_policy::MethodShape s;
  s.world = static_cast<uint32_t>(world.size());
  s.m = a.m;
  s.n = a.n;
  s.k = a.k;
  s.sm_budget = world.tightest_budget();
  s.reduce_blocks = reduce_blocks;
  s.reducer = a.config.reducer;
  s.one_rank_per_gpu = world.mode() != WorldMode::kVirtual;
  s.push_notify = a.config.push_notify;
  s.tile = named_tile(a);
  return s;
}

gemm_rs_policy::GemmTile named_tile(const GemmRsArguments& a) {
  if (a.config.kernel.empty() || !kernel_refusal(a).empty()) return {};
  const auto& kernel = kernel_for(a);
  return {kernel.tile_m, kernel.tile_n};
}

GemmArArguments small_m_arguments(const GemmRsArguments& a) {
  GemmArArguments g;
  g.a = a.a;
  g.b = a.b;
  g.out = a.out;
  g.m = a.m;
  g.n = a.n;
  g.k = a.k;
  g.scatter = true;
  const GemmRsConfig& c = a.config;
  g.config.schedule = c.method == OpMethod::kFused           ? GemmArSchedule::kFused
                      : c.method == OpMethod::kNonOverlapped ? GemmArSchedule::kNonOverlapped
                                                             : GemmArSchedule::kAuto;
  g.config.reduce_blocks = c.reduce_blocks;
  g.config.gemm_sms = c.gemm_sms;
  g.config.path = c.scatter == GemmRsScatter::kCopyEngine ? GemmArPath::kCopyEngine
                  : c.scatter == GemmRsScatter::kPull     ? GemmArPath::kSm
                                                          : GemmArPath::kAuto;
  g.config.use_tune_cache = false;  // GemmRs's entry (tune gemm_rs) chose the engine and its knobs
  return g;
}

std::string small_m_refusal(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  if (a.dtype != DType::kBf16) {
    return std::string("argument 'dtype' = ") + to_string(a.dtype) +
           " with config.engine = small_m: expected bf16 (the small-M engine is GEMM+AR's, bf16 only)";
  }
  if (std::string e = check_fp8_operands(world, a); !e.empty()) return e;  // no FP8 leftovers with bf16
  if (a.config.method == OpMethod::kDecomposed) {
    return "argument 'config.method' = decomposed with config.engine = small_m: expected auto, fused or "
           "non_overlapped (the decomposition is the owner_tiles engine's)";
  }
  if (a.config.scatter == GemmRsScatter::kEpiloguePush) {
    return "argument 'config.scatter' = push with config.engine = small_m: expected auto, pull or ce (each owner "
           "reads its rows of the peers' partials, or receives them by copy engine)";
  }
  if (a.config.reducer == GemmRsReducer::kEpilogue) {
    return "argument 'config.reducer' = epilogue with config.engine = small_m: expected auto or blocks (the small-M "
           "engine sums in its reduction blocks)";
  }
  if (!a.config.kernel.empty()) {
    return "argument 'config.kernel' = '" + a.config.kernel +
           "': names an owner_tiles GEMM, which the small_m engine does not run (it runs GEMM+AR's); expected "
           "config.engine owner_tiles or auto, or config.kernel \"\"";
  }
  return GemmAr::can_implement(world, heap, small_m_arguments(a));
}

EngineChoice choose_engine(const World& world, const SymmetricHeap& heap, const GemmRsArguments& in) {
  EngineChoice e;
  if (in.config.engine != GemmRsEngine::kAuto) {
    e.engine = in.config.engine;
    e.why = "configured";
    return e;
  }
  if (std::string no = small_m_refusal(world, heap, in); !no.empty()) {
    e.why = "the small-M engine cannot run this call: " + no;
    return e;
  }
  // The owner-tile engine at its own automatic choices (GemmRs::choose_method's, without the
  // decomposition, which auto does not take yet).
  const GemmRsArguments a = with_path(world, heap, in);
  const gemm_rs_policy::MethodEstimates owner =
      gemm_rs_policy::estimate_methods(method_shape(world, a, reduce_blocks_of(world, a)));
  const OpMethod method = a.config.reducer == GemmRsReducer::kEpilogue ? OpMethod::kFused
                                                                        : gemm_rs_policy::choose_method(in.config.method, owner);
  e.owner_tiles = owner.of(method);
  const GemmArArguments g = small_m_arguments(in);
  e.small_m = gemm_rs_policy::small_m_choice(world.size(), world.tightest_budget(), in.m, in.n, in.k, g.config,
                                             gemm_ar_rates(world, g.config.path))
                  .estimate;
  e.engine = gemm_rs_policy::choose_engine(e.owner_tiles, e.small_m);
  e.why = std::string("the estimate's faster: small_m ") + us(e.small_m) + ", owner_tiles " + us(e.owner_tiles) +
          " (" + to_string(method) + ")";
  return e;
}

}  // namespace tilelink::gemm_rs_internal

namespace tilelink {

GemmArChoice gemm_rs_policy::small_m_choice(int world, int sm_budget, uint32_t m, uint32_t n, uint32_t k_local,
                                            const GemmArConfig& config, const GemmArRates& rates) {
  return gemm_ar_choice(GemmArShape{world, sm_budget, m, n, k_local, /*norm=*/false, /*scatter=*/true}, config, rates);
}

}  // namespace tilelink
