// Host side of MoE part 1: validation, the all-gather, the per-rank mapping, gather and grouped
// GEMM, and the order of their launches.
#include "tilelink/ops/moe/moe_ag_gemm.hpp"

#include <algorithm>
#include <string>

#include "runtime/checks.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "ops/common/kernel_configs.hpp"
#include "ops/common/repoint.hpp"
#include "ops/moe/moe_gather.hpp"
#include "ops/moe/sm90_moe_gemm_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/runtime/work_counters.hpp"

namespace tilelink {

namespace {

using all_gather_policy::kElementBytes;

const detail::Sm90MoeGemmConfigInfo* find_kernel(const std::string& name) {
  return detail::find_config(detail::sm90_moe_gemm_configs(), name);
}

uint32_t max_tiles(const World& world, const MoeAgGroupGemmArguments& a, uint32_t bm) {
  return moe_max_tiles(uint64_t(a.tokens_per_rank) * world.size() * a.topk, a.experts, bm);
}

// x_source beyond one rank: the all-gather copies each rank's shard into its own rows
// (AllGatherArguments::own_rows); at world 1 the gather reads it where it is (gather_source).
bool copies_source(const World& world, const MoeAgGroupGemmArguments& a) {
  return !a.x_source.empty() && world.size() > 1;
}

AllGatherArguments all_gather_arguments(const World& world, const MoeAgGroupGemmArguments& a) {
  AllGatherArguments ag =
      all_gather_policy::all_gather_arguments(world, a.x, a.x_offset, a.tokens_per_rank, a.hidden, a.config.comm);
  if (copies_source(world, a)) ag.own_rows = a.x_source;
  return ag;
}

uint32_t gather_block_count(const World& world, const MoeAgGroupGemmArguments& a) {
  if (a.config.gather_blocks != 0) return a.config.gather_blocks;
  return moe_policy::gather_blocks(world.tightest_budget(), a.n);
}

int gemm_sm_count(const World& world, int rank, const MoeAgGroupGemmArguments& a, uint32_t comm_blocks) {
  return all_gather_policy::gemm_sm_count(world.sm_budget(rank) - static_cast<int>(gather_block_count(world, a)),
                                          world.size(), comm_blocks, a.config.gemm_sms);
}


}  // namespace

std::vector<std::string> MoeAgGroupGemm::kernel_names() {
  return detail::config_names(detail::sm90_moe_gemm_configs());
}

uint32_t MoeAgGroupGemm::tile_m_of(const std::string& kernel) {
  return detail::moe_gemm_tile_m(kernel, "MoeAgGroupGemm::tile_m_of");
}

uint64_t MoeAgGroupGemm::out_rows(const World& world, const MoeAgGroupGemmArguments& args) {
  const detail::Sm90MoeGemmConfigInfo* kernel = find_kernel(args.config.kernel);
  if (kernel == nullptr) throw InvalidArgument("MoeAgGroupGemm::out_rows: unknown kernel '" + args.config.kernel + "'");
  return uint64_t(max_tiles(world, args, kernel->tile_m)) * kernel->tile_m;
}

std::string MoeAgGroupGemm::can_implement(const World& world, const SymmetricHeap& heap,
                                          const MoeAgGroupGemmArguments& a) {
  if (std::string e = moe_policy::check_shape(a.tokens_per_rank, world.size(), a.experts, a.topk); !e.empty()) {
    return e;
  }
  if (std::string e = moe_policy::check_method(a.config.method, "config.method"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.ids, "ids"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.w, "w"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  if (!a.x_source.empty()) {
    if (std::string e = check_rank_pointers(world, a.x_source, "x_source"); !e.empty()) {
      return e + " (each rank's " + std::to_string(a.tokens_per_rank) + " x " + std::to_string(a.hidden) +
             " bf16 token shard)";
    }
  }
  const detail::Sm90MoeGemmConfigInfo* kernel = find_kernel(a.config.kernel);
  if (kernel == nullptr) return detail::unknown_config(detail::sm90_moe_gemm_configs(), a.config.kernel);
  const uint64_t tokens = uint64_t(a.tokens_per_rank) * world.size();
  detail::Sm90MoeGemmProblem p;
  p.max_tiles = max_tiles(world, a, kernel->tile_m);
  p.n = a.n;
  p.k = a.hidden;
  p.experts = a.experts;
  p.sm_count = static_cast<int>(kernel->cluster_m * kernel->cluster_n);
  p.swizzle = static_cast<int>(a.config.swizzle);
  if (std::string e = kernel->can_implement(p); !e.empty()) return e;
  if (std::string e = check_symmetric(world, heap, a.x, a.x_offset, tokens * a.hidden * kElementBytes, "x");
      !e.empty()) {
    return e;
  }
  const AllGatherArguments ag = all_gather_arguments(world, a);
  if (std::string e = AllGather::can_implement(world, heap, ag); !e.empty()) return e;
  const uint32_t comm_blocks = ag.config.resource == CommResource::kSm ? ag.config.num_blocks : 0;
  const uint32_t gather = gather_block_count(world, a);
  const int cluster = p.sm_count;
  // The knob that set the grouped GEMM's share: its own count, else the gather's or the SM
  // all-gather's blocks.
  const std::string knob =
      a.config.gemm_sms != 0        ? "argument 'config.gemm_sms' = " + std::to_string(a.config.gemm_sms)
      : a.config.gather_blocks != 0 ? "argument 'config.gather_blocks' = " + std::to_string(a.config.gather_blocks)
                                    : "argument 'config.comm.num_blocks' = " + std::to_string(comm_blocks);
  int waiting = 0;  // the grouped GEMM's and the gather's CTAs wait for the all-gather
  for (int r = 0; r < world.size(); ++r) {
    const int sms = gemm_sm_count(world, r, a, comm_blocks);
    if (sms < cluster) {
      return knob + ": rank " + std::to_string(r) + " has " + std::to_string(world.sm_budget(r)) + " SMs, " +
             std::to_string(comm_blocks) + " taken by the all-gather and " + std::to_string(gather) +
             " by the gather, leaving " + std::to_string(std::max(sms, 0)) + "; expected at least one " +
             std::to_string(cluster) + "-CTA cluster for the grouped GEMM";
    }
    waiting += sms + static_cast<int>(gather);
    if (std::string e = all_gather_policy::check_own_rows_room(world, ag.config, !ag.own_rows.empty(), r,
                                                               sms + static_cast<int>(gather));
        !e.empty()) {
      return knob + ": " + e;
    }
  }
  if (std::string e = all_gather_policy::check_copy_engine_room(world, ag.config, waiting); !e.empty()) {
    return knob + ": " + e;
  }
  return "";
}

MoeAgGroupGemm::MoeAgGroupGemm(const World& world, SymmetricHeap& heap, SignalSet& signals,
                               const MoeAgGroupGemmArguments& args, const std::string& name)
    : world_(&world), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("MoeAgGroupGemm '" + name + "': " + why);
  }
  const detail::Sm90MoeGemmConfigInfo& kernel = *find_kernel(args.config.kernel);
  kernel_name_ = kernel.name;
  tile_m_ = kernel.tile_m;
  gather_blocks_ = gather_block_count(world, args);
  // Auto (no tune cache entry chose): moe_policy::method -- the routing that sets the work is
  // known only at run time, so there is no estimate to choose by.
  method_ = moe_policy::method(args.config.method, world.size());
  const uint32_t tiles = max_tiles(world, args, tile_m_);
  const uint32_t tokens = args.tokens_per_rank * static_cast<uint32_t>(world.size());
  ag_ = std::make_unique<AllGather>(world, heap, signals, all_gather_arguments(world, args), name);
  gather_slice_ = signals.allocate(tiles, name + " gather");
  // The gather stage on a stream of its own. Where that would not get a hardware queue of its own
  // (a process under MPS with few queues), the gather runs on the compute stream before the GEMM
  // (run() says why), and part 2's combine (MoeLayer) on the comm streams.
  gather_streams_ = world.check_extra_streams(1, "the MoE gather stage").empty() ? SideStreams(world, false)
                                                                                : SideStreams::on_comm_streams(world);

  // One entry per rank; those of other processes' ranks stay empty.
  const size_t ranks = static_cast<size_t>(world.size());
  mappings_.resize(ranks);
  order_.resize(ranks);
  gather_queues_ = zeroed_work_counters(world);
  sorted_.resize(ranks);
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    mappings_[i] = std::make_unique<MoeMappingBuffers>(tokens, args.topk, args.experts, tile_m_, world.device(r));
    order_[i] = DeviceBuffer(size_t(tiles) * sizeof(uint32_t), world.device(r));
    sorted_[i] = DeviceBuffer(size_t(tiles) * tile_m_ * args.hidden * kElementBytes, world.device(r));
    make_kernels(r);
    detail::preload_moe_gather();
    MoeMappingBuffers::preload();
  }
}

void MoeAgGroupGemm::make_kernels(int r) {
  const size_t i = static_cast<size_t>(r);
  const detail::Sm90MoeGemmConfigInfo& kernel = *find_kernel(kernel_name_);
  const uint32_t tiles = mappings_[i]->max_tiles();
  const uint32_t comm_blocks = args_.config.comm.resource == CommResource::kSm ? ag_->num_blocks() : 0;
  detail::Sm90MoeGemmProblem p;
  p.a = sorted_[i].get();
  p.b = args_.w[i];
  p.d = args_.out[i];
  p.max_tiles = tiles;
  p.n = args_.n;
  p.k = args_.hidden;
  p.experts = args_.experts;
  p.order = order_[i].get<uint32_t>();
  p.num_tiles = mappings_[i]->num_tiles_device();
  p.tile_expert = mappings_[i]->view(tiles).tile_expert;
  p.sig = gather_slice_.device_view(r, "sm90_moe_gemm_" + kernel_name_);
  p.channel0 = 0;
  p.device = world_->device(r);
  p.sm_count = gemm_sm_count(*world_, r, args_, comm_blocks);
  p.swizzle = static_cast<int>(args_.config.swizzle);
  std::unique_ptr<detail::Sm90MoeGemmKernel> whole;
  if (method_ == OpMethod::kNonOverlapped) {  // nothing runs beside it: the whole budget
    detail::Sm90MoeGemmProblem q = p;
    q.wait = false;
    q.sm_count = args_.config.gemm_sms != 0 ? std::min(world_->sm_budget(r), static_cast<int>(args_.config.gemm_sms))
                                            : world_->sm_budget(r);
    whole = kernel.make(q);
  }
  detail::make_fused_and_plain(kernel, p, kernels_, plain_kernels_, r);
  if (trace_ != nullptr) kernels_[i]->set_trace(trace_->view(r));
  whole_kernels_.resize(static_cast<size_t>(world_->size()));
  whole_kernels_[i] = std::move(whole);
}

void MoeAgGroupGemm::set_operands(int rank, const int32_t* ids, const void* w, void* out) {
  // Built with x_source, the overload below refuses the null shard by name (require_as_built).
  set_operands(rank, ids, w, out, nullptr);
}

void MoeAgGroupGemm::set_operands(int rank, const int32_t* ids, const void* w, void* out, const void* x_source) {
  world_->check_local_rank(rank, "MoeAgGroupGemm::set_operands");
  constexpr const char* where = "MoeAgGroupGemm::set_operands";
  detail::require_as_built(where, "x_source", !args_.x_source.empty(), x_source, "the rank's bf16 token shard");
  require_aligned(where, "ids", ids, "a 16-byte aligned tokens x topk int32 array on the rank's device");
  require_aligned(where, "w", w, "a 16-byte aligned experts x n x hidden bf16 weight on the rank's device");
  require_aligned(where, "out", out, "a 16-byte aligned out_rows x n bf16 output on the rank's device");
  const size_t r = static_cast<size_t>(rank);
  if (args_.w[r] != w || args_.out[r] != out) {
    detail::repoint(
        args_,
        [&](MoeAgGroupGemmArguments& a) {
          a.w[r] = w;
          a.out[r] = out;
        },
        [&] { make_kernels(rank); });  // every kernel of the rank or none
  }
  // Read at run time (no kernel holds them): the ids by the mapping, the shard by the gather (world
  // 1) or the all-gather.
  args_.ids[r] = ids;
  if (x_source != nullptr) {
    args_.x_source[r] = x_source;
    if (ag_->has_own_rows()) ag_->set_own_rows(rank, x_source);
  }
}

MoeAgGroupGemm::~MoeAgGroupGemm() = default;

const MoeMappingBuffers& MoeAgGroupGemm::mapping(int rank) const {
  world_->check_local_rank(rank, "MoeAgGroupGemm::mapping");
  return *mappings_[static_cast<size_t>(rank)];
}

int MoeAgGroupGemm::gemm_ctas(int rank) const {
  world_->check_local_rank(rank, "MoeAgGroupGemm::gemm_ctas");
  return kernels_[static_cast<size_t>(rank)]->ctas();
}

uint32_t MoeAgGroupGemm::band(int rank) const {
  world_->check_local_rank(rank, "MoeAgGroupGemm::band");
  return kernels_[static_cast<size_t>(rank)]->band();
}

uint64_t MoeAgGroupGemm::run() {
  if (method_ == OpMethod::kNonOverlapped) return run_non_overlapped();
  const World& world = *world_;
  ag_->begin_call();
  const uint64_t epoch = gather_slice_.begin_call();
  for (int r : world.local_ranks()) {
    world.set_device(r);
    // The all-gather overwrites rows the previous call's gather read (joined into the compute
    // stream at the end of that call). The SM all-gather's kernel goes before every rank's gather
    // and GEMM, which wait for it (AllGather::producer_first).
    ag_->enqueue_before_consumers(r);
  }
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const cudaStream_t compute = world.compute_stream(r);
    // The routing's mapping first: it waits for nothing, so it runs under the own rows' copies.
    build_mapping(r);
    ag_->wait_started(r, compute);  // the gather and the GEMM dispatched beside a running all-gather / after the own rows
    if (gather_streams_.shares_comm()) {
      // No stream of its own: the gather before the GEMM on the compute stream, spinning only on
      // the all-gather's channels (the comm stream's transfer fills them), and the GEMM
      // after it, its waits already met. The gather may not follow the transfer on the comm
      // stream with the GEMM already spinning on the gather's channels: it would then need SMs
      // beside a resident GEMM that waits for it, and under MPS a quarter of an H100 did not
      // give them (gpu_process_4 timed out every time; docs/PERF.md, 2026-12-05). The GEMM no
      // longer overlaps the gather; it still overlaps nothing else it did before.
      launch_gather(r, compute, gather_blocks_);
    } else {
      gather_streams_.fork_from(r, compute);
      launch_gather(r, gather_streams_.stream(r), gather_blocks_);
    }
    kernels_[i]->run(epoch, compute);
    ag_->enqueue_after_consumers(r);
  }
  ag_->enqueue_transfers_last();
  for (int r : world.local_ranks()) {
    if (!gather_streams_.shares_comm()) gather_streams_.join_into(r, world.compute_stream(r));
    world.compute_after_comm(r);
  }
  return epoch;
}

// Non-overlapped: the whole all-gather, then on the compute stream the mapping, the gather with a
// CTA per SM of the budget and the plain grouped GEMM (its waits already satisfied: none).
uint64_t MoeAgGroupGemm::run_non_overlapped() {
  const World& world = *world_;
  const uint64_t epoch = gather_slice_.begin_call();
  ag_->run();  // ordered after the previous call's gather and GEMM on each compute stream
  for (int r : world.local_ranks()) {
    world.set_device(r);
    world.compute_after_comm(r);
    build_mapping(r);
    launch_gather(r, world.compute_stream(r), static_cast<uint32_t>(world.sm_budget(r)));
    whole_kernels_[static_cast<size_t>(r)]->run(epoch, world.compute_stream(r));
  }
  return epoch;
}

void MoeAgGroupGemm::launch_gather(int r, cudaStream_t stream, uint32_t blocks) {
  const size_t i = static_cast<size_t>(r);
  MoeMappingBuffers& mapping = *mappings_[i];
  detail::launch_moe_gather(ag_->plan(), ag_->signals().device_view(r, "moe_gather"), mapping.view(mapping.max_tiles()),
                            mapping.num_tiles_device(), order_[i].get<uint32_t>(), gather_queues_[i].get<uint32_t>(),
                            gather_slice_.device_view(r, "moe_gather"), 0, gather_source(r), sorted_[i].get(),
                            args_.hidden * kElementBytes, blocks, stream,
                            trace_ != nullptr ? trace_->view(r) : TraceView{});
}

const void* MoeAgGroupGemm::gather_source(int r) const {
  // At world 1 every token is the rank's own: the gather reads x_source's rows in place.
  if (!args_.x_source.empty() && world_->size() == 1) return args_.x_source[static_cast<size_t>(r)];
  return static_cast<const char*>(args_.x->data(r)) + args_.x_offset;
}

void MoeAgGroupGemm::set_trace(const TraceBuffer* trace) {
  trace_ = trace;
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
  ag_->set_trace(trace);
}

void MoeAgGroupGemm::build_mapping(int rank) {
  const size_t i = static_cast<size_t>(rank);
  const cudaStream_t compute = world_->compute_stream(rank);
  mappings_[i]->build(args_.ids[i], compute);
  mappings_[i]->build_order(ag_->plan(), static_cast<uint32_t>(rank), order_[i].get<uint32_t>(), compute);
}

void MoeAgGroupGemm::run_mapping_only() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    build_mapping(r);
  }
}

void MoeAgGroupGemm::run_gemm_only() {
  for (int r : world_->local_ranks()) {
    world_->set_device(r);
    plain_kernels_[static_cast<size_t>(r)]->run(gather_slice_.epoch(), world_->compute_stream(r));
  }
}

}  // namespace tilelink
