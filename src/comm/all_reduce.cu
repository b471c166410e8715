// Host side of the standalone all-reduce (comm/all_reduce.hpp's protocol): validation, the method
// and chunking, launch.
#include "tilelink/comm/collectives.hpp"
#include "tilelink/comm/device_ctx.cuh"

#include <algorithm>
#include <string>

#include "comm/collective_launch.cuh"
#include "runtime/checks.hpp"
#include "tilelink/comm/block_work_queue.cuh"
#include "tilelink/runtime/work_counters.hpp"

namespace tilelink {

const char* to_string(AllReduceMethod v) {
  switch (v) {
    case AllReduceMethod::kOneShot: return "one_shot";
    case AllReduceMethod::kTwoShot: return "two_shot";
    case AllReduceMethod::kAuto: break;
  }
  return "auto";
}

namespace {

template <bool kBulk>
__global__ void __launch_bounds__(1024) all_reduce_kernel(AllReducePlan plan, SignalView sig, SymmetricView heap,
                                                          float* partial, float* recv, float* out,
                                                          uint32_t* queue_counter) {
  extern __shared__ __align__(128) char smem[];
  BulkStaging staging = detail::collective_staging<kBulk>(smem);
  DeviceBlockCtx<kBulk> ctx{sig.rank, sig.world, &staging};
  __shared__ uint32_t slot;
  detail::BlockWorkQueue queue(queue_counter, &slot);
  all_reduce_block(ctx, plan, sig, heap, partial, recv, out, queue);
}

std::string describe_all_reduce_channel(const AllReducePlan& plan, uint32_t ch) {
  if (ch < plan.ready_channel(0)) {
    return ch < plan.world ? "the all-reduce's exit barrier: rank " + std::to_string(ch) +
                                 "'s arrival (that rank had not finished reading this rank's buffers)"
                           : "the all-reduce's exit barrier: this rank's own blocks to finish";
  }
  auto rows = [&](uint32_t c) {
    const RowRange r = plan.chunk_rows(c);
    return "rows [" + std::to_string(r.row0) + ", " + std::to_string(r.row0 + r.rows) + ")";
  };
  if (ch < plan.reduced_channel(0)) {
    const uint32_t c = ch - plan.ready_channel(0);
    return "the partial's " + rows(c) + " (chunk " + std::to_string(c) + ") to be in place";
  }
  const uint32_t c = ch - plan.reduced_channel(0);
  return "the sum of " + rows(c) + " (chunk " + std::to_string(c) + ") from its owner, rank " +
         std::to_string(plan.owner(c));
}

}  // namespace

ArMethod AllReduce::auto_method(int world, uint64_t bytes) {
  return world <= 2 || bytes <= kOneShotMaxBytes ? ArMethod::kOneShot : ArMethod::kTwoShot;
}

std::string AllReduce::can_implement(const World& world, const SymmetricHeap& heap, const AllReduceArguments& a) {
  const AllReduceConfig& c = a.config;
  if (a.rows == 0) return "argument 'rows' = 0: expected at least one row";
  if (a.cols == 0 || a.cols % 4 != 0) {
    return "argument 'cols' = " + std::to_string(a.cols) +
           ": expected a positive multiple of 4 floats (rows move as 16-byte vectors)";
  }
  if (c.method != AllReduceMethod::kAuto && c.method != AllReduceMethod::kOneShot &&
      c.method != AllReduceMethod::kTwoShot) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(c.method)) +
           ": expected auto, one_shot or two_shot";
  }
  if (std::string e = check_launch_shape(world, c.num_blocks, c.threads); !e.empty()) return e;
  const uint64_t bytes = uint64_t(a.rows) * a.cols * sizeof(float);
  if (std::string e = check_symmetric(world, heap, a.partial, 0, bytes, "partial"); !e.empty()) return e;
  if (std::string e = check_symmetric(world, heap, a.out, 0, bytes, "out"); !e.empty()) return e;
  if (a.partial->data(world.local_ranks().front()) == a.out->data(world.local_ranks().front())) {
    return "arguments 'partial' and 'out' are the same buffer: expected two (peers read the partial while the sum "
           "is written)";
  }
  return "";
}

AllReduce::AllReduce(const World& world, SymmetricHeap& heap, SignalSet& signals, const AllReduceArguments& args,
                     const std::string& name)
    : world_(&world), heap_(&heap), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("AllReduce '" + name + "': " + why);
  }
  const uint32_t w = static_cast<uint32_t>(world.size());
  plan_.rows = args.rows;
  plan_.cols = args.cols;
  plan_.world = w;
  plan_.method = args.config.method == AllReduceMethod::kOneShot   ? ArMethod::kOneShot
                 : args.config.method == AllReduceMethod::kTwoShot ? ArMethod::kTwoShot
                                                                   : auto_method(world.size(), uint64_t(args.rows) *
                                                                                                   args.cols * 4);
  // Two chunks per CTA the rank's SM budget allows, and at least four per rank (two-shot spreads the
  // chunks' owners over the ranks); at most 128 rows each. Measured on the H200 (docs/PERF.md):
  // four chunks per rank left 2 ranks with 8 CTAs each, at a tenth of the copy engine's speed.
  // The plan must be the same on every rank: the budget is (virtual ranks: floor(SMs / world); a
  // process world assumes every rank on the same kind of GPU with the same SM share).
  const uint32_t budget = static_cast<uint32_t>(world.sm_budget(world.local_ranks().front()));
  const uint32_t target_chunks = std::max(2 * budget, 4 * w);
  plan_.comm_rows = args.config.comm_rows != 0 ? args.config.comm_rows
                                               : std::clamp((args.rows + target_chunks - 1) / target_chunks, 1u, 128u);
  plan_.in_place = true;
  recv_ = heap.allocate(plan_.recv_elems() * sizeof(float));
  num_blocks_ = args.config.num_blocks != 0 ? args.config.num_blocks : std::clamp(plan_.num_chunks(), 1u, budget);
  world.preload_kernel(args.config.path == DataPath::kBulk ? all_reduce_kernel<true> : all_reduce_kernel<false>);
  slice_ = signals.allocate(plan_.num_channels(), name);
  slice_.set_describer([plan = plan_](uint32_t ch, int, int) { return describe_all_reduce_channel(plan, ch); });
  queues_ = zeroed_work_counters(world);
}

uint64_t AllReduce::run() {
  const uint64_t epoch = slice_.begin_call();
  const World& world = *world_;
  const bool bulk = args_.config.path == DataPath::kBulk;
  const auto kernel = bulk ? all_reduce_kernel<true> : all_reduce_kernel<false>;
  for (int r : world.local_ranks()) {
    world.comm_after_compute(r);
    detail::launch(world, r, kernel, bulk, num_blocks_, args_.config.threads, plan_,
                   slice_.device_view(r, bulk ? "all_reduce_kernel<bulk>" : "all_reduce_kernel<ldst>"),
                   heap_->device_view(r), args_.partial->as<float>(r), recv_.as<float>(r), args_.out->as<float>(r),
                   queues_[static_cast<size_t>(r)].get<uint32_t>());
  }
  return epoch;
}

}  // namespace tilelink
