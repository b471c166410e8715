// Host side of MoE part 2: validation, the plan, the per-rank grouped GEMM, combine and
// reduction, and the order of their launches.
#include "tilelink/ops/moe/moe_gemm_rs.hpp"

#include <algorithm>
#include <string>

#include "runtime/checks.hpp"
#include "ops/common/kernel_configs.hpp"
#include "tilelink/comm/stream_ctx.hpp"
#include "ops/common/repoint.hpp"
#include "ops/moe/moe_combine.hpp"
#include "ops/moe/sm90_moe_gemm_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"

namespace tilelink {

namespace {

const detail::Sm90MoeGemmConfigInfo* find_kernel(const std::string& name) {
  return detail::find_config(detail::sm90_moe_gemm_configs(), name);
}

uint32_t comm_rows_of(const MoeGemmRsArguments& a) { return moe_policy::combine_rows(a.config.comm_rows, a.topk); }

uint32_t round_to(uint32_t v, uint32_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// Under the put-with-signal transport, with peers, no kernel stores into a peer: the combine blocks
// stage the peers' rows and the stream puts them (MoeRsPlan::staged).
bool staged(const World& world) { return world.transport() == Transport::kPutSignal && world.size() > 1; }

// Who combines: the configured or automatic choice, combine blocks where staged.
MoeCombine combine_of(const World& world, const MoeGemmRsArguments& a) {
  return moe_policy::combine(a.config.combine, world.size(), staged(world), a.config.method);
}

bool in_epilogue(const World& world, const MoeGemmRsArguments& a) {
  return combine_of(world, a) == MoeCombine::kEpilogue;
}

// Blocks: the combine CTAs beside the GEMM. Epilogue: none beside it (the reduction's CTAs follow
// the GEMM: reduce_block_count).
uint32_t combine_block_count(const World& world, const MoeGemmRsArguments& a, uint32_t cluster) {
  if (in_epilogue(world, a)) return 0;
  if (a.config.combine_blocks != 0) return round_to(a.config.combine_blocks, cluster);
  return moe_policy::combine_blocks(world.tightest_budget(), a.topk, a.k, world.size(), cluster);
}

// Epilogue: the CTAs of the owners' sums after the GEMM (configured, else a CTA per SM of the budget).
uint32_t reduce_block_count(const World& world, int rank, const MoeGemmRsArguments& a) {
  return a.config.combine_blocks != 0 ? a.config.combine_blocks
                                      : static_cast<uint32_t>(std::max(world.sm_budget(rank), 1));
}

int gemm_sm_count(const World& world, int rank, const MoeGemmRsArguments& a, uint32_t side_blocks) {
  const int left = world.sm_budget(rank) - static_cast<int>(side_blocks);
  return a.config.gemm_sms != 0 ? std::min(left, static_cast<int>(a.config.gemm_sms)) : left;
}

uint32_t max_tiles(const World& world, const MoeGemmRsArguments& a, uint32_t bm) {
  return moe_max_tiles(uint64_t(a.tokens_per_rank) * world.size() * a.topk, a.experts, bm);
}

MoeRsPlan make_plan(const World& world, const MoeGemmRsArguments& a, const detail::Sm90MoeGemmConfigInfo& kernel) {
  MoeRsPlan plan;
  plan.tokens = RowShardMapping{a.tokens_per_rank, comm_rows_of(a), static_cast<uint32_t>(world.size())};
  plan.n = a.n;
  plan.bn = kernel.tile_n;
  plan.max_tiles = max_tiles(world, a, kernel.tile_m);
  plan.recv_columns = in_epilogue(world, a) ? plan.n_tiles() : 1;
  plan.staged = staged(world);
  return plan;
}

std::string check_mapping(const World& world, const MoeGemmRsArguments& a, uint32_t bm) {
  if (a.mapping.size() != static_cast<size_t>(world.size())) {
    return "argument 'mapping': " + std::to_string(a.mapping.size()) + " entries, expected one per rank (" +
           std::to_string(world.size()) + ")";
  }
  const uint32_t tokens = a.tokens_per_rank * static_cast<uint32_t>(world.size());
  for (int l : world.local_ranks()) {  // a process world reads only its own rank's entry
    const size_t r = static_cast<size_t>(l);
    const MoeMappingBuffers* m = a.mapping[r];
    const std::string which = "argument 'mapping[" + std::to_string(r) + "]'";
    if (m == nullptr) return which + " is null";
    if (m->tokens() != tokens || m->topk() != a.topk || m->experts() != a.experts) {
      return which + ": built for (tokens, topk, experts) = (" + std::to_string(m->tokens()) + ", " +
             std::to_string(m->topk()) + ", " + std::to_string(m->experts()) + "), expected (" +
             std::to_string(tokens) + ", " + std::to_string(a.topk) + ", " + std::to_string(a.experts) + ")";
    }
    if (m->bm() != bm) {
      return which + ": tiles of " + std::to_string(m->bm()) + " rows, expected the kernel's " + std::to_string(bm) +
             " (MoeGemmRs::tile_m_of)";
    }
  }
  return "";
}

}  // namespace

std::string describe_moe_rs_channel(const MoeRsPlan& plan, uint32_t ch) {
  const uint32_t world = plan.world();
  auto block = [&](uint32_t g) {
    const RowRange rows = plan.tokens.rows_of_channel(g);
    return "token block " + std::to_string(g) + " (tokens [" + std::to_string(rows.row0) + ", " +
           std::to_string(rows.row0 + rows.rows) + "), owner rank " + std::to_string(plan.tokens.rank_of_channel(g)) +
           ")";
  };
  if (ch < plan.tile_channel(0, 0)) {
    return ch < world ? "the exit barrier: rank " + std::to_string(ch) +
                            "'s arrival (that rank had not finished with this rank's slots)"
                      : "the exit barrier: this rank's own combine blocks to finish";
  }
  if (ch < plan.recv_channel(0, 0)) {
    const uint32_t i = ch - plan.tile_channel(0, 0);
    return "the grouped GEMM's tile row " + std::to_string(i / plan.n_tiles()) + ", column tile " +
           std::to_string(i % plan.n_tiles()) + " (its combine waits for it)";
  }
  if (ch < plan.recv_channel(world, 0)) {
    const uint32_t i = (ch - plan.recv_channel(0, 0)) / plan.recv_columns;
    const uint32_t c = (ch - plan.recv_channel(0, 0)) % plan.recv_columns;
    const uint32_t sender = i / plan.tokens.chunks_per_rank(), b = i % plan.tokens.chunks_per_rank();
    return "rank " + std::to_string(sender) + "'s combined rows of this rank's token block " + std::to_string(b) +
           (plan.recv_columns > 1 ? ", column tile " + std::to_string(c) : std::string()) +
           (plan.staged ? " (put by that rank's stream)" : " (stored by that rank's combine)");
  }
  return "this rank's combine of " + block(ch - plan.combined_channel(0)) +
         " into its staging, before its stream puts it to the owner";
}

uint32_t MoeGemmRs::tile_m_of(const std::string& kernel) {
  return detail::moe_gemm_tile_m(kernel, "MoeGemmRs::tile_m_of");
}

std::string MoeGemmRs::can_implement(const World& world, const SymmetricHeap& heap, const MoeGemmRsArguments& a) {
  if (std::string e = can_implement_shape(world, heap, a); !e.empty()) return e;
  if (std::string e = check_mapping(world, a, tile_m_of(a.config.kernel)); !e.empty()) return e;
  return check_rank_pointers(world, a.h, "h");
}

std::string MoeGemmRs::can_implement_shape(const World& world, const SymmetricHeap& heap,
                                           const MoeGemmRsArguments& a) {
  if (std::string e = moe_policy::check_shape(a.tokens_per_rank, world.size(), a.experts, a.topk); !e.empty()) {
    return e;
  }
  if (staged(world) && a.config.combine == MoeCombine::kEpilogue) {
    return "argument 'config.combine' = epilogue: the epilogue combine stores into peers from the GEMM, and the "
           "world's transport is put_signal; expected blocks or auto (the combine blocks' rows are put by the stream)";
  }
  if (std::string e = moe_policy::check_method(a.config.method, "config.method"); !e.empty()) return e;
  if (a.config.combine != MoeCombine::kBlocks && a.config.combine != MoeCombine::kEpilogue &&
      a.config.combine != MoeCombine::kAuto) {
    return "argument 'config.combine' = " + std::to_string(static_cast<uint32_t>(a.config.combine)) +
           ": expected blocks, epilogue or auto";
  }
  if (in_epilogue(world, a) && a.config.method == OpMethod::kNonOverlapped) {
    return "argument 'config.method' = non_overlapped: expected fused or auto with config.combine = epilogue (the "
           "epilogue combine runs inside the fused GEMM), or config.combine = blocks";
  }
  // Refused alike in every process: the tightest rank's budget (World::tightest_rank).
  const int tight = world.tightest_rank(), budget = world.sm_budget(tight);
  if (in_epilogue(world, a) && a.config.combine_blocks > static_cast<uint32_t>(budget)) {
    // Its CTAs wait for the peers' GEMMs: more than the rank's share could hold SMs those need.
    return "argument 'config.combine_blocks' = " + std::to_string(a.config.combine_blocks) +
           ": with config.combine = epilogue these are the reduction's CTAs after the GEMM; expected at most the "
           "smallest rank's SM budget (" + std::to_string(budget) + ")";
  }
  const uint32_t comm_rows = comm_rows_of(a);
  if (!in_epilogue(world, a) && uint64_t(comm_rows) * a.topk > detail::kMoeCombineMaxPairs) {  // the blocks' staging
    return "argument 'config.comm_rows' = " + std::to_string(comm_rows) + ": expected comm_rows * topk (" +
           std::to_string(a.topk) + ") at most " + std::to_string(detail::kMoeCombineMaxPairs);
  }
  const uint64_t tokens = uint64_t(a.tokens_per_rank) * world.size();
  const detail::Sm90MoeGemmConfigInfo* kernel = find_kernel(a.config.kernel);
  if (kernel == nullptr) return detail::unknown_config(detail::sm90_moe_gemm_configs(), a.config.kernel);
  if (std::string e = check_rank_pointers(world, a.w, "w"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.weights, "weights"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  const uint32_t cluster = kernel->cluster_m * kernel->cluster_n;
  const uint32_t side = combine_block_count(world, a, cluster);
  detail::Sm90MoeGemmProblem p;
  p.max_tiles = max_tiles(world, a, kernel->tile_m);
  p.n = a.n;
  p.k = a.k;
  p.experts = a.experts;
  p.sm_count = gemm_sm_count(world, tight, a, side);
  p.swizzle = static_cast<int>(moe_policy::part2_swizzle(a.config.swizzle, combine_of(world, a)));
  if (p.sm_count < static_cast<int>(cluster)) {
    return "argument 'config.combine_blocks' = " + std::to_string(a.config.combine_blocks) + ": the combine " +
           "takes " + std::to_string(side) + " of the rank's " + std::to_string(budget) +
           " SMs, leaving " + std::to_string(std::max(p.sm_count, 0)) + "; expected at least one " +
           std::to_string(cluster) + "-CTA cluster for the grouped GEMM";
  }
  if (std::string e = kernel->can_implement(p); !e.empty()) return e;
  if (world.size() == 1) return "";  // the combine writes `out` itself: no slots
  return check_symmetric(world, heap, a.recv, 0, tokens * a.n * 2, "recv");
}

MoeGemmRs::MoeGemmRs(const World& world, SymmetricHeap& heap, SignalSet& signals, const MoeGemmRsArguments& args,
                     const std::string& name)
    : world_(&world), heap_(&heap), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("MoeGemmRs '" + name + "': " + why);
  }
  const detail::Sm90MoeGemmConfigInfo& kernel = *find_kernel(args.config.kernel);
  kernel_name_ = kernel.name;
  plan_ = make_plan(world, args, kernel);
  cluster_ = kernel.cluster_m * kernel.cluster_n;
  combine_ = combine_of(world, args);
  combine_blocks_ = combine_ == MoeCombine::kEpilogue ? reduce_block_count(world, world.local_ranks().front(), args)
                                                      : combine_block_count(world, args, cluster_);
  sweeps_ = args.config.weight_sweeps == MoeGemmRsConfig::kTokenOrder ? 0u
            : args.config.weight_sweeps != 0                           ? args.config.weight_sweeps
                                                                       : moe_policy::weight_sweeps(args.n, args.k);
  // Auto (no tune cache entry chose): moe_policy::method (no estimate: see MoeGemmRsConfig).
  method_ = moe_policy::method(args.config.method, world.size(), combine_ == MoeCombine::kEpilogue);
  slice_ = signals.allocate(plan_.num_channels(), name);
  slice_.set_describer([plan = plan_](uint32_t ch, int, int) { return describe_moe_rs_channel(plan, ch); });
  if (plan_.staged) send_ = heap.allocate(uint64_t(args.tokens_per_rank) * world.size() * args.n * 2);
  if (args.combine_streams != nullptr) {
    combine_streams_ = args.combine_streams;
  } else if (combine_ == MoeCombine::kEpilogue) {
    combine_streams_ = nullptr;  // nothing runs beside the GEMM
  } else {
    // A stream of its own, or the comm stream where another would not get a hardware queue (the
    // combine then shares it with nothing that waits: part 2 has no all-gather).
    own_streams_ = world.check_extra_streams(1, "the MoE combine stage").empty() ? SideStreams(world, false)
                                                                                 : SideStreams::on_comm_streams(world);
    combine_streams_ = &own_streams_;
  }
  // One entry per rank; those of other processes' ranks stay empty.
  const size_t ranks = static_cast<size_t>(world.size());
  y_.resize(ranks);
  order_.resize(ranks);
  arrived_.resize(ranks);
  expected_.resize(ranks);
  lists_.resize(ranks);
  kernels_.resize(ranks);
  plain_kernels_.resize(ranks);
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const MoeMappingBuffers& mapping = *args.mapping[i];
    y_[i] = DeviceBuffer(size_t(mapping.max_rows()) * args.n * 2, world.device(r));
    order_[i] = DeviceBuffer(size_t(mapping.max_tiles()) * sizeof(uint32_t), world.device(r));
    if (combine_ == MoeCombine::kEpilogue) {
      const size_t blocks = plan_.tokens.num_channels();
      arrived_[i] = DeviceBuffer(blocks * plan_.n_tiles() * sizeof(uint32_t), world.device(r));
      expected_[i] = DeviceBuffer((blocks + 1) * sizeof(uint32_t), world.device(r));  // + the counts' scratch
      lists_[i] = DeviceBuffer(size_t(std::max(world.sm_budget(r), 1)) * 33 * sizeof(uint32_t), world.device(r));
    }
    make_kernels(r);
    detail::preload_moe_combine();
    MoeMappingBuffers::preload();  // build_combine_order's kernel, where part 1 did not load it
  }
}

void MoeGemmRs::make_kernels(int r) {
  const size_t i = static_cast<size_t>(r);
  const detail::Sm90MoeGemmConfigInfo& kernel = *find_kernel(kernel_name_);
  const MoeMappingBuffers& mapping = *args_.mapping[i];
  detail::Sm90MoeGemmProblem p;
  p.a = args_.h[i];
  p.b = args_.w[i];
  p.d = y_[i].get();
  p.max_tiles = plan_.max_tiles;
  p.n = args_.n;
  p.k = args_.k;
  p.experts = args_.experts;
  p.order = order_[i].get<uint32_t>();
  p.num_tiles = mapping.num_tiles_device();
  p.tile_expert = mapping.view(plan_.max_tiles).tile_expert;
  p.wait = false;
  p.notify_sig = slice_.device_view(r, "sm90_moe_gemm_" + kernel_name_);
  p.notify_channel0 = plan_.tile_channel(0, 0);
  p.notify = true;
  p.device = world_->device(r);
  // Non-overlapped, or the combine in the epilogue: nothing runs beside the GEMM.
  const bool alone = method_ == OpMethod::kNonOverlapped || combine_ == MoeCombine::kEpilogue;
  p.sm_count = gemm_sm_count(*world_, r, args_, alone ? 0u : combine_blocks_);
  p.swizzle = static_cast<int>(moe_policy::part2_swizzle(args_.config.swizzle, combine_));
  if (combine_ == MoeCombine::kEpilogue) {
    detail::Sm90MoeEpilogueCombine& cb = p.combine;
    cb.on = true;
    cb.plan = plan_;
    cb.m = mapping.view(plan_.max_tiles);
    cb.weights = args_.weights[i];
    cb.heap = heap_->device_view(r);
    cb.recv = world_->size() > 1 ? args_.recv->data(r) : nullptr;
    cb.out = args_.out[i];
    cb.arrived = arrived_[i].get<uint32_t>();
    cb.expected = expected_[i].get<uint32_t>();
    cb.lists = lists_[i].get<uint32_t>();
  }
  auto fused = kernel.make(p);
  p.notify = false;
  p.combine.on = false;
  auto plain = kernel.make(p);
  if (trace_ != nullptr) fused->set_trace(trace_->view(r));
  kernels_[i] = std::move(fused);
  plain_kernels_[i] = std::move(plain);
}

void MoeGemmRs::set_operands(int rank, const void* h, const void* w, const float* weights, void* out) {
  world_->check_local_rank(rank, "MoeGemmRs::set_operands");
  constexpr const char* where = "MoeGemmRs::set_operands";
  require_aligned(where, "h", h, "16-byte aligned activation rows (mapping max_rows() x k bf16) on the rank's device");
  require_aligned(where, "w", w, "a 16-byte aligned experts x n x k bf16 weight on the rank's device");
  require_aligned(where, "weights", weights, "16-byte aligned routing weights (tokens x topk fp32) on the rank's device");
  require_aligned(where, "out", out, "a 16-byte aligned tokens_per_rank x n bf16 output on the rank's device");
  const size_t r = static_cast<size_t>(rank);
  const bool gemm_changed = args_.h[r] != h || args_.w[r] != w;  // the combine reads weights and out at launch
  detail::repoint(
      args_,
      [&](MoeGemmRsArguments& a) {
        a.h[r] = h;
        a.w[r] = w;
        a.weights[r] = weights;
        a.out[r] = out;
      },
      [&] {
        if (gemm_changed) make_kernels(rank);  // both kernels or neither
      });
}

MoeGemmRs::~MoeGemmRs() = default;

int MoeGemmRs::gemm_ctas(int rank) const {
  world_->check_local_rank(rank, "MoeGemmRs::gemm_ctas");
  return kernels_[static_cast<size_t>(rank)]->ctas();
}

uint64_t MoeGemmRs::run() {
  const World& world = *world_;
  const uint64_t epoch = slice_.begin_call();
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const cudaStream_t compute = world.compute_stream(r);
    const MoeMappingBuffers& mapping = *args_.mapping[i];
    mapping.build_combine_order(plan_, static_cast<uint32_t>(r), order_[i].get<uint32_t>(), compute, sweeps_);
    if (method_ == OpMethod::kNonOverlapped) {
      // The GEMM on the whole budget, then the combine and reduction with a CTA per SM of it, after
      // the GEMM on the compute stream (so after the previous call's combine and exit barrier).
      // Staged, the combine goes beside the puts that its reductions wait for: on its own stream.
      kernels_[i]->run(epoch, compute);
      const uint32_t blocks =
          std::max(cluster_, static_cast<uint32_t>(world.sm_budget(r)) / cluster_ * cluster_);
      if (plan_.staged) combine_streams_->fork_from(r, compute);
      launch_combine(r, blocks, plan_.staged ? combine_streams_->stream(r) : compute);
      if (plan_.staged) staged_put_and_exit(r, compute);
      continue;
    }
    // The combine overwrites peers' slots and `out`: after the previous call's combine and exit
    // barrier, and after the caller's earlier work on the compute stream (which reads `out`).
    if (combine_ == MoeCombine::kEpilogue) {
      // The counts (after the previous call's reduction and exit barrier, on this stream), the GEMM
      // that combines as its tiles complete, then the owner's sums over the senders' slots.
      detail::launch_moe_epilogue_counts(plan_, mapping.view(plan_.max_tiles), mapping.num_tiles_device(),
                                         expected_[i].get<uint32_t>(), arrived_[i].get<uint32_t>(), compute);
      kernels_[i]->set_combine_operands(args_.weights[i], args_.out[i]);
      kernels_[i]->run(epoch, compute);
      if (world.size() > 1) {
        detail::launch_moe_reduce(plan_, slice_.device_view(r, "moe_reduce"), args_.recv->data(r), args_.out[i],
                                  reduce_block_count(world, r, args_), compute,
                                  trace_ != nullptr ? trace_->view(r) : TraceView{});
      }
      continue;
    }
    combine_streams_->fork_from(r, compute);
    kernels_[i]->run(epoch, compute);
    launch_combine(r, combine_blocks_, combine_streams_->stream(r));
    if (plan_.staged) {
      staged_put_and_exit(r, compute);  // after the GEMM, beside the combine kernel
    } else {
      combine_streams_->join_into(r, compute);
    }
  }
  return epoch;
}

void MoeGemmRs::launch_combine(int r, uint32_t blocks, cudaStream_t stream) {
  const size_t i = static_cast<size_t>(r);
  detail::launch_moe_combine(plan_, args_.mapping[i]->view(plan_.max_tiles), slice_.device_view(r, "moe_combine"),
                             heap_->device_view(r), y_[i].get(), args_.weights[i],
                             world_->size() > 1 ? args_.recv->data(r) : nullptr,
                             plan_.staged ? send_.data(r) : nullptr, args_.out[i], blocks, cluster_, stream,
                             trace_ != nullptr ? trace_->view(r) : TraceView{});
}

void MoeGemmRs::staged_put_and_exit(int r, cudaStream_t compute) {
  // The combine kernel (on the combine stream) stages the peers' blocks; this stream puts them as
  // they are done, then waits for the kernel, whose reductions read the slots until it ends; then
  // the exit barrier: no rank puts the next call's rows into a slot still being summed.
  const SignalView sig = slice_.host_view(r);
  StreamCtx h{r, world_->size(), compute, world_->transport()};
  moe_staged_put(h, plan_, sig, heap_->host_view(r), send_.data(r), args_.recv->data(r), 2);
  combine_streams_->join_into(r, compute);
  rank_exit_barrier_stream(h, sig, plan_.exit_channel());
}

void MoeGemmRs::set_trace(const TraceBuffer* trace) {
  trace_ = trace;
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
}

void MoeGemmRs::run_gemm_only() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    plain_kernels_[static_cast<size_t>(r)]->run(slice_.epoch(), world_->compute_stream(r));
  }
}

}  // namespace tilelink
