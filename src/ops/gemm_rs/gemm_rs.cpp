// Host side of GEMM+RS: construction (plan, method, per-rank kernels), operands, launch; the
// validation is gemm_rs_checks.cpp.
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "runtime/checks.hpp"
#include "tilelink/comm/stream_ctx.hpp"
#include "ops/common/repoint.hpp"
#include "ops/common/tuned_config.hpp"
#include "ops/gemm_rs/gemm_rs_internal.hpp"
#include "ops/gemm_rs/sm90_gemm_rs_kernel.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs_policy.hpp"

namespace tilelink {

using namespace gemm_rs_internal;
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
  const EngineChoice engine = choose_engine(world, heap, args_);
  engine_why_ = engine.why;
  if (engine.engine == GemmRsEngine::kSmallM) {
    // GEMM+AR's engine, reduce-scattering; the owner_tiles engine's plan only describes.
    small_m_ = std::make_unique<GemmAr>(world, heap, signals, small_m_arguments(args_), name + ".small_m");
    const GemmArChoice& ch = small_m_->choice();
    method_ = ch.schedule == GemmArSchedule::kFused ? OpMethod::kFused : OpMethod::kNonOverlapped;
    method_why_ = std::string(args_in.config.method != OpMethod::kAuto ? "configured" : "GEMM+AR's schedule") +
                  " (small-M engine: " + small_m_->describe_choice() + ")";
    const GemmRsArguments resolved = with_path(world, heap, args_);
    kernel_name_ = kernel_for(resolved).name;
    plan_ = make_plan(world, resolved, kernel_for(resolved));
    return;
  }
  args_ = with_path(world, heap, args_);  // the scatter and reducer this world runs
  const GemmRsArguments& args = args_;
  const auto& kernel = kernel_for(args);
  kernel_name_ = kernel.name;
  a_row_bytes_ = a_row_bytes(args);
  plan_ = make_plan(world, args, kernel);
  reduce_blocks_ = reduce_blocks_of(world, args);
  swizzle_ = choose_swizzle(world, args, kernel);
  kernel_cluster_ = kernel.cluster_m * kernel.cluster_n;
  choose_method(args_in.config.method, args_in.config.reducer);
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
  if (!args.a_source.empty()) {  // the op's own packed rows (and tensor scale) per local rank
    a_packed_.resize(n_ranks);
    a_scale_own_.resize(n_ranks);
    for (int r : world.local_ranks()) {
      a_packed_[static_cast<size_t>(r)] = DeviceBuffer(uint64_t(args.m) * a_row_bytes_, world.device(r));
      if (args.scaling == Fp8Scaling::kTensor) a_scale_own_[static_cast<size_t>(r)] = DeviceBuffer(sizeof(float), world.device(r));
    }
  }
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

void GemmRs::choose_method(OpMethod callers, GemmRsReducer asked) {
  const World& world = *world_;
  const int budget = world.tightest_budget();  // alike in every process
  estimates_ = gemm_rs_policy::estimate_methods(method_shape(world, args_, reduce_blocks_));
  auto us = [](double t) { return std::to_string(static_cast<long long>(t * 1e6 + 0.5)); };
  if (plan_.reducer == GemmRsReducer::kEpilogue) {  // can_implement refuses a configured non-fused method
    method_ = OpMethod::kFused;
    method_why_ = callers != OpMethod::kAuto
                      ? "configured"
                      : std::string("the epilogue reducer sums inside the GEMM (") +
                            (asked == GemmRsReducer::kAuto
                                 ? "automatic, one rank per GPU (gemm_rs_policy::path); the op's estimate: fused " +
                                       us(estimates_.fused) + " us, non-overlapped " + us(estimates_.non_overlapped) +
                                       " us"
                                 : std::string("configured")) +
                            ")";
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

const void* GemmRs::a_of(int rank) const {
  const size_t r = static_cast<size_t>(rank);
  return a_packed_.empty() ? args_.a[r] : a_packed_[r].get();
}

void GemmRs::make_kernel(int r) {
  const auto& kernel = kernel_for(args_);
  const size_t i = static_cast<size_t>(r);
  detail::Sm90GemmRsProblem p;
  p.a = a_of(r);
  p.lda = a_lda(args_);
  p.b = args_.b[i];
  if (fp8(args_)) {
    p.b_scale = args_.b_scale[i];
    if (args_.scaling == Fp8Scaling::kTensor) {
      p.a_scale = a_scale_own_.empty() ? args_.a_scale[i] : a_scale_own_[i].get<float>();
    }
  }
  const int64_t block = int64_t(plan_.rows_per_rank) * args_.n;  // elements of an owner block
  if (world_->size() == 1) {  // the reduce-scatter of one rank is the identity: the GEMM writes `out`
    p.d = args_.out[0];
    p.d_batch_stride = block;
  } else if (plan_.scatter == GemmRsScatter::kEpiloguePush) {
    // Owner l's slot r: in rank r's affine view of the heap, base(o) + ((l - o) mod P) * stride.
    const int origin = heap_->affine_origin(r);
    p.d = static_cast<char*>(args_.partial->data(origin)) + uint64_t(r) * block * 2;
    p.d_batch_stride = static_cast<int64_t>(heap_->affine_stride() / 2);
    p.d_origin = static_cast<uint32_t>(origin);
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
      b.a = static_cast<const char*>(p.a) + uint64_t(q) * plan_.rows_per_rank * a_row_bytes_;
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
  if (fp8(args_)) {
    throw InvalidArgument("GemmRs::set_operands: this op's operands are e4m3; expected the overload with the scales");
  }
  world_->check_local_rank(rank, "GemmRs::set_operands");
  require_aligned("GemmRs::set_operands", "a", a, "a 16-byte aligned M x K bf16 input on the rank's device");
  require_aligned("GemmRs::set_operands", "b", b, "a 16-byte aligned N x K bf16 weight on the rank's device");
  require_aligned("GemmRs::set_operands", "out", out, "a 16-byte aligned M/P x N bf16 output on the rank's device");
  if (small_m_ != nullptr) {
    small_m_->set_operands(rank, a, b, out);
    const size_t r = static_cast<size_t>(rank);
    args_.a[r] = a;
    args_.b[r] = b;
    args_.out[r] = out;
    return;
  }
  repoint_operands(rank, a, nullptr, b, nullptr, out);
}

void GemmRs::set_operands(int rank, const void* a, const float* a_scale, const void* b, const float* b_scale,
                          void* out) {
  const char* where = "GemmRs::set_operands";
  if (!fp8(args_)) throw InvalidArgument(std::string(where) + ": this op's operands are bf16; expected the bf16 overload");
  world_->check_local_rank(rank, where);
  const bool source = !args_.a_source.empty();
  require_aligned(where, "a", a,
                  source ? "the rank's 16-byte aligned M x K bf16 A (the op quantises it)"
                         : "the rank's 16-byte aligned packed e4m3 rows");
  require_aligned(where, "b", b, "a 16-byte aligned N x K e4m3 weight on the rank's device");
  require_aligned(where, "b_scale", b_scale, "B's 16-byte aligned fp32 scales on the rank's device");
  require_aligned(where, "out", out, "a 16-byte aligned M/P x N bf16 output on the rank's device");
  const bool wants_scale = args_.scaling == Fp8Scaling::kTensor && !source;
  if (wants_scale) {
    require_aligned(where, "a_scale", a_scale, "A's 16-byte aligned fp32 tensor scale");
  } else if (a_scale != nullptr) {
    throw InvalidArgument(std::string(where) + ": argument 'a_scale' = a pointer: expected null (" +
                          (source ? "the op computes the scale as it quantises a_source" : "A's scales are in its rows") +
                          ")");
  }
  repoint_operands(rank, a, a_scale, b, b_scale, out);
}

// Both set_operands after their checks: the GEMM's descriptors are rebuilt only when a pointer it
// holds changed -- A (not with a_source: the GEMM reads the op's rows), B and its scales, A's
// tensor scale, and `out` at world 1 (the GEMM writes it) or when its epilogue sums; the reduction
// kernel takes `out` at each launch.
void GemmRs::repoint_operands(int rank, const void* a, const float* a_scale, const void* b, const float* b_scale,
                              void* out) {
  const size_t r = static_cast<size_t>(rank);
  const bool source = !args_.a_source.empty();
  const bool wants_scale = fp8(args_) && args_.scaling == Fp8Scaling::kTensor && !source;
  if (source) args_.a_source[r] = a;  // read by the host at each call
  const bool gemm_holds_out = world_->size() == 1 || plan_.reducer == GemmRsReducer::kEpilogue;
  const bool gemm_changed = (!source && args_.a[r] != a) || args_.b[r] != b ||
                            (fp8(args_) && args_.b_scale[r] != b_scale) ||
                            (wants_scale && args_.a_scale[r] != a_scale) || (gemm_holds_out && args_.out[r] != out);
  if (!gemm_changed) {
    args_.out[r] = out;
    return;
  }
  detail::repoint(
      args_,
      [&](GemmRsArguments& x) {
        if (!source) x.a[r] = a;
        x.b[r] = b;
        if (fp8(x)) x.b_scale[r] = b_scale;
        if (wants_scale) x.a_scale[r] = a_scale;
        x.out[r] = out;
      },
      [&] { make_kernel(rank); });  // replaces the kernel only once the new one is made
}

// Quantise first: every local rank's bf16 A into the op's packed rows on its compute stream (the
// previous call's GEMM, which read them, is before it there), the tensor scale computed first.
void GemmRs::quantize_a() {
  if (args_.a_source.empty()) return;
  const World& world = *world_;
  for (int r : world.local_ranks()) {
    const size_t i = static_cast<size_t>(r);
    world.set_device(r);
    const cudaStream_t stream = world.compute_stream(r);
    float* scale = args_.scaling == Fp8Scaling::kTensor ? a_scale_own_[i].get<float>() : nullptr;
    if (scale != nullptr) tensor_scale_e4m3(args_.a_source[i], args_.k, args_.m, args_.k, scale, stream);
    quantize_rows_e4m3(args_.a_source[i], args_.k, args_.m, args_.k, args_.scaling, scale, a_packed_[i].get(), stream);
  }
}

GemmRs::~GemmRs() = default;

uint64_t GemmRs::run() {
  if (small_m_ != nullptr) return small_m_->run();
  const World& world = *world_;
  quantize_a();
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
  if (small_m_ != nullptr) return small_m_->set_trace(trace);
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
}

void GemmRs::run_gemm_only() {
  if (small_m_ != nullptr) return small_m_->run_gemm_only();
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
