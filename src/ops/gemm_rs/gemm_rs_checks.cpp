// GEMM+RS's validation and what it shares with the op's construction (gemm_rs_internal.hpp): the
// compiled configurations, the policy's kernel-dependent rules, the argument checks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "ops/common/fp8_operands.hpp"
#include "ops/common/kernel_configs.hpp"
#include "ops/gemm_rs/gemm_rs_internal.hpp"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "runtime/checks.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink {

namespace detail {

Sm90GemmRsConfigInfo sm90_gemm_rs_128x256x64_c2x1();
Sm90GemmRsConfigInfo sm90_gemm_rs_128x128x64_c2x1();
Sm90GemmRsConfigInfo sm90_gemm_rs_e4m3_tensor_128x128x128_c2x1();
Sm90GemmRsConfigInfo sm90_gemm_rs_e4m3_row_128x128x128_c2x1();
Sm90GemmRsConfigInfo sm90_gemm_rs_e4m3_block_128x128x128_c2x1();

const std::vector<Sm90GemmRsConfigInfo>& sm90_gemm_rs_configs() {
  static const std::vector<Sm90GemmRsConfigInfo> configs = [] {
    std::vector<Sm90GemmRsConfigInfo> c = {
        sm90_gemm_rs_128x256x64_c2x1(), sm90_gemm_rs_128x128x64_c2x1(), sm90_gemm_rs_e4m3_tensor_128x128x128_c2x1(),
        sm90_gemm_rs_e4m3_row_128x128x128_c2x1(), sm90_gemm_rs_e4m3_block_128x128x128_c2x1()};
    // gemm_rs_policy::reduce_blocks rounds the reduction to the first configuration's clusters.
    for (const Sm90GemmRsConfigInfo& i : c) {
      if (i.cluster_m * i.cluster_n != c.front().cluster_m * c.front().cluster_n) {
        throw Error(std::string("GemmRs configuration ") + i.name +
                    ": its cluster differs from the default's, which sizes the reduction's clusters");
      }
    }
    return c;
  }();
  return configs;
}

bool serves(const Sm90GemmRsConfigInfo& c, DType dtype, Fp8Scaling scaling) {
  return c.dtype == dtype && (dtype == DType::kBf16 || c.scaling == scaling);
}

const Sm90GemmRsConfigInfo& sm90_gemm_rs_config(DType dtype, Fp8Scaling scaling) {
  for (const Sm90GemmRsConfigInfo& c : sm90_gemm_rs_configs()) {
    if (serves(c, dtype, scaling)) return c;
  }
  throw InvalidArgument(std::string("GemmRs: no compiled kernel for ") + to_string(dtype) + " with " +
                        to_string(scaling) + " scaling");
}

}  // namespace detail

gemm_rs_policy::GemmTile gemm_rs_policy::gemm_tile() {
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  return {kernel.tile_m, kernel.tile_n};
}

uint32_t gemm_rs_policy::reduce_blocks(uint32_t configured, int sm_budget, const ReduceLoad& load) {
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  const uint32_t cluster = kernel.cluster_m * kernel.cluster_n;
  uint32_t wanted = configured;
  if (wanted == 0 && load.one_rank_per_gpu && load.world > 1 && load.k_local > 0) {
    // Bytes per second of the peers' partials that one owner reads while the GEMM runs.
    const double gemm_flops = load.gemm_flops_per_sm * sm_budget;
    const double read_rate = double(load.world - 1) / load.world * 2.0 * gemm_flops / (2.0 * load.k_local);
    const double ctas = std::max(1.0, std::round(kReduceHeadroom * read_rate / load.cta_bandwidth));
    const uint32_t cap = std::max(cluster, static_cast<uint32_t>(std::max(0, sm_budget / 8)) / cluster * cluster);
    wanted = static_cast<uint32_t>(std::min(ctas, double(cap)));
  } else if (wanted == 0) {
    wanted = static_cast<uint32_t>(sm_budget / 32);
  }
  return std::max(cluster, (wanted + cluster - 1) / cluster * cluster);
}

std::string GemmRs::kernel_name(DType dtype, Fp8Scaling scaling) {
  return detail::sm90_gemm_rs_config(dtype, scaling).name;
}

std::vector<std::string> GemmRs::kernel_names() {
  std::vector<std::string> names;
  for (const auto& c : detail::sm90_gemm_rs_configs()) names.emplace_back(c.name);
  return names;
}

namespace gemm_rs_internal {

bool fp8(const GemmRsArguments& a) { return a.dtype == DType::kE4m3; }
// Bytes of one row of A: K bf16, or the packed FP8 row's.
uint64_t a_row_bytes(const GemmRsArguments& a) {
  return fp8(a) ? fp8_row_pitch(a.k, a.scaling) : uint64_t(a.k) * 2;
}
// A's row pitch in elements, as the kernel takes it (bf16 K, e4m3 the packed row's bytes).
uint64_t a_lda(const GemmRsArguments& a) { return fp8(a) ? a_row_bytes(a) : a.k; }
// The kernel for `a`'s operands (after check_fp8_operands accepted the dtype and scaling).
const detail::Sm90GemmRsConfigInfo& kernel_for(const GemmRsArguments& a) {
  if (a.config.kernel.empty()) return detail::sm90_gemm_rs_config(a.dtype, a.scaling);
  if (std::string e = kernel_refusal(a); !e.empty()) throw InvalidArgument(e);
  return *detail::find_config(detail::sm90_gemm_rs_configs(), a.config.kernel);
}

std::string kernel_refusal(const GemmRsArguments& a) {
  if (a.config.kernel.empty()) return "";
  const detail::Sm90GemmRsConfigInfo* c = detail::find_config(detail::sm90_gemm_rs_configs(), a.config.kernel);
  if (c == nullptr) return detail::unknown_config(detail::sm90_gemm_rs_configs(), a.config.kernel);
  if (detail::serves(*c, a.dtype, a.scaling)) return "";
  const std::string operands = fp8(a) ? std::string("e4m3 with ") + to_string(a.scaling) + " scaling" : "bf16";
  return "argument 'config.kernel' = '" + a.config.kernel + "': " +
         (c->dtype == DType::kE4m3 ? std::string("an e4m3 ") + to_string(c->scaling) + "-scaled" : std::string("a bf16")) +
         " configuration; expected one for " + operands + " operands (GemmRs::kernel_names())";
}

std::string check_fp8_operands(const World& world, const GemmRsArguments& a) {
  if (std::string e = detail::check_fp8_operands(world, detail::fp8_operand_args(a, "M x K")); !e.empty()) return e;
  if (!a.a_source.empty() && !a.a.empty()) {
    return "argument 'a': expected empty with a_source (the op quantises each rank's A into rows of its own)";
  }
  if (fp8(a) && a.scaling == Fp8Scaling::kBlock && uint64_t(a.m) * a_row_bytes(a) / 4 > uint64_t(INT32_MAX)) {
    return "argument 'm' = " + std::to_string(a.m) + ": block scaling indexes A's scales with 32-bit offsets; "
           "expected at most " + std::to_string(uint64_t(INT32_MAX) * 4 / a_row_bytes(a)) + " rows of k = " +
           std::to_string(a.k);
  }
  return "";
}

std::string push_view_fits(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  if (heap.affine_stride() == 0) {
    return "argument 'config.scatter' = push: the epilogue stores through one TMA descriptor over every "
           "rank's segment, which needs an affine symmetric heap (ranks' segments at one stride); this "
           "heap's segments are separate allocations -- use 'pull' or 'ce'";
  }
  if (heap.affine_stride() % 16 != 0) {
    return "argument 'config.scatter' = push: the heap's rank stride " + std::to_string(heap.affine_stride()) +
           " bytes is not a multiple of 16 (TMA)";
  }
  // A process world's view is rotated (its owner mode starts at the storing rank), and the
  // epilogue hands the store's coordinate to its fusion too: e4m3 row scaling would pick a
  // rotated owner's A scales. Every process answers alike (the world's mode and the operands').
  if (world.mode() == WorldMode::kProcess && fp8(a) && a.scaling == Fp8Scaling::kRow) {
    return "argument 'config.scatter' = push with e4m3 row scaling in a process world: the epilogue's row "
           "scales would follow the store's rotated view of the heap; expected pull (or tensor or block scaling)";
  }
  return "";
}

GemmRsArguments with_path(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  gemm_rs_policy::PathContext c = gemm_rs_policy::path_context(
      a.config, static_cast<uint32_t>(world.size()), a.m, a.n, a.k, world.mode() != WorldMode::kVirtual);
  c.put_signal = world.transport() == Transport::kPutSignal;
  c.affine_heap = push_view_fits(world, heap, a).empty();
  c.shape.tile = named_tile(a);
  const gemm_rs_policy::Path p = gemm_rs_policy::path(a.config.scatter, a.config.reducer, c);
  GemmRsArguments out = a;
  out.config.scatter = p.scatter;
  out.config.reducer = p.reducer;
  return out;
}

// The reduction CTAs beside the GEMM: none when the GEMM's epilogue sums.
uint32_t reduce_blocks_of(const World& world, const GemmRsArguments& a) {
  if (a.config.reducer == GemmRsReducer::kEpilogue) return 0;
  return gemm_rs_policy::reduce_blocks(
      a.config.reduce_blocks, world.tightest_budget(),
      {world.size(), a.k, world.mode() != WorldMode::kVirtual});
}

// The GEMM's CTAs: the budget less the reduction beside it; non-overlapped and decomposed, the
// whole budget (the reduction runs after the GEMMs).
int gemm_sm_count(const World& world, int rank, const GemmRsArguments& a, OpMethod method) {
  const uint32_t beside = method != OpMethod::kFused ? 0 : reduce_blocks_of(world, a);
  return gemm_rs_policy::gemm_sm_count(world.sm_budget(rank), beside, a.config.gemm_sms);
}

GemmRsFusedPlan make_plan(const World& world, const GemmRsArguments& a, const detail::Sm90GemmRsConfigInfo& kernel) {
  GemmRsFusedPlan plan;
  plan.set_rows(a.m, static_cast<uint32_t>(world.size()));
  plan.n = a.n;
  plan.bm = kernel.tile_m;
  plan.bn = kernel.tile_n;
  plan.granularity = a.config.granularity;
  plan.scatter = a.config.scatter;
  plan.reducer = a.config.reducer;
  plan.defer_push_notify = a.config.push_notify == GemmRsPushNotify::kDeferred;
  return plan;
}

uint32_t choose_swizzle(const World& world, const GemmRsArguments& a, const detail::Sm90GemmRsConfigInfo& kernel) {
  const GemmRsFusedPlan plan = make_plan(world, a, kernel);
  return gemm_rs_policy::auto_swizzle(a.config.swizzle, kernel.tile_m * kernel.cluster_m, plan.rows_per_rank,
                                      plan.reducer, plan.world * plan.m_tiles(), plan.n_tiles(), kernel.cluster_m);
}

// What channel `ch` of the slice carries, for timeout reports (the layout of GemmRsFusedPlan).
std::string describe_gemm_rs_channel(const GemmRsFusedPlan& plan, uint32_t ch, int waiter, int peer) {
  const uint32_t world = plan.world;
  if (ch < plan.group_channel(0, 0)) {
    return ch < world ? "the reduction's exit barrier: rank " + std::to_string(ch) +
                            "'s arrival (that rank had not finished its reduction: reading this rank's partials, or, "
                            "with the copy engine, its own receive slots)"
                      : "the reduction's exit barrier: this rank's own reduction blocks to finish";
  }
  if (plan.reducer == GemmRsReducer::kEpilogue && ch == plan.reduced_channel()) {
    return "the own tiles this rank's GEMM epilogue has summed (" + std::to_string(plan.tiles_per_block()) +
           " per call; an own tile's sum waits for every sender's part of it)";
  }
  auto group_rows = [&](uint32_t g) {
    if (plan.granularity == SignalGranularity::kTile) {
      return "tile " + std::to_string(g) + " (tile row " + std::to_string(g / plan.n_tiles()) + ", column " +
             std::to_string(g % plan.n_tiles()) + ")";
    }
    const uint32_t tile_rows = plan.granularity == SignalGranularity::kRank ? plan.rows_per_rank : plan.bm;
    return "rows [" + std::to_string(plan.group_row0(g)) + ", " + std::to_string(plan.group_row0(g) + tile_rows) + ")";
  };
  if (ch < plan.group_channel(world, 0)) {
    const uint32_t owner = (ch - plan.group_channel(0, 0)) / plan.groups();
    const uint32_t g = (ch - plan.group_channel(0, 0)) % plan.groups();
    const std::string from = plan.scatter == GemmRsScatter::kEpiloguePush
                                 ? "every sender's GEMM epilogue (" + std::to_string(plan.arrivals_per_group() * world) +
                                       " notifies per call)"
                                 : "rank " + std::to_string(peer) + "'s GEMM";
    return "owner " + std::to_string(owner) + "'s block, " + group_rows(g) + ", from " + from +
           (waiter == peer && plan.scatter != GemmRsScatter::kEpiloguePush ? " (the copy engine waits on its own GEMM)" : "");
  }
  const uint32_t sender = (ch - plan.recv_channel(0, 0)) / plan.groups();
  const uint32_t g = (ch - plan.recv_channel(0, 0)) % plan.groups();
  return "sender " + std::to_string(sender) + "'s copy-engine copy of rank " + std::to_string(waiter) + "'s block, " +
         group_rows(g);
}

// What the decomposed method needs beyond the fused path's checks (world > 1): the receive
// buffer its copies land in (they run on the comm stream, which carries nothing else of this op's
// then). "" if it can run.
std::string decomposed_needs(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  const uint64_t bytes = GemmRs::buffer_rows(a.m, world.size()) * a.n * 2;
  if (a.recv == nullptr) {
    return "argument 'recv' is null: the decomposed method copies each peer block into its owner's recv; expected "
           "a symmetric buffer of " + std::to_string(bytes) + " bytes";
  }
  return check_symmetric(world, heap, a.recv, 0, bytes, "recv");
}

}  // namespace gemm_rs_internal

namespace {

using namespace gemm_rs_internal;

// The kernel's extents, alignment, swizzle and SMs for `method`, then the partial buffer, whose size
// depends on them: "" if both suit.
std::string check_kernel_and_partial(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a,
                                     OpMethod method) {
  const auto& kernel = kernel_for(a);
  detail::Sm90GemmRsProblem p;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.lda = a_lda(a);
  p.plan = make_plan(world, a, kernel);
  p.sm_count = gemm_sm_count(world, world.tightest_rank(), a, method);
  p.swizzle = static_cast<int>(choose_swizzle(world, a, kernel));
  if (std::string e = kernel.can_implement(p); !e.empty()) return e;
  const uint64_t bytes = GemmRs::buffer_rows(a.m, world.size()) * a.n * 2;
  return check_symmetric(world, heap, a.partial, 0, bytes, "partial");
}

// The decomposed method's checks: its block GEMMs take the whole budget and the fused path's
// scatter, granularity and SM knobs do not apply; the kernel and the partial buffer as for fused,
// then decomposed_needs. It reaches peers only with copy-engine puts and signals (and, under the
// put-with-signal transport, its exit barrier on the stream), so every transport runs it.
std::string can_implement_decomposed(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  if (std::string e = check_kernel_and_partial(world, heap, a, OpMethod::kDecomposed); !e.empty()) return e;
  if (world.size() == 1) return "";  // the GEMM alone, writing the output
  return decomposed_needs(world, heap, a);
}

}  // namespace

using namespace gemm_rs_internal;

std::string GemmRs::can_implement(const World& world, const SymmetricHeap& heap, const GemmRsArguments& in) {
  if (static_cast<uint32_t>(in.config.reducer) > 2) {
    return "argument 'config.reducer' = " + std::to_string(static_cast<uint32_t>(in.config.reducer)) +
           ": expected blocks, epilogue or auto";
  }
  if (static_cast<uint32_t>(in.config.push_notify) > 1) {
    return "argument 'config.push_notify' = " + std::to_string(static_cast<uint32_t>(in.config.push_notify)) +
           ": expected deferred or immediate";
  }
  if (static_cast<uint32_t>(in.config.scatter) > 3) {
    return "argument 'config.scatter' = " + std::to_string(static_cast<uint32_t>(in.config.scatter)) +
           ": expected pull, push, ce or auto";
  }
  if (static_cast<uint32_t>(in.config.engine) > 2) {
    return "argument 'config.engine' = " + std::to_string(static_cast<uint32_t>(in.config.engine)) +
           ": expected auto, owner_tiles or small_m";
  }
  if (in.m == 0) return "argument 'm' = 0: expected at least one row";
  if (static_cast<uint32_t>(in.config.method) > static_cast<uint32_t>(OpMethod::kNonOverlapped)) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(in.config.method)) +
           ": expected auto, fused, decomposed or non_overlapped";
  }
  // The small-M engine has checks of its own (GEMM+AR's); the rest are the owner_tiles engine's.
  if (choose_engine(world, heap, in).engine == GemmRsEngine::kSmallM) return small_m_refusal(world, heap, in);
  const GemmRsArguments a = with_path(world, heap, in);  // the checks below see the path that would run
  if (std::string e = check_fp8_operands(world, a); !e.empty()) return e;
  if (std::string e = kernel_refusal(a); !e.empty()) return e;
  const auto& kernel = kernel_for(a);
  if (a.a_source.empty()) {
    if (std::string e = check_rank_pointers(world, a.a, "a"); !e.empty()) return e;
  }
  if (std::string e = check_rank_pointers(world, a.b, "b"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  if (a.config.granularity != SignalGranularity::kTile && a.config.granularity != SignalGranularity::kTileRow &&
      a.config.granularity != SignalGranularity::kRank) {
    return "argument 'config.granularity' = " + std::to_string(static_cast<uint32_t>(a.config.granularity)) +
           ": expected kTile, kTileRow or kRank";
  }
  if (a.config.reducer == GemmRsReducer::kEpilogue) {
    if (a.config.granularity != SignalGranularity::kTile) {
      return std::string("argument 'config.granularity' = ") + to_string(a.config.granularity) +
             " with config.reducer = epilogue: an own tile's sum would wait for its own GEMM's later tiles of "
             "the same signal group; expected tile";
    }
    if (a.config.reduce_blocks != 0) {
      return "argument 'config.reduce_blocks' = " + std::to_string(a.config.reduce_blocks) +
             " with config.reducer = epilogue: the GEMM's own CTAs sum; expected 0";
    }
  }
  if ((a.config.method == OpMethod::kNonOverlapped || a.config.method == OpMethod::kDecomposed) &&
      a.config.reducer == GemmRsReducer::kEpilogue) {
    return std::string("argument 'config.method' = ") + to_string(a.config.method) +
           " with config.reducer = epilogue: the epilogue sums inside the fused GEMM, as it runs; expected the "
           "reduction blocks (reducer blocks or auto) or method fused";
  }
  if (a.config.method == OpMethod::kDecomposed) return can_implement_decomposed(world, heap, a);
  // Refused alike in every process: the tightest rank's budget (World::tightest_rank).
  const int tight = world.tightest_rank(), budget = world.sm_budget(tight);
  if (a.config.reduce_blocks > static_cast<uint32_t>(budget)) {
    return "argument 'config.reduce_blocks' = " + std::to_string(a.config.reduce_blocks) +
           ": expected at most the smallest rank's SM budget of " + std::to_string(budget);
  }
  // The reduction runs in whole clusters: what it leaves must hold one cluster of the GEMM.
  const int cluster = static_cast<int>(kernel.cluster_m * kernel.cluster_n);
  if (gemm_sm_count(world, tight, a) < cluster) {
    const std::string knob = a.config.gemm_sms != 0
                                 ? "argument 'config.gemm_sms' = " + std::to_string(a.config.gemm_sms)
                                 : "argument 'config.reduce_blocks' = " + std::to_string(a.config.reduce_blocks);
    return knob + ": the reduction takes " + std::to_string(reduce_blocks_of(world, a)) + " of the rank's " +
           std::to_string(budget) + " SMs (whole " + std::to_string(cluster) + "-CTA clusters), leaving " +
           std::to_string(std::max(gemm_sm_count(world, tight, a), 0)) + " for the GEMM; expected at least one " +
           std::to_string(cluster) + "-CTA cluster for it";
  }
  if (std::string e = check_kernel_and_partial(world, heap, a, OpMethod::kFused); !e.empty()) return e;
  const uint64_t bytes = buffer_rows(a.m, world.size()) * a.n * 2;
  if (a.config.scatter != GemmRsScatter::kCopyEngine) {
    if (std::string e = check_load_store_peers(world, std::string("GEMM+RS's ") + to_string(a.config.scatter) +
                                                          " scatter (argument 'config.scatter'; expected ce, whose "
                                                          "puts and signals go through NVSHMEM)");
        !e.empty()) {
      return e;
    }
  }
  switch (a.config.scatter) {
    case GemmRsScatter::kPull:
      return "";
    case GemmRsScatter::kEpiloguePush:
      return push_view_fits(world, heap, a);
    case GemmRsScatter::kCopyEngine:
      // Across processes and under either transport: its copies and signals are the world's
      // transport's, its waits local, its exit barrier on the stream under put_signal.
      if (a.config.granularity == SignalGranularity::kTile) {
        return "argument 'config.granularity' = tile with config.scatter = ce: the copy engine moves whole "
               "signal groups of contiguous rows; expected tile_row or rank";
      }
      return check_symmetric(world, heap, a.recv, 0, bytes, "recv");
    case GemmRsScatter::kAuto:  // resolved by with_path above: never here
      break;
  }
  return "argument 'config.scatter' = " + std::to_string(static_cast<uint32_t>(a.config.scatter)) +
         ": expected pull, push or ce";
}

uint32_t GemmRs::rows_of(uint32_t m, int world, int rank) {
  GemmRsFusedPlan plan;
  plan.set_rows(m, static_cast<uint32_t>(world));
  return plan.block_rows(static_cast<uint32_t>(rank));
}

uint64_t GemmRs::buffer_rows(uint32_t m, int world) {
  return uint64_t(GemmRsFusedPlan::owner_pitch(m, static_cast<uint32_t>(world))) * static_cast<uint32_t>(world);
}

TuneKey gemm_rs_tune_key(const World& world, const GemmRsArguments& a) {
  // FP8 entries are their own: another kernel, another rate.
  const std::string op = fp8(a) ? std::string("gemm_rs.e4m3.") + to_string(a.scaling) : std::string("gemm_rs");
  return make_tune_key(world, op, a.m, a.n, a.k);
}

}  // namespace tilelink
