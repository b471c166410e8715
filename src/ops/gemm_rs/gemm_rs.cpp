// Host side of GEMM+RS: validation, plan, per-rank kernels, launch.
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "runtime/checks.hpp"
#include "tilelink/comm/stream_ctx.hpp"
#include "ops/common/repoint.hpp"
#include "ops/common/tuned_config.hpp"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink {

namespace detail {

Sm90GemmRsConfigInfo sm90_gemm_rs_128x256x64_c2x1();

const std::vector<Sm90GemmRsConfigInfo>& sm90_gemm_rs_configs() {
  static const std::vector<Sm90GemmRsConfigInfo> configs = {sm90_gemm_rs_128x256x64_c2x1()};
  return configs;
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

namespace {

// The reduction CTAs beside the GEMM: none when the GEMM's epilogue sums.
uint32_t reduce_blocks_of(const World& world, const GemmRsArguments& a) {
  if (gemm_rs_policy::reducer(a.config.reducer) == GemmRsReducer::kEpilogue) return 0;
  return gemm_rs_policy::reduce_blocks(
      a.config.reduce_blocks, world.sm_budget(0),
      {world.size(), a.k, world.mode() == WorldMode::kMultiGpu});
}

// The GEMM's CTAs: the budget less the reduction beside it; non-overlapped and decomposed, the
// whole budget (the reduction runs after the GEMMs).
int gemm_sm_count(const World& world, int rank, const GemmRsArguments& a, OpMethod method = OpMethod::kFused) {
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
  plan.reducer = gemm_rs_policy::reducer(a.config.reducer);
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

// The kernel's extents, alignment, swizzle and SMs for `method`, then the partial buffer, whose size
// depends on them: "" if both suit.
std::string check_kernel_and_partial(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a,
                                     OpMethod method) {
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  detail::Sm90GemmRsProblem p;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.plan = make_plan(world, a, kernel);
  p.sm_count = gemm_sm_count(world, 0, a, method);
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

std::string GemmRs::can_implement(const World& world, const SymmetricHeap& heap, const GemmRsArguments& a) {
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  if (a.m == 0) return "argument 'm' = 0: expected at least one row";
  if (std::string e = check_rank_pointers(world, a.a, "a"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.b, "b"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  if (a.config.granularity != SignalGranularity::kTile && a.config.granularity != SignalGranularity::kTileRow &&
      a.config.granularity != SignalGranularity::kRank) {
    return "argument 'config.granularity' = " + std::to_string(static_cast<uint32_t>(a.config.granularity)) +
           ": expected kTile, kTileRow or kRank";
  }
  if (static_cast<uint32_t>(a.config.reducer) > 2) {
    return "argument 'config.reducer' = " + std::to_string(static_cast<uint32_t>(a.config.reducer)) +
           ": expected blocks, epilogue or auto";
  }
  if (gemm_rs_policy::reducer(a.config.reducer) == GemmRsReducer::kEpilogue) {
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
  if (static_cast<uint32_t>(a.config.method) > static_cast<uint32_t>(OpMethod::kNonOverlapped)) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(a.config.method)) +
           ": expected auto, fused, decomposed or non_overlapped";
  }
  if ((a.config.method == OpMethod::kNonOverlapped || a.config.method == OpMethod::kDecomposed) &&
      gemm_rs_policy::reducer(a.config.reducer) == GemmRsReducer::kEpilogue) {
    return std::string("argument 'config.method' = ") + to_string(a.config.method) +
           " with config.reducer = epilogue: the epilogue sums inside the fused GEMM, as it runs; expected the "
           "reduction blocks (reducer blocks or auto) or method fused";
  }
  if (a.config.method == OpMethod::kDecomposed) return can_implement_decomposed(world, heap, a);
  if (a.config.reduce_blocks > static_cast<uint32_t>(world.sm_budget(0))) {
    return "argument 'config.reduce_blocks' = " + std::to_string(a.config.reduce_blocks) +
           ": expected at most the rank's SM budget of " + std::to_string(world.sm_budget(0));
  }
  // The reduction runs in whole clusters: what it leaves must hold one cluster of the GEMM.
  const int cluster = static_cast<int>(kernel.cluster_m * kernel.cluster_n);
  if (gemm_sm_count(world, 0, a) < cluster) {
    const std::string knob = a.config.gemm_sms != 0
                                 ? "argument 'config.gemm_sms' = " + std::to_string(a.config.gemm_sms)
                                 : "argument 'config.reduce_blocks' = " + std::to_string(a.config.reduce_blocks);
    return knob + ": the reduction takes " + std::to_string(reduce_blocks_of(world, a)) + " of the rank's " +
           std::to_string(world.sm_budget(0)) + " SMs (whole " + std::to_string(cluster) + "-CTA clusters), leaving " +
           std::to_string(std::max(gemm_sm_count(world, 0, a), 0)) + " for the GEMM; expected at least one " +
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
      if (heap.affine_stride() == 0) {
        return "argument 'config.scatter' = push: the epilogue stores through one TMA descriptor over every "
               "rank's segment, which needs an affine symmetric heap (ranks' segments at one stride); this "
               "heap's segments are separate allocations -- use 'pull' or 'ce'";
      }
      if (heap.affine_stride() % 16 != 0) {
        return "argument 'config.scatter' = push: the heap's rank stride " + std::to_string(heap.affine_stride()) +
               " bytes is not a multiple of 16 (TMA)";
      }
      return "";
    case GemmRsScatter::kCopyEngine:
      // Across processes and under either transport: its copies and signals are the world's
      // transport's, its waits local, its exit barrier on the stream under put_signal.
      if (a.config.granularity == SignalGranularity::kTile) {
        return "argument 'config.granularity' = tile with config.scatter = ce: the copy engine moves whole "
               "signal groups of contiguous rows; expected tile_row or rank";
      }
      return check_symmetric(world, heap, a.recv, 0, bytes, "recv");
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
  return make_tune_key(world, "gemm_rs", a.m, a.n, a.k);
}

GemmRs::GemmRs(const World& world, SymmetricHeap& heap, SignalSet& signals, const GemmRsArguments& args_in,
               const std::string& name)
    : world_(&world), heap_(&heap), args_(args_in) {
  if (std::string why = can_implement(world, heap, args_in); !why.empty()) {
    throw InvalidArgument("GemmRs '" + name + "': " + why);
  }
  // With every knob on automatic, the tune cache's configuration for this GPU, world and shape
  // (its method too, unless the caller chose one).
  args_ = detail::with_tuned_config<GemmRs>(
      world, heap, args_in, [&] { return gemm_rs_tune_key(world, args_in); },
      [](auto& tuned, const auto& callers) {
        if (callers.method != OpMethod::kAuto) tuned.method = callers.method;
      },
      &tuned_from_);
  const GemmRsArguments& args = args_;
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  plan_ = make_plan(world, args, kernel);
  reduce_blocks_ = reduce_blocks_of(world, args);
  swizzle_ = choose_swizzle(world, args, kernel);
  kernel_cluster_ = kernel.cluster_m * kernel.cluster_n;
  choose_method(args_in.config.method);
  if (method_ == OpMethod::kDecomposed) {  // whole owner blocks by the copy engine, own part in stream order
    plan_.scatter = GemmRsScatter::kCopyEngine;
    plan_.granularity = SignalGranularity::kRank;
    plan_.own_part_in_order = true;
  }
  // Put-with-signal: peers only through NVSHMEM, so the exit barrier's notifies go on the stream
  // (only the copy-engine paths get here: the others load or store peers and are refused).
  plan_.exit_on_stream = world.transport() == Transport::kPutSignal;
  slice_ = signals.allocate(plan_.num_channels(), name);
  slice_.set_describer([plan = plan_](uint32_t ch, int waiter, int peer) {
    return describe_gemm_rs_channel(plan, ch, waiter, peer);
  });
  // The band the scheduler really runs (it narrows a swizzle for few tiles).
  plan_.band = gemm_rs_policy::scheduler_swizzle(swizzle_, plan_.world * plan_.m_tiles(), plan_.n_tiles()) *
               kernel.cluster_m;
  const uint32_t m_tiles = plan_.world * plan_.m_tiles();  // every owner block's tile rows
  const size_t n_ranks = static_cast<size_t>(world.size());  // per-rank state; other processes' entries stay empty
  kernels_.resize(n_ranks);
  block_kernels_.resize(n_ranks);
  m_order_.resize(n_ranks);
  block_order_.resize(n_ranks);
  host_m_order_.resize(n_ranks);
  for (int r : world.local_ranks()) {
    std::vector<uint32_t> order(m_tiles);
    make_gemm_rs_m_order(plan_, static_cast<uint32_t>(r), order.data());
    DeviceBuffer table(m_tiles * sizeof(uint32_t), world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(table.get(), order.data(), table.bytes(), cudaMemcpyHostToDevice));
    m_order_[static_cast<size_t>(r)] = std::move(table);
    host_m_order_[static_cast<size_t>(r)] = std::move(order);
    if (method_ == OpMethod::kDecomposed) {  // a block GEMM's tile rows in order: the identity
      std::vector<uint32_t> identity(plan_.m_tiles());
      for (uint32_t i = 0; i < identity.size(); ++i) identity[i] = i;
      DeviceBuffer ids(identity.size() * sizeof(uint32_t), world.device(r));
      TL_CUDA_CHECK(cudaMemcpy(ids.get(), identity.data(), ids.bytes(), cudaMemcpyHostToDevice));
      block_order_[static_cast<size_t>(r)] = std::move(ids);
    }
    make_kernel(r);
    detail::preload_gemm_rs_reduce();
  }
  if (method_ == OpMethod::kDecomposed && world.size() > 1) {
    scatter_ = SideStreams::on_comm_streams(world);  // the copies; nothing else uses the comm stream then
  } else if (plan_.scatter == GemmRsScatter::kCopyEngine && world.size() > 1) {
    // A stream of its own; where another would not get a hardware queue (a process under MPS), the
    // comm stream: the copies, each after its group's stream wait, then the reduction behind them
    // (correct, but the fused reduction then starts only once the GEMM's last group is copied).
    scatter_ = world.check_extra_streams(1, "config.scatter = ce (a scatter stream per rank)").empty()
                   ? SideStreams(world, true)
                   : SideStreams::on_comm_streams(world);
  }
}

void GemmRs::choose_method(OpMethod callers) {
  const World& world = *world_;
  const int budget = world.sm_budget(world.local_ranks().front());
  gemm_rs_policy::MethodShape s;
  s.world = static_cast<uint32_t>(world.size());
  s.m = args_.m;
  s.n = args_.n;
  s.k = args_.k;
  s.sm_budget = budget;
  s.reduce_blocks = reduce_blocks_;
  s.reducer = plan_.reducer;
  s.one_rank_per_gpu = world.mode() != WorldMode::kVirtual;
  estimates_ = gemm_rs_policy::estimate_methods(s);
  auto us = [](double t) { return std::to_string(static_cast<long long>(t * 1e6 + 0.5)); };
  if (plan_.reducer == GemmRsReducer::kEpilogue) {  // can_implement refuses a configured non-fused method
    method_ = OpMethod::kFused;
    method_why_ = callers != OpMethod::kAuto ? "configured" : "the epilogue reducer sums inside the GEMM";
  } else {
    const bool decomposed_ok = world.size() == 1 || decomposed_needs(world, *heap_, args_).empty();
    method_ = gemm_rs_policy::choose_method(args_.config.method, estimates_,
                                            decomposed_ok && gemm_rs_policy::kAutoMayDecompose);
    method_why_ = callers != OpMethod::kAuto          ? "configured"
                  : args_.config.method != OpMethod::kAuto ? "the tune cache's measured winner (" + tuned_from_ + ")"
                                                           : "the estimate's fastest (fused " + us(estimates_.fused) +
                                                                 " us, non-overlapped " +
                                                                 us(estimates_.non_overlapped) + " us, decomposed " +
                                                                 (decomposed_ok ? us(estimates_.decomposed) + " us"
                                                                                : std::string("not possible: no recv")) +
                                                                 (gemm_rs_policy::kAutoMayDecompose
                                                                      ? ")"
                                                                      : "; not chosen automatically until measured)");
  }
  if (method_ != OpMethod::kFused) {  // after the GEMM(s) the reduction takes the whole budget
    reduce_blocks_ = std::max(kernel_cluster_, static_cast<uint32_t>(budget) / kernel_cluster_ * kernel_cluster_);
  }
}

void GemmRs::make_kernel(int r) {
  const auto& kernel = detail::sm90_gemm_rs_configs().front();
  detail::Sm90GemmRsProblem p;
  p.a = args_.a[static_cast<size_t>(r)];
  p.b = args_.b[static_cast<size_t>(r)];
  const int64_t block = int64_t(plan_.rows_per_rank) * args_.n;  // elements of an owner block
  if (world_->size() == 1) {  // the reduce-scatter of one rank is the identity: the GEMM writes `out`
    p.d = args_.out[0];
    p.d_batch_stride = block;
  } else if (args_.config.scatter == GemmRsScatter::kEpiloguePush) {  // owner l's slot r: base(0) + l * stride
    p.d = static_cast<char*>(args_.partial->data(0)) + uint64_t(r) * block * 2;
    p.d_batch_stride = static_cast<int64_t>(heap_->affine_stride() / 2);
  } else {
    p.d = args_.partial->data(r);
    p.d_batch_stride = block;
  }
  p.m = args_.m;
  p.n = args_.n;
  p.k = args_.k;
  p.m_order = m_order_[static_cast<size_t>(r)].get<uint32_t>();
  p.plan = plan_;
  p.sig = slice_.device_view(r, std::string("sm90_gemm_rs_") + kernel.name);
  p.heap = heap_->device_view(r);
  p.buf = args_.partial->data(r);
  p.recv = args_.recv != nullptr ? args_.recv->data(r) : nullptr;
  p.out = args_.out[static_cast<size_t>(r)];
  p.device = world_->device(r);
  p.sm_count = gemm_sm_count(*world_, r, args_, method_);
  p.swizzle = static_cast<int>(swizzle_);
  std::vector<std::unique_ptr<detail::Sm90GemmRsKernel>> blocks;
  if (method_ == OpMethod::kDecomposed && world_->size() > 1) {
    // A plain GEMM per owner block: its rows of A into its rows of the partial (one owner's plan,
    // so the kernel sees the block as a whole problem); none for a block past M.
    for (uint32_t q = 0; q < plan_.world; ++q) {
      const uint32_t rows = plan_.block_rows(q);
      blocks.emplace_back();
      if (rows == 0) continue;
      detail::Sm90GemmRsProblem b = p;
      b.plan.set_rows(rows, 1);
      b.plan.granularity = SignalGranularity::kTile;
      b.plan.scatter = GemmRsScatter::kPull;
      b.plan.own_part_in_order = false;
      b.a = static_cast<const char*>(p.a) + uint64_t(q) * plan_.rows_per_rank * args_.k * 2;
      b.d = static_cast<char*>(args_.partial->data(r)) + uint64_t(q) * plan_.rows_per_rank * args_.n * 2;
      b.d_batch_stride = block;
      b.m = rows;
      b.m_order = block_order_[static_cast<size_t>(r)].get<uint32_t>();
      b.swizzle = static_cast<int>(gemm_rs_policy::auto_swizzle(args_.config.swizzle, kernel.tile_m * kernel.cluster_m,
                                                                rows, b.plan.reducer, b.plan.m_tiles(),
                                                                b.plan.n_tiles(), kernel.cluster_m));
      blocks.back() = kernel.make(b);
    }
  }
  kernels_[static_cast<size_t>(r)] = kernel.make(p);
  block_kernels_[static_cast<size_t>(r)] = std::move(blocks);
  if (trace_ != nullptr) kernels_[static_cast<size_t>(r)]->set_trace(trace_->view(r));
}

void GemmRs::set_operands(int rank, const void* a, const void* b, void* out) {
  world_->check_local_rank(rank, "GemmRs::set_operands");
  require_aligned("GemmRs::set_operands", "a", a, "a 16-byte aligned M x K bf16 input on the rank's device");
  require_aligned("GemmRs::set_operands", "b", b, "a 16-byte aligned N x K bf16 weight on the rank's device");
  require_aligned("GemmRs::set_operands", "out", out, "a 16-byte aligned M/P x N bf16 output on the rank's device");
  const size_t r = static_cast<size_t>(rank);
  // The GEMM holds A and B, and `out` too at world 1 (it writes the output itself) or when its
  // epilogue sums; the reduction kernel takes `out` at each launch.
  const bool gemm_holds_out = world_->size() == 1 || plan_.reducer == GemmRsReducer::kEpilogue;
  const bool gemm_changed = args_.a[r] != a || args_.b[r] != b || (gemm_holds_out && args_.out[r] != out);
  if (!gemm_changed) {
    args_.out[r] = out;
    return;
  }
  detail::repoint(
      args_,
      [&](GemmRsArguments& x) {
        x.a[r] = a;
        x.b[r] = b;
        x.out[r] = out;
      },
      [&] { make_kernel(rank); });  // replaces the kernel only once the new one is made
}

GemmRs::~GemmRs() = default;

uint64_t GemmRs::run() {
  const World& world = *world_;
  const uint64_t epoch = slice_.begin_call();
  if (world.size() == 1) {  // no peers: the GEMM alone, writing the output (see the constructor)
    kernels_[0]->run(epoch, world.compute_stream(0), false);
    return epoch;
  }
  if (method_ == OpMethod::kDecomposed) return run_decomposed(epoch);
  for (int r : world.local_ranks()) {
    // The reduction reads peers' partials until its exit barrier; the previous call's reduction
    // (and so every peer's reading of this rank's partial) completes before this GEMM writes.
    world.comm_after_compute(r);
    kernels_[static_cast<size_t>(r)]->run(epoch, world.compute_stream(r));
    if (method_ == OpMethod::kNonOverlapped) {
      // The GEMM on every SM of the budget, then, after it on the compute stream, the copies (ce)
      // and the reduction on every SM: nothing beside the GEMM.
      const cudaStream_t compute = world.compute_stream(r);
      if (plan_.scatter == GemmRsScatter::kCopyEngine) enqueue_scatter(r, compute);
      launch_reduce(r, "gemm_rs_reduce", reduce_blocks_, kernel_cluster_, compute);
      if (plan_.scatter == GemmRsScatter::kCopyEngine) scatter_.join_into(r, compute);
      continue;
    }
    if (plan_.scatter == GemmRsScatter::kCopyEngine) enqueue_scatter(r, world.comm_stream(r));
    if (plan_.reducer == GemmRsReducer::kEpilogue) {
      // The GEMM's consumers summed this rank's tiles; one block after it on the compute stream
      // passes the exit barrier (no SM held beside the GEMM: virtual ranks stay co-resident).
      launch_reduce(r, "gemm_rs_exit", 1, 1, world.compute_stream(r));
      if (plan_.scatter == GemmRsScatter::kCopyEngine) scatter_.join_into(r, world.compute_stream(r));
      continue;
    }
    launch_reduce(r, "gemm_rs_reduce", reduce_blocks_, kernel_cluster_, world.comm_stream(r));
    // The copies read this call's partial.
    if (plan_.scatter == GemmRsScatter::kCopyEngine) scatter_.join_into(r, world.comm_stream(r));
    world.compute_after_comm(r);
  }
  return epoch;
}

// Per rank on the compute stream: the block GEMMs (other owners first, own last), each peer
// block's copy on the comm stream once its GEMM is done (gemm_rs_decomposed), then the reduction on
// every SM (its exit barrier: peers' copies into this rank's recv wait for it next call, as the
// copies are forked from the compute stream after it).
uint64_t GemmRs::run_decomposed(uint64_t epoch) {
  const World& world = *world_;
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const cudaStream_t compute = world.compute_stream(r);
    StreamCtx h{r, world.size(), scatter_.stream(r), world.transport()};
    gemm_rs_decomposed(
        h, plan_, slice_.host_view(r), heap_->host_view(r), args_.partial->data(r), args_.recv->data(r), 2,
        [&](uint32_t q) {
          if (block_kernels_[i][q] != nullptr) block_kernels_[i][q]->run(epoch, compute, false);
        },
        [&](uint32_t) { scatter_.fork_from(r, compute); });
    launch_reduce(r, "gemm_rs_reduce", reduce_blocks_, kernel_cluster_, compute);
    scatter_.join_into(r, compute);
  }
  return epoch;
}

// The reduction kernel of rank `rank` (`blocks` CTAs in clusters of `cluster`) on `stream`, and with
// plan_.exit_on_stream its exit barrier after it on the same stream.
void GemmRs::launch_reduce(int rank, const char* what, uint32_t blocks, uint32_t cluster, cudaStream_t stream) {
  detail::launch_gemm_rs_reduce(plan_, slice_.device_view(rank, what), heap_->device_view(rank),
                                args_.partial->data(rank), args_.recv != nullptr ? args_.recv->data(rank) : nullptr,
                                args_.out[static_cast<size_t>(rank)], blocks, cluster, stream,
                                trace_ != nullptr ? trace_->view(rank) : TraceView{});
  if (!plan_.exit_on_stream) return;
  StreamCtx h{rank, world_->size(), stream, world_->transport()};
  rank_exit_barrier_stream(h, slice_.host_view(rank), plan_.exit_channel());
}

void GemmRs::set_trace(const TraceBuffer* trace) {
  trace_ = trace;
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
}

void GemmRs::run_gemm_only() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    kernels_[static_cast<size_t>(r)]->run(slice_.epoch(), world_->compute_stream(r), false);
  }
}

// The copies run on the rank's scatter stream, after everything so far on `after` (the comm
// stream, fused: the previous call's reduction and exit barrier, so no owner still reads the slots
// they overwrite; the compute stream, non-overlapped: also this call's GEMM); the stream that
// runs the reduction waits for them after launching it.
void GemmRs::enqueue_scatter(int rank, cudaStream_t after) {
  scatter_.fork_from(rank, after);
  StreamCtx h{rank, world_->size(), scatter_.stream(rank), world_->transport()};
  gemm_rs_copy_engine_scatter(h, plan_, slice_.host_view(rank), heap_->host_view(rank),
                              host_m_order_[static_cast<size_t>(rank)].data(), args_.partial->data(rank),
                              args_.recv->data(rank), 2);
}

}  // namespace tilelink
