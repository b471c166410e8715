// Host side of the standalone collectives: validation, planning, launch.
#include "tilelink/comm/collectives.hpp"
#include "tilelink/comm/device_ctx.cuh"

#include <algorithm>
#include <string>

#include "comm/collective_launch.cuh"
#include "runtime/checks.hpp"
#include "tilelink/comm/block_work_queue.cuh"
#include "tilelink/primitives/host.hpp"
#include "tilelink/runtime/work_counters.hpp"

namespace tilelink {

const char* to_string(CommResource v) { return v == CommResource::kSm ? "sm" : "ce"; }
const char* to_string(DataPath v) { return v == DataPath::kLdSt ? "ldst" : "bulk"; }
const char* to_string(AgMethod v) { return v == AgMethod::kPull ? "pull" : "push"; }
const char* to_string(RsMethod v) { return v == RsMethod::kPush ? "push" : "pull"; }
const char* to_string(CommOrder v) { return v == CommOrder::kFullMesh ? "mesh" : "ring"; }

namespace {

template <bool kBulk>
__global__ void __launch_bounds__(1024) all_gather_kernel(AllGatherPlan plan, SignalView sig,
                                                          SymmetricView heap, void* gathered, const void* own_rows,
                                                          TraceView trace) {
  extern __shared__ __align__(128) char smem[];
  BulkStaging staging = detail::collective_staging<kBulk>(smem);
  DeviceBlockCtx<kBulk> ctx{sig.rank, sig.world, &staging, trace};
  all_gather_block(ctx, plan, sig, heap, gathered, own_rows);
}

template <bool kBulk>
__global__ void __launch_bounds__(1024) reduce_scatter_kernel(ReduceScatterPlan plan, SignalView sig,
                                                              SymmetricView heap, float* partial,
                                                              float* recv, float* out, uint32_t* queue_counter) {
  extern __shared__ __align__(128) char smem[];
  BulkStaging staging = detail::collective_staging<kBulk>(smem);
  DeviceBlockCtx<kBulk> ctx{sig.rank, sig.world, &staging};
  __shared__ uint32_t slot;
  detail::BlockWorkQueue queue(queue_counter, &slot);
  reduce_scatter_block(ctx, plan, sig, heap, partial, recv, out, queue);
}

}  // namespace

// ---- AllGather -------------------------------------------------------------------------------------

std::string describe_all_gather_channel(const AllGatherPlan& plan, uint32_t ch) {
  const uint32_t world = plan.world();
  const std::string all_gather = "the all-gather's ";
  if (ch < plan.exit_channel()) {
    return all_gather + "entry barrier: rank " + std::to_string(ch - plan.barrier_channel()) +
           "'s arrival (that rank had not entered this call: it is behind, or stopped)";
  }
  if (ch < plan.exit_channel() + world) {
    return all_gather + "exit barrier: rank " + std::to_string(ch - plan.exit_channel()) +
           "'s arrival (that rank had not finished reading this rank's rows)";
  }
  if (ch < plan.tile_channel(0)) return all_gather + "exit barrier: this rank's own blocks to finish";
  const uint32_t c = ch - plan.tile_channel(0);
  if (c >= plan.map.num_channels()) return "";
  const RowRange rows = plan.map.rows_of_channel(c);
  const uint32_t origin = plan.map.rank_of_channel(c);
  const uint32_t local0 = rows.row0 - origin * plan.map.rows_per_rank;
  return "rows [" + std::to_string(rows.row0) + ", " + std::to_string(rows.row0 + rows.rows) +
         ") of the gathered tensor: rank " + std::to_string(origin) + "'s shard, its rows [" + std::to_string(local0) +
         ", " + std::to_string(local0 + rows.rows) + ") (all-gather tile " + std::to_string(c) + ")";
}

std::string describe_all_gather_entry_state(const AllGatherPlan& plan, const ErrorRecord& r) {
  const uint32_t world = plan.world();
  if (plan.barrier_channel() + world > r.snapshot_count) return "";
  std::string missing;
  int count = 0;
  for (uint32_t q = 0; q < world; ++q) {
    const uint64_t v = r.snapshot[plan.barrier_channel() + q];
    if (static_cast<int64_t>(v - r.epoch) < 0) {  // set-mode arrivals: the epoch, once entered
      missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      ++count;
    }
  }
  if (missing.empty()) return "";
  return std::string(count == 1 ? "rank " : "ranks ") + missing + " had" +
         " not entered this call when the wait gave up (the all-gather's entry barrier in rank " +
         std::to_string(r.rank) + "'s memory; no shard moves before every rank has entered)";
}

std::string AllGather::can_implement(const World& world, const SymmetricHeap& heap,
                                     const AllGatherArguments& a) {
  const AllGatherConfig& c = a.config;
  if (c.resource != CommResource::kSm && c.resource != CommResource::kCopyEngine) {
    return "argument 'config.resource' = " + std::to_string(static_cast<uint32_t>(c.resource)) +
           ": expected kSm or kCopyEngine";
  }
  if (c.method != AgMethod::kPull && c.method != AgMethod::kPush) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(c.method)) + ": expected kPull or kPush";
  }
  if (c.path != DataPath::kLdSt && c.path != DataPath::kBulk) {
    return "argument 'config.path' = " + std::to_string(static_cast<uint32_t>(c.path)) + ": expected kLdSt or kBulk";
  }
  if (c.order != CommOrder::kFullMesh && c.order != CommOrder::kRing) {
    return "argument 'config.order' = " + std::to_string(static_cast<uint32_t>(c.order)) +
           ": expected kFullMesh or kRing";
  }
  if (a.rows_per_rank == 0) return "argument 'rows_per_rank' = 0: expected at least one row";
  if (a.row_bytes == 0 || a.row_bytes % kTileAlignment != 0) {
    return "argument 'row_bytes' = " + std::to_string(a.row_bytes) +
           ": expected a positive multiple of 16 (rows move as 16-byte vectors)";
  }
  if (c.comm_rows == 0) return "argument 'config.comm_rows' = 0: expected at least one row per tile";
  const uint64_t total_rows = uint64_t(a.rows_per_rank) * world.size();
  if (total_rows > 0xFFFFFFFFull) {
    return "argument 'rows_per_rank' = " + std::to_string(a.rows_per_rank) +
           ": expected world * rows_per_rank below 2^32";
  }
  if (c.resource == CommResource::kCopyEngine && c.order != CommOrder::kFullMesh) {
    return std::string("argument 'config.order' = ") + to_string(c.order) +
           ": expected 'mesh' with the copy engine (a stream cannot wait on a peer's channel)";
  }
  if (c.resource == CommResource::kSm) {
    if (std::string e = check_load_store_peers(world, "the SM all-gather (argument 'config.resource' = sm; expected "
                                                      "copy_engine, whose puts and signals go through NVSHMEM)");
        !e.empty()) {
      return e;
    }
  }
  if (c.resource == CommResource::kSm) {
    if (std::string e = check_launch_shape(world, c.num_blocks, c.threads); !e.empty()) return e;
  }
  if (!a.own_rows.empty()) {
    const std::string what = "each rank's " + std::to_string(a.rows_per_rank) + " own rows of " +
                             std::to_string(a.row_bytes) + " bytes";
    if (std::string e = check_rank_pointers(world, a.own_rows, "own_rows"); !e.empty()) return e + " (" + what + ")";
  }
  return check_symmetric(world, heap, a.gathered, a.gathered_offset, total_rows * a.row_bytes, "gathered");
}

AllGather::AllGather(const World& world, SymmetricHeap& heap, SignalSet& signals,
                     const AllGatherArguments& args, const std::string& name)
    : world_(&world), heap_(&heap), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("AllGather '" + name + "': " + why);
  }
  plan_.map = RowShardMapping{args.rows_per_rank, args.config.comm_rows, static_cast<uint32_t>(world.size())};
  plan_.row_bytes = args.row_bytes;
  plan_.pitch = args.row_bytes;
  // The put-with-signal transport has no get: its copy-engine all-gather pushes.
  const bool put_signal = args.config.resource == CommResource::kCopyEngine && world.transport() == Transport::kPutSignal;
  plan_.method = put_signal ? AgMethod::kPush : args.config.method;
  plan_.order = args.config.order;
  const uint32_t budget = static_cast<uint32_t>(world.sm_budget(0));
  const uint32_t own_items = args.own_rows.empty() ? 0 : plan_.map.chunks_per_rank();
  num_blocks_ = args.config.num_blocks != 0 ? args.config.num_blocks
                                            : std::clamp(plan_.num_items() + own_items, 1u, budget);
  for (int r = 0; r < world.size(); ++r) {  // the ranks this process drives (another process's: unmapped)
    gathered_.push_back(world.is_local(r) ? static_cast<char*>(args.gathered->data(r)) + args.gathered_offset : nullptr);
  }
  if (args.config.resource == CommResource::kSm) {
    world.preload_kernel(args.config.path == DataPath::kBulk ? all_gather_kernel<true> : all_gather_kernel<false>);
  }
  slice_ = signals.allocate(plan_.num_channels(), name);
  // A rank's own entry arrival is waited on only by its consumer's stream (wait_started with own rows on
  // the copy engine), behind its own rows' copies: a stall there is those copies not running.
  slice_.set_describer([plan = plan_, own = announce_first()](uint32_t ch, int waiter, int) {
    if (own && waiter >= 0 && ch == plan.barrier_channel() + static_cast<uint32_t>(waiter)) {
      return std::string("the all-gather's entry barrier: this rank's own arrival, which its comm stream writes after "
                         "copying its own rows from own_rows (copies that need SMs: they had not run)");
    }
    return describe_all_gather_channel(plan, ch);
  });
  // With an entry barrier (the copy engine's streams; push), a tile that never comes may be held
  // by a rank that never entered the call: the report names it.
  const bool entry_barrier = args.config.resource == CommResource::kCopyEngine || plan_.method == AgMethod::kPush;
  slice_.set_state_describer([plan = plan_, entry_barrier](const ErrorRecord& r) {
    return entry_barrier ? describe_all_gather_entry_state(plan, r) : std::string();
  });
}

uint64_t AllGather::run() {
  const uint64_t epoch = begin_call();
  for (int r : world_->local_ranks()) {
    world_->comm_after_compute(r);
    announce(r);
  }
  for (int r : world_->local_ranks()) transfer(r);
  return epoch;
}

void AllGather::announce(int r) {
  const World& world = *world_;
  world.check_rank(r, "AllGather::announce");
  if (args_.config.resource != CommResource::kCopyEngine) return;
  world.set_device(r);
  StreamCtx h{r, world.size(), world.comm_stream(r), world.transport()};
  all_gather_stream_announce(h, plan_, slice_.host_view(r), gathered_[r], own_rows(r));
}

void AllGather::set_own_rows(int r, const void* rows) {
  constexpr const char* where = "AllGather::set_own_rows";
  world_->check_local_rank(r, where);
  if (args_.own_rows.empty()) {
    throw InvalidArgument(std::string(where) + ": this all-gather was built without own_rows (its ranks' rows are in "
                          "place before each call); expected it built with them");
  }
  require_aligned(where, "rows", rows, "the rank's 16-byte aligned own rows on its device");
  args_.own_rows[static_cast<size_t>(r)] = rows;
}

const void* AllGather::own_rows(int r) const {
  return args_.own_rows.empty() ? nullptr : args_.own_rows[static_cast<size_t>(r)];
}

void AllGather::transfer(int r) {
  const World& world = *world_;
  world.check_rank(r, "AllGather::transfer");
  if (args_.config.resource == CommResource::kCopyEngine) {
    world.set_device(r);
    StreamCtx h{r, world.size(), world.comm_stream(r), world.transport()};
    all_gather_stream_transfer(h, plan_, slice_.host_view(r), heap_->host_view(r), gathered_[r]);
  } else {
    const bool bulk = args_.config.path == DataPath::kBulk;
    detail::launch(world, r, bulk ? all_gather_kernel<true> : all_gather_kernel<false>, bulk, num_blocks_,
                   args_.config.threads, plan_,
                   slice_.device_view(r, bulk ? "all_gather_kernel<bulk>" : "all_gather_kernel<ldst>"),
                   heap_->device_view(r), gathered_[r], own_rows(r), trace_view(r));
  }
}

void AllGather::enqueue_before_consumers(int r) {
  world_->comm_after_compute(r);
  if (producer_first()) transfer(r);
  if (announce_first()) announce(r);  // the own rows' copies (SM work) before any consumer
}

void AllGather::enqueue_after_consumers(int r) {
  if (!announce_first()) announce(r);
}

void AllGather::enqueue_transfers_last() {
  if (producer_first()) return;
  for (int r : world_->local_ranks()) transfer(r);
}

void AllGather::wait_started(int r, cudaStream_t stream) const {
  if (!producer_first() && !announce_first()) return;
  world_->check_rank(r, "AllGather::wait_started");
  world_->set_device(r);
  if (producer_first()) {
    rank_wait(stream, slice_.host_view(r), plan_.started_channel(), num_blocks_);
  } else {
    // The rank's arrival at its own entry barrier (set mode: the epoch), enqueued by announce(r)
    // behind the own rows' copies: those copies are done (its arrivals at the peers of lower rank
    // were enqueued before this one, the others right after it).
    rank_wait(stream, slice_.host_view(r), plan_.barrier_channel() + static_cast<uint32_t>(r));
  }
}

TraceView AllGather::trace_view(int rank) const { return trace_ != nullptr ? trace_->view(rank) : TraceView{}; }

// ---- ReduceScatter ---------------------------------------------------------------------------------

std::string ReduceScatter::can_implement(const World& world, const SymmetricHeap& heap,
                                         const ReduceScatterArguments& a) {
  const ReduceScatterConfig& c = a.config;
  if (a.rows_per_rank == 0) return "argument 'rows_per_rank' = 0: expected at least one row";
  if (std::string e = check_load_store_peers(world, "the reduce-scatter (SM blocks)"); !e.empty()) return e;
  if (a.cols == 0 || a.cols % 4 != 0) {
    return "argument 'cols' = " + std::to_string(a.cols) +
           ": expected a positive multiple of 4 floats (rows move as 16-byte vectors)";
  }
  if (c.comm_rows == 0) return "argument 'config.comm_rows' = 0: expected at least one row per tile";
  if (std::string e = check_launch_shape(world, c.num_blocks, c.threads); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.out, "out"); !e.empty()) return e;
  const uint64_t bytes = uint64_t(a.rows_per_rank) * world.size() * a.cols * sizeof(float);
  return check_symmetric(world, heap, a.partial, 0, bytes, "partial");
}

ReduceScatter::ReduceScatter(const World& world, SymmetricHeap& heap, SignalSet& signals,
                             const ReduceScatterArguments& args, const std::string& name)
    : world_(&world), heap_(&heap), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("ReduceScatter '" + name + "': " + why);
  }
  plan_.map = RowShardMapping{args.rows_per_rank, args.config.comm_rows, static_cast<uint32_t>(world.size())};
  plan_.cols = args.cols;
  plan_.method = args.config.method;
  recv_ = heap.allocate(plan_.recv_elems() * sizeof(float));
  const uint32_t budget = static_cast<uint32_t>(world.sm_budget(0));
  num_blocks_ = args.config.num_blocks != 0 ? args.config.num_blocks
                                            : std::clamp(args.rows_per_rank, 1u, budget);
  // About two reduction items per block, so that every block has work whatever comm_rows is.
  const uint32_t per_item = (args.rows_per_rank + 2 * num_blocks_ - 1) / (2 * num_blocks_);
  plan_.reduce_rows = std::clamp(per_item, 1u, args.config.comm_rows);
  world.preload_kernel(args.config.path == DataPath::kBulk ? reduce_scatter_kernel<true> : reduce_scatter_kernel<false>);
  slice_ = signals.allocate(plan_.num_channels(), name);
  queues_ = zeroed_work_counters(world);
}

uint64_t ReduceScatter::run() {
  const uint64_t epoch = slice_.begin_call();
  const World& world = *world_;
  const bool bulk = args_.config.path == DataPath::kBulk;
  const auto kernel = bulk ? reduce_scatter_kernel<true> : reduce_scatter_kernel<false>;
  for (int r : world.local_ranks()) {
    world.comm_after_compute(r);
    detail::launch(world, r, kernel, bulk, num_blocks_, args_.config.threads, plan_,
                   slice_.device_view(r, "reduce_scatter_kernel"), heap_->device_view(r),
                   args_.partial->as<float>(r), recv_.as<float>(r), args_.out[r],
                   queues_[static_cast<size_t>(r)].get<uint32_t>());
  }
  return epoch;
}

}  // namespace tilelink
