// Host side of GEMM+AR: validation, the automatic choices, per-rank kernels, launch.
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "ops/common/config_json.hpp"
#include "ops/common/repoint.hpp"
#include "ops/common/tuned_config.hpp"
#include "ops/gemm_ar/sm90_gemm_ar_kernel.hpp"
#include "runtime/checks.hpp"
#include "tilelink/comm/stream_ctx.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/work_counters.hpp"

namespace tilelink {

namespace detail {

Sm90GemmArConfigInfo sm90_gemm_ar_128x128x64_c1x1();
Sm90GemmArConfigInfo sm90_gemm_ar_64x128x128_c1x1_pingpong();

const std::vector<Sm90GemmArConfigInfo>& sm90_gemm_ar_configs() {
  static const std::vector<Sm90GemmArConfigInfo> configs = {sm90_gemm_ar_128x128x64_c1x1(),
                                                            sm90_gemm_ar_64x128x128_c1x1_pingpong()};
  return configs;
}

const Sm90GemmArConfigInfo& sm90_gemm_ar_config(uint32_t m) {
  const auto& configs = sm90_gemm_ar_configs();
  return m <= configs[1].tile_m ? configs[1] : configs[0];
}

}  // namespace detail

std::string describe(const GemmArConfig& c) {
  auto count = [](uint32_t v) { return v == 0 ? std::string("auto") : std::to_string(v); };
  return std::string("method ") + to_string(c.method) + ", schedule " + to_string(c.schedule) + ", splits " +
         count(c.splits) + ", reduction CTAs " + count(c.reduce_blocks) + ", GEMM CTAs " + count(c.gemm_sms) +
         ", path " + to_string(c.path) + ", slices summed in " + to_string(c.slice_sum);
}

bool is_automatic(const GemmArConfig& c) {
  const GemmArConfig d;
  return c.method == d.method && c.schedule == d.schedule && c.splits == d.splits &&
         c.reduce_blocks == d.reduce_blocks && c.gemm_sms == d.gemm_sms && c.path == d.path &&
         c.slice_sum == d.slice_sum;
}

std::string to_config_json(const GemmArConfig& c) {
  return detail::json{{"method", to_string(c.method)},
                      {"schedule", to_string(c.schedule)},
                      {"splits", c.splits},
                      {"reduce_blocks", c.reduce_blocks},
                      {"gemm_sms", c.gemm_sms},
                      {"path", to_string(c.path)},
                      {"slice_sum", to_string(c.slice_sum)}}
      .dump();
}

void from_config_json(const std::string& json, const std::string& source, GemmArConfig& c) {
  c = detail::parse_config_json(json, source, "a GEMM+AR configuration", [&](const detail::json& j) {
    GemmArConfig out;
    out.method = detail::enum_field(
        j, "method", {AllReduceMethod::kAuto, AllReduceMethod::kOneShot, AllReduceMethod::kTwoShot}, source);
    out.schedule = detail::enum_field(
        j, "schedule", {GemmArSchedule::kAuto, GemmArSchedule::kFused, GemmArSchedule::kNonOverlapped}, source);
    out.splits = j.at("splits").get<uint32_t>();
    out.reduce_blocks = j.at("reduce_blocks").get<uint32_t>();
    out.gemm_sms = j.at("gemm_sms").get<uint32_t>();
    // Absent in entries written before the knob existed: auto.
    if (j.contains("path")) {
      out.path = detail::enum_field(j, "path", {GemmArPath::kAuto, GemmArPath::kSm, GemmArPath::kCopyEngine}, source);
    }
    // Absent in entries written before the knob existed: the reduction, what they were measured with
    // (auto now sums in the GEMM).
    out.slice_sum = j.contains("slice_sum")
                        ? detail::enum_field(j, "slice_sum",
                                             {GemmArSliceSum::kAuto, GemmArSliceSum::kReduction, GemmArSliceSum::kGemm},
                                             source)
                        : GemmArSliceSum::kReduction;
    return out;
  });
}

TuneKey gemm_ar_tune_key(const World& world, const GemmArArguments& a) {
  // The variant names the GEMM's tile for this M: an entry tuned with another tile (slices, CTA
  // counts, schedule) is not this kernel's, and is not taken.
  return make_tune_key(world, "gemm_ar", a.m, a.n, a.k, detail::sm90_gemm_ar_config(a.m).name);
}

namespace {

constexpr uint32_t kMaxSplits = 16;

// What channel `ch` of a slice with `plan` carries, for timeout reports.
std::string describe_gemm_ar_channel(const GemmArPlan& plan, uint32_t ch) {
  if (ch < plan.ready_channel(0)) {
    return ch < plan.world ? "the reduction's exit barrier: rank " + std::to_string(ch) +
                                 "'s arrival (that rank had not finished reading this rank's partial)"
                           : "the reduction's exit barrier: this rank's own reduction blocks to finish";
  }
  auto tile = [&](uint32_t t) {
    const RowRange r = plan.tile_rows(t), c = plan.tile_cols(t);
    return "tile " + std::to_string(t) + " (rows [" + std::to_string(r.row0) + ", " + std::to_string(r.row0 + r.rows) +
           "), columns [" + std::to_string(c.row0) + ", " + std::to_string(c.row0 + c.rows) + "))";
  };
  if (ch < plan.ready_channel(plan.tiles())) {
    const uint32_t t = ch - plan.ready_channel(0);
    return plan.in_place ? "the partial's " + tile(t) + " to be in place"
                         : "the GEMM's " + tile(t) + " (" + std::to_string(plan.splits) + " partial(s) per call)";
  }
  if (plan.method == ArMethod::kTwoShot && !plan.copy_engine && ch < plan.reduced_channel(plan.tiles())) {
    const uint32_t t = ch - plan.reduced_channel(0);
    return "the sum of " + tile(t) + " from its owner, rank " + std::to_string(plan.owner(t));
  }
  auto tile_row = [&](uint32_t mt) {
    const RowRange r = plan.tile_rows(mt * plan.n_tiles());
    return "tile row " + std::to_string(mt) + " (rows [" + std::to_string(r.row0) + ", " +
           std::to_string(r.row0 + r.rows) + "))";
  };
  if (ch < plan.arrived_channel(0, 0)) {
    return tile_row(ch - plan.row_channel(0)) + " of the new residual, before its RMSNorm (this rank's blocks)";
  }
  if (ch < plan.gathered_channel(0)) {
    const uint32_t i = ch - plan.arrived_channel(0, 0);
    return "rank " + std::to_string(i % plan.world) + "'s partial of " + tile_row(i / plan.world) +
           ", put into this rank by that rank's stream (copy-engine path)";
  }
  const uint32_t mt = ch - plan.gathered_channel(0);
  return "the sums of " + tile_row(mt) + " from its owner, rank " + std::to_string(plan.row_owner(mt)) +
         ", put into this rank by the owner's stream (copy-engine path)";
}

GemmArChoice choose(const World& world, const GemmArArguments& a) {
  const GemmArShape shape{world.size(), world.tightest_budget(), a.m, a.n, a.k, a.has_norm(), a.scatter};
  return gemm_ar_choice(shape, a.config, gemm_ar_rates(world, a.config.path));
}

detail::Sm90GemmArProblem problem_of(const World& world, const GemmArArguments& a, const GemmArChoice& ch,
                                     const detail::Sm90GemmArConfigInfo& kernel) {
  detail::Sm90GemmArProblem p;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.plan.world = static_cast<uint32_t>(world.size());
  p.plan.m = a.m;
  p.plan.n = a.n;
  p.plan.bm = kernel.tile_m;
  p.plan.bn = kernel.tile_n;
  p.k_slices = ch.splits;
  p.plan.splits = ch.partials();
  p.plan.parts = ch.parts;
  p.plan.method = ch.method;
  p.plan.norm = a.has_norm();
  p.plan.copy_engine = gemm_ar_copy_engine(world, a.config.path);
  p.plan.scatter = a.scatter;
  p.sm_count = ch.gemm_sms;
  return p;
}

}  // namespace

bool gemm_ar_copy_engine(const World& world, GemmArPath path) {
  return path == GemmArPath::kCopyEngine || (path == GemmArPath::kAuto && world.transport() == Transport::kPutSignal);
}

GemmArRates gemm_ar_rates(const World& world, GemmArPath path) {
  GemmArRates r;
  if (world.mode() == WorldMode::kVirtual) {
    r.hbm_bandwidth /= world.size();
    r.link_bandwidth = r.hbm_bandwidth;
  }
  r.copy_engine = gemm_ar_copy_engine(world, path);
  return r;
}

std::string GemmAr::can_implement(const World& world, const SymmetricHeap& heap, const GemmArArguments& a) {
  const auto& kernel = detail::sm90_gemm_ar_config(a.m);
  const GemmArConfig& c = a.config;
  if (a.m == 0) return "argument 'm' = 0: expected at least one row";
  if (c.path != GemmArPath::kAuto && c.path != GemmArPath::kSm && c.path != GemmArPath::kCopyEngine) {
    return "argument 'config.path' = " + std::to_string(static_cast<uint32_t>(c.path)) +
           ": expected auto, sm or copy_engine";
  }
  if (c.path == GemmArPath::kSm) {
    if (std::string e = check_load_store_peers(world, "GEMM+AR's reduction on the sm path (config.path = copy_engine "
                                                      "runs under put_signal)");
        !e.empty()) {
      return e;
    }
  }
  if (std::string e = check_rank_pointers(world, a.a, "a"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.b, "b"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  if (a.has_norm()) {
    if (std::string e = check_rank_pointers(world, a.residual, "residual"); !e.empty()) return e;
    if (std::string e = check_rank_pointers(world, a.residual_out, "residual_out"); !e.empty()) return e;
    if (std::string e = check_rank_pointers(world, a.norm_weight, "norm_weight"); !e.empty()) return e;
    if (!(a.eps > 0.f)) return "argument 'eps' = " + std::to_string(a.eps) + ": expected a positive value";
    for (int r : world.local_ranks()) {
      if (a.out[static_cast<size_t>(r)] == a.residual_out[static_cast<size_t>(r)]) {
        return "arguments 'out' and 'residual_out' of rank " + std::to_string(r) +
               " are the same buffer: expected two (the norm reads the new residual while it writes out)";
      }
    }
  }
  if (a.scatter && a.has_norm()) {
    return "arguments 'residual', 'residual_out' and 'norm_weight' are given with the reduce-scatter: expected none "
           "(the norm epilogue follows the all-reduce only)";
  }
  if (a.scatter && c.method == AllReduceMethod::kTwoShot) {
    return "argument 'config.method' = two_shot with the reduce-scatter: expected auto or one_shot (each rank sums "
           "its own block of rows)";
  }
  if (c.method != AllReduceMethod::kAuto && c.method != AllReduceMethod::kOneShot &&
      c.method != AllReduceMethod::kTwoShot) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(c.method)) +
           ": expected auto, one_shot or two_shot";
  }
  if (c.slice_sum != GemmArSliceSum::kAuto && c.slice_sum != GemmArSliceSum::kReduction &&
      c.slice_sum != GemmArSliceSum::kGemm) {
    return "argument 'config.slice_sum' = " + std::to_string(static_cast<uint32_t>(c.slice_sum)) +
           ": expected auto, reduction or gemm";
  }
  if (c.schedule != GemmArSchedule::kFused && c.schedule != GemmArSchedule::kNonOverlapped &&
      c.schedule != GemmArSchedule::kAuto) {
    return "argument 'config.schedule' = " + std::to_string(static_cast<uint32_t>(c.schedule)) +
           ": expected auto, fused or non_overlapped";
  }
  const int budget = world.tightest_budget();
  if (c.splits > kMaxSplits) {
    return "argument 'config.splits' = " + std::to_string(c.splits) + ": expected at most " + std::to_string(kMaxSplits);
  }
  if (c.reduce_blocks > static_cast<uint32_t>(budget)) {
    return "argument 'config.reduce_blocks' = " + std::to_string(c.reduce_blocks) +
           ": expected at most the rank's SM budget of " + std::to_string(budget);
  }
  const GemmArChoice ch = choose(world, a);
  if (ch.gemm_sms < 1) {
    return "argument 'config.reduce_blocks' = " + std::to_string(ch.reduce_blocks) + ": the reduction takes all " +
           std::to_string(budget) + " SMs of the rank's budget, leaving none for the GEMM";
  }
  const detail::Sm90GemmArProblem problem = problem_of(world, a, ch, kernel);
  if (std::string e = kernel.can_implement(problem); !e.empty()) return e;
  // The op's own symmetric buffers (the constructor's allocations), against what the heap has left.
  const GemmArPlan& plan = problem.plan;
  const uint64_t partial = uint64_t(plan.splits) * plan.elems() * 2;
  const uint64_t reduced = plan.method == ArMethod::kTwoShot ? plan.elems() * 2 : 0;
  const uint64_t recv = plan.copy_engine && world.size() > 1 ? uint64_t(world.size()) * partial : 0;
  if (!heap.fits({partial, reduced, recv})) {  // in the constructor's order
    return "arguments 'm' = " + std::to_string(a.m) + ", 'n' = " + std::to_string(a.n) +
           ": GEMM+AR's symmetric buffers need " + std::to_string(partial + reduced + recv) + " bytes per rank (" +
           std::to_string(plan.splits) + " partial(s) of M x N bf16" +
           (reduced != 0 ? std::string(", the two-shot sums") : std::string()) +
           (recv != 0 ? std::string(", the copy-engine path's staging of every rank's") : std::string()) +
           ") and the heap has " + std::to_string(heap.bytes_free()) +
           " free, not in ranges that hold them: expected a larger heap";
  }
  // The K slices summed in the GEMM: a workspace per rank in device memory (not in the heap),
  // the ranks of one device together.
  if (const detail::SliceSumWorkspace w = detail::slice_sum_workspace(plan, problem.k_slices); w.bytes() != 0) {
    std::map<int, int> ranks_on;
    for (int r : world.local_ranks()) ++ranks_on[world.device(r)];
    for (const auto& [device, ranks] : ranks_on) {
      const DeviceMemory mem = device_memory(device);
      if (w.bytes() * uint64_t(ranks) > mem.free) {
        return "argument 'config.splits' = " + std::to_string(problem.k_slices) + " with m = " + std::to_string(a.m) +
               ", n = " + std::to_string(a.n) + ": the K slices summed in the GEMM need " + format_bytes(w.bytes()) +
               " of fp32 workspace per rank (" + std::to_string(ranks) + " rank(s) on device " +
               std::to_string(device) + ", " + format_bytes(mem.free) +
               " free there): expected fewer K slices or config.slice_sum = reduction";
      }
    }
  }
  return "";
}

GemmAr::GemmAr(const World& world, SymmetricHeap& heap, SignalSet& signals, const GemmArArguments& args,
               const std::string& name)
    : world_(&world), heap_(&heap), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) throw InvalidArgument("GemmAr '" + name + "': " + why);
  // With every knob on automatic, the tune cache's configuration for this GPU, world and shape.
  args_ = detail::with_tuned_config<GemmAr>(
      world, heap, args, [&] { return gemm_ar_tune_key(world, args); }, [](auto&, const auto&) {}, &tuned_from_);
  const auto& kernel = detail::sm90_gemm_ar_config(args.m);
  choice_ = choose(world, args_);
  if (!tuned_from_.empty()) choice_.why += " (the tune cache's configuration, " + tuned_from_ + ")";
  const GemmArChoice& ch = choice_;
  plan_ = problem_of(world, args_, ch, kernel).plan;
  reduce_blocks_ = ch.reduce_blocks;
  gemm_sms_ = ch.gemm_sms;
  chain_plan_ = plan_;
  chain_plan_.in_place = true;
  // The all-reduce after the GEMM runs alone: the non-overlapped schedule's CTAs and parts, or, for
  // run_all_reduce_only next to a fused op, up to the whole budget, down to a part per CTA.
  if (ch.schedule != GemmArSchedule::kNonOverlapped || reduce_blocks_ == 0) {
    const uint32_t reduced_tiles = std::max(plan_.num_reduced(0), 1u);
    chain_blocks_ = gemm_ar_policy::blocks_alone(reduced_tiles, plan_.bn, world.tightest_budget());
    chain_plan_.parts = gemm_ar_policy::parts_for(chain_blocks_, reduced_tiles, plan_.bn);
  } else {
    chain_blocks_ = reduce_blocks_;
  }
  slice_ = signals.allocate(plan_.num_channels(), name);
  slice_.set_describer([plan = plan_](uint32_t ch, int, int) { return describe_gemm_ar_channel(plan, ch); });
  chain_slice_ = signals.allocate(chain_plan_.num_channels(), name + " (all-reduce after the GEMM)");
  chain_slice_.set_describer([plan = chain_plan_](uint32_t ch, int, int) { return describe_gemm_ar_channel(plan, ch); });
  partial_ = heap.allocate(uint64_t(plan_.splits) * plan_.elems() * 2);
  if (plan_.method == ArMethod::kTwoShot) reduced_ = heap.allocate(plan_.elems() * 2);
  if (plan_.copy_engine && world.size() > 1) {
    recv_ = heap.allocate(uint64_t(world.size()) * plan_.splits * plan_.elems() * 2);
  }
  const size_t n_ranks = static_cast<size_t>(world.size());
  kernels_.resize(n_ranks);
  m_order_.resize(n_ranks);
  queues_ = zeroed_work_counters(world, 2);  // one per reduction plan: see queues_
  if (const detail::SliceSumWorkspace w = detail::slice_sum_workspace(plan_, ch.splits); w.bytes() != 0) {
    slice_sums_ = zeroed_buffers(world, w.bytes());  // the flags start at 0; the kernel leaves them there
  }
  for (int r : world.local_ranks()) {
    std::vector<uint32_t> order(plan_.m_tiles());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    DeviceBuffer table(order.size() * sizeof(uint32_t), world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(table.get(), order.data(), table.bytes(), cudaMemcpyHostToDevice));
    m_order_[static_cast<size_t>(r)] = std::move(table);
    make_kernel(r);
    detail::preload_gemm_ar_reduce();
  }
}

GemmAr::~GemmAr() = default;

int GemmAr::gemm_ctas() const { return kernels_[static_cast<size_t>(world_->local_ranks().front())]->ctas(); }

std::string GemmAr::describe_choice() const {
  return choice_.why + (gemm_writes_out() ? " (the GEMM writes out itself: one rank, one partial, no norm)" : "") +
         (plan_.scatter && plan_.world > 1 ? "; each rank sums its " + std::to_string(plan_.rows_per_rank()) +
                                                 "-row block (reduce-scatter)"
                                           : "") +
         (plan_.copy_engine ? std::string("; copy-engine path (") +
                                  (args_.config.path == GemmArPath::kCopyEngine ? "configured" : "the world's transport is put_signal") + ")"
                            : "");
}

bool GemmAr::gemm_writes_out() const { return plan_.world == 1 && plan_.splits == 1 && !plan_.norm; }

void GemmAr::make_kernel(int r) {
  const auto& kernel = detail::sm90_gemm_ar_config(args_.m);
  const size_t i = static_cast<size_t>(r);
  detail::Sm90GemmArProblem p;
  p.a = args_.a[i];
  p.b = args_.b[i];
  p.d = gemm_writes_out() ? args_.out[i] : partial_.data(r);
  p.m = args_.m;
  p.n = args_.n;
  p.k = args_.k;
  p.m_order = m_order_[i].get<uint32_t>();
  p.plan = plan_;
  p.k_slices = choice_.splits;
  if (!slice_sums_.empty()) {
    const DeviceBuffer& w = slice_sums_[i];
    p.slots = w.get<float>();
    p.flags = reinterpret_cast<uint64_t*>(static_cast<char*>(w.get()) +
                                          detail::slice_sum_workspace(plan_, choice_.splits).slot_bytes);
  }
  p.sig = slice_.device_view(r, std::string("sm90_gemm_ar_") + kernel.name);
  p.device = world_->device(r);
  p.sm_count = gemm_sms_;
  kernels_[i] = kernel.make(p);
  if (trace_ != nullptr) kernels_[i]->set_trace(trace_->view(r));
}

void GemmAr::set_trace(const TraceBuffer* trace) {
  trace_ = trace;
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
}

void GemmAr::set_operands(int rank, const void* a, const void* b, void* out, const void* residual,
                          void* residual_out, const void* norm_weight) {
  world_->check_local_rank(rank, "GemmAr::set_operands");
  auto aligned = [](const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  TL_REQUIRE(aligned(a), "GemmAr::set_operands", "a", a, "a 16-byte aligned M x K bf16 input");
  TL_REQUIRE(aligned(b), "GemmAr::set_operands", "b", b, "a 16-byte aligned N x K bf16 weight");
  TL_REQUIRE(aligned(out), "GemmAr::set_operands", "out", out,
             plan_.scatter ? "a 16-byte aligned bf16 output of the rank's rows x N" : "a 16-byte aligned M x N bf16 output");
  if (plan_.norm) {
    TL_REQUIRE(aligned(residual), "GemmAr::set_operands", "residual", residual, "a 16-byte aligned M x N bf16 residual");
    TL_REQUIRE(aligned(residual_out) && residual_out != out, "GemmAr::set_operands", "residual_out", residual_out,
               "a 16-byte aligned M x N bf16 buffer other than out");
    TL_REQUIRE(aligned(norm_weight), "GemmAr::set_operands", "norm_weight", norm_weight,
               "a 16-byte aligned N bf16 weight");
  }
  const size_t r = static_cast<size_t>(rank);
  const bool gemm_changed = args_.a[r] != a || args_.b[r] != b || (gemm_writes_out() && args_.out[r] != out);
  detail::repoint(
      args_,
      [&](GemmArArguments& x) {
        x.a[r] = a;
        x.b[r] = b;
        x.out[r] = out;
        if (plan_.norm) {
          x.residual[r] = residual;
          x.residual_out[r] = residual_out;
          x.norm_weight[r] = norm_weight;
        }
      },
      [&] {
        if (gemm_changed) make_kernel(rank);
      });
}

void GemmAr::launch_reduce(int r, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks, GemmArPass pass,
                           bool early) {
  const size_t i = static_cast<size_t>(r);
  const SignalSlice& slice = plan.in_place ? chain_slice_ : slice_;
  detail::GemmArReduceArgs a;
  a.queue = queues_[i].get<uint32_t>() + (plan.in_place ? 1 : 0);
  a.partial = partial_.data(r);
  a.recv = plan.copy_engine && plan.world > 1 ? recv_.data(r) : nullptr;
  a.pass = pass;
  a.reduced = plan.method == ArMethod::kTwoShot ? reduced_.data(r) : nullptr;
  a.out = args_.out[i];
  if (plan.norm) {
    a.residual = args_.residual[i];
    a.residual_out = args_.residual_out[i];
    a.norm_weight = args_.norm_weight[i];
    a.eps = args_.eps;
  }
  world_->set_device(r);
  detail::launch_gemm_ar_reduce(plan, slice.device_view(r, "gemm_ar_reduce"), heap_->device_view(r), a, blocks, stream,
                                early ? detail::LaunchOrder::kEarly : detail::LaunchOrder::kAfterPrevious,
                                trace_ != nullptr ? trace_->view(r) : TraceView{});
}

void GemmAr::enqueue_copy_engine(int r, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks) {
  const SignalSlice& slice = plan.in_place ? chain_slice_ : slice_;
  const SignalView sig = slice.host_view(r);
  const SymmetricView heap = heap_->host_view(r);
  StreamCtx h{r, world_->size(), stream, world_->transport()};
  world_->set_device(r);
  gemm_ar_copy_engine_push(h, plan, sig, heap, partial_.data(r), plan.world > 1 ? recv_.data(r) : nullptr, 2);
  if (plan.method == ArMethod::kOneShot || plan.world == 1) {
    launch_reduce(r, stream, plan, blocks);
  } else {
    launch_reduce(r, stream, plan, blocks, GemmArPass::kReduce);
    gemm_ar_copy_engine_gather(h, plan, sig, heap, reduced_.data(r), 2);
    launch_reduce(r, stream, plan, blocks, GemmArPass::kFinish);
  }
  if (plan.world > 1) rank_exit_barrier_stream(h, sig, plan.exit_channel());
}

void GemmAr::enqueue_all_reduce(int r, cudaStream_t stream, const GemmArPlan& plan, uint32_t blocks,
                                bool early) {
  if (plan.copy_engine) {
    enqueue_copy_engine(r, stream, plan, blocks);
  } else {
    launch_reduce(r, stream, plan, blocks, GemmArPass::kAll, early);
  }
}

uint64_t GemmAr::run() {
  const World& world = *world_;
  const bool fused = choice_.schedule == GemmArSchedule::kFused;
  const uint64_t epoch = (fused ? slice_ : chain_slice_).begin_call();
  for (int r : world.local_ranks()) {
    auto& kernel = *kernels_[static_cast<size_t>(r)];
    world.set_device(r);
    if (gemm_writes_out()) {
      kernel.run(epoch, world.compute_stream(r), false);
    } else if (fused) {
      // The reduction reads peers' partials until its exit barrier; the previous call's reduction
      // (and so every peer's reading of this rank's partial) completes before this GEMM writes.
      // On the copy-engine path the comm stream's pushes wait for the GEMM's notifies instead.
      world.comm_after_compute(r);
      kernel.run(epoch, world.compute_stream(r), true);
      enqueue_all_reduce(r, world.comm_stream(r), plan_, reduce_blocks_);
      world.compute_after_comm(r);
    } else {
      // The reduction's CTAs are placed while the GEMM's last tiles finish, and wait for it there.
      kernel.run(epoch, world.compute_stream(r), false);
      enqueue_all_reduce(r, world.compute_stream(r), chain_plan_, chain_blocks_, true);
    }
  }
  return epoch;
}

void GemmAr::run_gemm_only() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    kernels_[static_cast<size_t>(r)]->run(slice_.epoch(), world_->compute_stream(r), false);
  }
}

uint64_t GemmAr::run_all_reduce_only() {
  const uint64_t epoch = chain_slice_.begin_call();
  for (int r : world_->local_ranks()) enqueue_all_reduce(r, world_->compute_stream(r), chain_plan_, chain_blocks_);
  return epoch;
}

}  // namespace tilelink
