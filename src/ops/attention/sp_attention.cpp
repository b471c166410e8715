// Host side of SP attention: validation, the K/V all-gather, per-rank kernels, the fused call and
// the two baselines that share its kernel (non-overlapped, ring).
#include "tilelink/ops/attention/sp_attention.hpp"

#include <algorithm>
#include <string>

#include "runtime/checks.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "ops/attention/sm90_flash_attention_kernel.hpp"
#include "ops/common/tuned_config.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/attention/sp_attention_policy.hpp"

namespace tilelink {

namespace detail {

Sm90FlashAttentionConfigInfo sm90_flash_attention_hd128();
Sm90FlashAttentionConfigInfo sm90_flash_attention_hd64();

const std::vector<Sm90FlashAttentionConfigInfo>& sm90_flash_attention_configs() {
  static const std::vector<Sm90FlashAttentionConfigInfo> configs = {sm90_flash_attention_hd128(),
                                                                    sm90_flash_attention_hd64()};
  return configs;
}

}  // namespace detail

namespace {

constexpr uint32_t kElementBytes = 2;

const detail::Sm90FlashAttentionConfigInfo* find_kernel(uint32_t head_dim) {
  for (const auto& c : detail::sm90_flash_attention_configs()) {
    if (c.head_dim == head_dim) return &c;
  }
  return nullptr;
}

uint32_t kv_row_elems(const SpAttentionArguments& a) { return 2 * a.kv_heads * a.head_dim; }

AllGatherArguments all_gather_arguments(const World& world, const SpAttentionArguments& a) {
  return all_gather_policy::all_gather_arguments(world, a.kv, a.kv_offset, a.seq_per_rank, kv_row_elems(a),
                                                 a.config.comm);
}

// CTAs of the persistent kernel. Its CTAs spin while they wait for K/V, so SMs must stay free for
// whatever moves the K/V: the SM all-gather's blocks and the all-gather's slack next to them; with the
// copy engine, on virtual ranks, the device-local copies run on SMs as well, so the ranks sharing
// a GPU leave the slack free between them (not each); one rank per GPU leaves it on its own GPU.
int attention_sm_count(const World& world, int rank, const SpAttentionArguments& a, uint32_t comm_blocks) {
  const int left = world.sm_budget(rank) - static_cast<int>(comm_blocks);
  if (a.config.attention_sms != 0) return std::min(left, static_cast<int>(a.config.attention_sms));
  if (world.size() == 1) return left;
  if (a.config.comm.resource == CommResource::kCopyEngine && world.mode() == WorldMode::kVirtual) {
    return std::min(left, (world.num_sms(rank) - all_gather_policy::kCopyEngineFreeSms) / world.size());
  }
  return left - all_gather_policy::kSlackSms;
}

// SpAttentionConfig::section_kv_heads, resolved: the most kv heads (a divisor of kv_heads) whose
// gathered K/V (K and V of every token of the sequence) fit in 5/8 of the rank's L2 share -- the
// rest holds Q, O and what the other SMs stream -- and at least one.
uint32_t section_kv_heads(const World& world, const SpAttentionArguments& a) {
  if (a.config.section_kv_heads != 0) return a.config.section_kv_heads;
  const uint64_t head_bytes = uint64_t(a.seq_per_rank) * world.size() * 2 * a.head_dim * kElementBytes;
  const uint64_t budget = world.l2_share(0) / 8 * 5;
  uint32_t best = 1;
  for (uint32_t h = 1; h <= a.kv_heads; ++h) {
    if (a.kv_heads % h == 0 && h * head_bytes <= budget) best = h;
  }
  return best;
}

SpAttentionPlan make_plan(const World& world, const SpAttentionArguments& a, const AllGatherPlan& ag) {
  SpAttentionPlan p;
  p.ag = ag;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.head_dim = a.head_dim;
  p.bq = detail::kFlashBlockM;
  p.causal = a.causal;
  p.layout = a.config.layout;
  p.local_first = a.config.local_first && world.size() > 1;  // one rank: its shard is everything, one pass
  p.section_kv_heads = section_kv_heads(world, a);
  return p;
}

// The baselines' plan (non-overlapped, ring): one pass over K/V already gathered.
SpAttentionPlan one_pass(SpAttentionPlan plan) {
  plan.local_first = false;
  return plan;
}

detail::Sm90FlashAttentionProblem problem(const World& world, const SpAttentionArguments& a,
                                          const SpAttentionPlan& plan, const SymmetricBuffer* kv, int r) {
  detail::Sm90FlashAttentionProblem p;
  p.q = a.q[static_cast<size_t>(r)];
  p.kv = kv != nullptr ? static_cast<const char*>(kv->data(r)) + a.kv_offset : nullptr;
  p.o = a.o[static_cast<size_t>(r)];
  p.lse = a.lse[static_cast<size_t>(r)];
  p.plan = plan;
  p.rank = static_cast<uint32_t>(r);
  p.device = world.device(r);
  return p;
}

}  // namespace

std::string SpAttention::can_implement(const World& world, const SymmetricHeap& heap, const SpAttentionArguments& a) {
  if (a.seq_per_rank == 0) return "argument 'seq_per_rank' = 0: expected at least one token per rank";
  if (uint64_t(a.seq_per_rank) * world.size() > 0x7FFFFFFFull) {
    return "argument 'seq_per_rank' = " + std::to_string(a.seq_per_rank) + ": expected world * seq_per_rank below 2^31";
  }
  if (a.config.layout == SeqLayout::kZigZag && a.seq_per_rank % 2 != 0) {
    return "argument 'seq_per_rank' = " + std::to_string(a.seq_per_rank) +
           ": expected an even number of tokens per rank for the zig-zag layout";
  }
  if (static_cast<uint32_t>(a.config.method) > static_cast<uint32_t>(OpMethod::kNonOverlapped)) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(a.config.method)) +
           ": expected auto, fused, decomposed or non_overlapped";
  }
  if (a.config.method == OpMethod::kDecomposed && world.mode() == WorldMode::kProcess) {
    return "argument 'config.method' = decomposed: the ring hands shards on with CUDA events between ranks, "
           "which processes cannot share; expected a one-process world, or auto, fused or non_overlapped";
  }
  if (a.kv_heads == 0) return "argument 'kv_heads' = 0: expected at least one kv head";
  if (a.q_heads == 0 || a.q_heads % a.kv_heads != 0) {
    return "argument 'q_heads' = " + std::to_string(a.q_heads) + ": expected a positive multiple of kv_heads (" +
           std::to_string(a.kv_heads) + ")";
  }
  if (a.config.section_kv_heads != 0 && a.kv_heads % a.config.section_kv_heads != 0) {
    return "argument 'config.section_kv_heads' = " + std::to_string(a.config.section_kv_heads) +
           ": expected 0 (automatic) or a divisor of kv_heads (" + std::to_string(a.kv_heads) + ")";
  }
  if (find_kernel(a.head_dim) == nullptr) {
    return "argument 'head_dim' = " + std::to_string(a.head_dim) + ": expected 64 or 128";
  }
  if (std::string e = check_rank_pointers(world, a.q, "q"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.o, "o"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.lse, "lse"); !e.empty()) return e;
  const uint64_t rows = uint64_t(a.seq_per_rank) * world.size();
  if (std::string e = check_symmetric(world, heap, a.kv, a.kv_offset, rows * kv_row_elems(a) * kElementBytes, "kv");
      !e.empty()) {
    return e;
  }
  const AllGatherArguments ag = all_gather_arguments(world, a);
  if (ag.config.comm_rows % detail::kFlashBlockN != 0 && ag.config.comm_rows < a.seq_per_rank) {
    return "argument 'config.comm.comm_rows' = " + std::to_string(ag.config.comm_rows) + ": expected a multiple of " +
           std::to_string(detail::kFlashBlockN) + " (the attention's key tile) or at least seq_per_rank (" +
           std::to_string(a.seq_per_rank) + ")";
  }
  if (std::string e = AllGather::can_implement(world, heap, ag); !e.empty()) return e;
  const uint32_t comm_blocks = ag.config.resource == CommResource::kSm ? ag.config.num_blocks : 0;
  int waiting = 0;
  for (int r = 0; r < world.size(); ++r) {
    const int sms = attention_sm_count(world, r, a, comm_blocks);
    if (sms < 1) {
      return "argument 'config.attention_sms' = " + std::to_string(a.config.attention_sms) + ": rank " +
             std::to_string(r) + " has " + std::to_string(world.sm_budget(r)) + " SMs, " +
             std::to_string(comm_blocks) + " taken by the all-gather, leaving none for the attention";
    }
    waiting += sms;
  }
  // The automatic grid leaves the copy engine its SMs (attention_sm_count); a configured one must.
  if (std::string e = all_gather_policy::check_copy_engine_room(world, ag.config, waiting); !e.empty()) {
    return "argument 'config.attention_sms' = " + std::to_string(a.config.attention_sms) + ": " + e;
  }
  return "";
}

// The ring baseline's per-rank scratch and events, built on first use.
struct SpAttention::Ring {
  std::vector<DeviceBuffer> o_part, lse_part, o_acc, lse_acc;
  std::vector<std::unique_ptr<detail::Sm90FlashAttentionKernel>> kernels;
  std::vector<cudaEvent_t> start;              // [rank]: the call began on the rank's compute stream
  std::vector<std::vector<cudaEvent_t>> have;  // [rank][step]: the rank holds shard rank - step
  ~Ring() {
    for (cudaEvent_t e : start) cudaEventDestroy(e);
    for (auto& v : have) {
      for (cudaEvent_t e : v) cudaEventDestroy(e);
    }
  }
};

TuneKey sp_attention_tune_key(const World& world, const SpAttentionArguments& a) {
  return make_tune_key(world, "sp_attention", a.seq_per_rank * static_cast<uint32_t>(world.size()), a.q_heads,
                       a.kv_heads,
                       "head dim " + std::to_string(a.head_dim) + ", " + (a.causal ? "causal" : "non-causal") + ", " +
                           to_string(a.config.layout));
}

SpAttention::SpAttention(const World& world, SymmetricHeap& heap, SignalSet& signals, const SpAttentionArguments& args,
                         const std::string& name)
    : world_(&world), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("SpAttention '" + name + "': " + why);
  }
  args_ = detail::with_tuned_config<SpAttention>(
      world, heap, args, [&] { return sp_attention_tune_key(world, args); },
      [&world](auto& tuned, const auto& callers) {
        tuned.layout = callers.layout;
        if (callers.method != OpMethod::kAuto) tuned.method = callers.method;
        // The cache's key does not tell a process world from one process on several GPUs: the
        // ring a one-process tune stored cannot run here, the rest of its knobs can.
        if (world.mode() == WorldMode::kProcess && tuned.method == OpMethod::kDecomposed) tuned.method = OpMethod::kAuto;
      },
      &tuned_from_);
  ag_ = std::make_unique<AllGather>(world, heap, signals, all_gather_arguments(world, args_), name);
  plan_ = make_plan(world, args_, ag_->plan());
  if (std::string e = check_sp_attention_plan(plan_, kElementBytes); !e.empty()) {
    throw InvalidArgument("SpAttention '" + name + "': " + e);
  }
  const uint32_t comm_blocks = args_.config.comm.resource == CommResource::kSm ? ag_->num_blocks() : 0;
  const detail::Sm90FlashAttentionConfigInfo& kernel = *find_kernel(args_.head_dim);
  // Per-rank state, indexed by rank; in a process world only this process's rank has any.
  const size_t n_ranks = static_cast<size_t>(world.size());
  chunk_order_.resize(n_ranks);
  o_acc_.resize(n_ranks);
  ml_.resize(n_ranks);
  kernels_.resize(n_ranks);
  plain_kernels_.resize(n_ranks);
  const uint64_t o_elems = uint64_t(plan_.seq_per_rank()) * plan_.q_heads * plan_.head_dim;
  const uint64_t lse_elems = uint64_t(plan_.seq_per_rank()) * plan_.q_heads;
  for (int r : world.local_ranks()) {
    const size_t ri = static_cast<size_t>(r);
    std::vector<uint32_t> order(plan_.num_kv_chunks());
    for (uint32_t j = 0; j < order.size(); ++j) order[j] = plan_.kv_chunk(static_cast<uint32_t>(r), j);
    chunk_order_[ri] = DeviceBuffer(order.size() * sizeof(uint32_t), world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(chunk_order_[ri].get(), order.data(), chunk_order_[ri].bytes(), cudaMemcpyHostToDevice));
    detail::Sm90FlashAttentionProblem p = problem(world, args_, plan_, args_.kv, r);
    p.chunk_order = chunk_order_[ri].get<uint32_t>();
    p.sig = ag_->signals().device_view(r, "sm90_flash_attention_hd" + std::to_string(args_.head_dim));
    p.sm_count = attention_sm_count(world, r, args_, comm_blocks);
    p.wait = true;
    if (plan_.local_first) {
      o_acc_[ri] = DeviceBuffer(o_elems * sizeof(float), world.device(r));
      ml_[ri] = DeviceBuffer(2 * lse_elems * sizeof(float), world.device(r));
      p.o_acc = o_acc_[ri].get<float>();
      p.ml = ml_[ri].get<float>();
    }
    kernels_[ri] = kernel.make(p);
    // The non-overlapped baseline: one pass over K/V already gathered, on the whole budget.
    p.plan = one_pass(plan_);
    p.sm_count = world.sm_budget(r);
    p.wait = false;
    plain_kernels_[ri] = kernel.make(p);
  }
  choose_method(args.config.method);
}

void SpAttention::set_operands(int rank, const void* q, void* o, float* lse) {
  const char* where = "SpAttention::set_operands";
  world_->check_local_rank(rank, where);
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"q", q}, {"o", o}, {"lse", lse}}) {
    if (ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      detail::throw_invalid_argument(where, name, detail::to_display(ptr), "a 16-byte aligned device pointer");
    }
  }
  const size_t r = static_cast<size_t>(rank);
  args_.q[r] = q;
  args_.o[r] = o;
  args_.lse[r] = lse;
  kernels_[r]->set_operands(q, o, lse);
  plain_kernels_[r]->set_operands(q, o, lse);
  ring_.reset();  // the ring baseline's kernels read the old Q: rebuilt at its next call
}

SpAttention::~SpAttention() = default;

int SpAttention::attention_ctas(int rank) const {
  world_->check_local_rank(rank, "SpAttention::attention_ctas");  // other processes' kernels are not here
  return kernels_[static_cast<size_t>(rank)]->ctas();
}

double SpAttention::flops(int rank) const {
  world_->check_rank(rank, "SpAttention::flops");
  double pairs = 0;
  const uint32_t seq = plan_.seq_len();
  for (uint32_t i = 0; i < plan_.seq_per_rank(); ++i) {
    pairs += plan_.causal ? double(plan_.position(static_cast<uint32_t>(rank), i)) + 1.0 : double(seq);
  }
  return pairs * plan_.q_heads * 4.0 * plan_.head_dim;
}

void SpAttention::choose_method(OpMethod callers) {
  const World& world = *world_;
  const int r0 = world.local_ranks().front();
  sp_attention_policy::MethodShape s;
  s.world = static_cast<uint32_t>(world.size());
  for (int r = 0; r < world.size(); ++r) s.flops = std::max(s.flops, flops(r));  // the slowest rank's, alike everywhere
  s.shard_bytes = double(plan_.seq_per_rank()) * plan_.kv_heads * plan_.head_dim * 2 * kElementBytes;
  s.ctas = kernels_[static_cast<size_t>(r0)]->ctas();
  s.budget = world.tightest_budget();  // alike in every process
  s.one_rank_per_gpu = world.mode() != WorldMode::kVirtual;
  const sp_attention_policy::MethodEstimates e = sp_attention_policy::estimate_methods(s);
  method_ = sp_attention_policy::choose_method(args_.config.method, e, world.mode() != WorldMode::kProcess);
  auto us = [](double t) { return std::to_string(static_cast<long long>(t * 1e6 + 0.5)); };
  method_why_ = callers != OpMethod::kAuto               ? "configured"
                : args_.config.method != OpMethod::kAuto ? "the tune cache's measured winner (" + tuned_from_ + ")"
                                                         : "the estimate's fastest (fused " + us(e.fused) +
                                                               " us, ring " + us(e.decomposed) + " us, non-overlapped " +
                                                               us(e.non_overlapped) + " us)";
}

uint64_t SpAttention::run() {
  if (method_ == OpMethod::kNonOverlapped) {
    run_non_overlapped();
    return ag_->signals().epoch();
  }
  if (method_ == OpMethod::kDecomposed) {
    run_ring();
    return 0;
  }
  return run_fused();
}

uint64_t SpAttention::run_fused() {
  // The kernel starts on its own shard while the host still enqueues the copy-engine all-gather (the
  // SM all-gather's kernel is enqueued before it: AllGather::producer_first).
  return ag_->run_under([&](int r, uint64_t epoch) {
    kernels_[static_cast<size_t>(r)]->run(epoch, world_->compute_stream(r));
  });
}

void SpAttention::set_trace(const TraceBuffer* trace) {
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
  ag_->set_trace(trace);
}

void SpAttention::run_attention_only() {
  const World& world = *world_;
  for (int r : world.local_ranks()) {
    world.set_device(r);
    plain_kernels_[static_cast<size_t>(r)]->run(0, world.compute_stream(r));
  }
}

void SpAttention::run_non_overlapped() {
  const World& world = *world_;
  ag_->run();
  for (int r : world.local_ranks()) world.compute_after_comm(r);
  run_attention_only();
}

void SpAttention::run_ring() {
  const World& world = *world_;
  if (world.mode() == WorldMode::kProcess) {
    // Its steps hand shards on with CUDA events between ranks, which processes cannot share.
    detail::throw_invalid_argument("SpAttention::run_ring", "world", "a process world",
                                   "a one-process world (the ring baseline drives every rank)");
  }
  const int P = world.size();
  const uint32_t spr = plan_.seq_per_rank();
  const uint64_t o_elems = uint64_t(spr) * plan_.q_heads * plan_.head_dim;
  const uint64_t lse_elems = uint64_t(spr) * plan_.q_heads;
  if (!ring_) {
    ring_ = std::make_unique<Ring>();
    const detail::Sm90FlashAttentionConfigInfo& kernel = *find_kernel(args_.head_dim);
    for (int r = 0; r < P; ++r) {
      world.set_device(r);
      ring_->o_part.emplace_back(o_elems * kElementBytes, world.device(r));
      ring_->lse_part.emplace_back(lse_elems * sizeof(float), world.device(r));
      ring_->o_acc.emplace_back(o_elems * sizeof(float), world.device(r));
      ring_->lse_acc.emplace_back(lse_elems * sizeof(float), world.device(r));
      detail::Sm90FlashAttentionProblem p = problem(world, args_, one_pass(plan_), args_.kv, r);
      p.o = ring_->o_part.back().get();
      p.lse = ring_->lse_part.back().get<float>();
      p.chunk_order = chunk_order_[static_cast<size_t>(r)].get<uint32_t>();
      p.sm_count = world.sm_budget(r);
      p.wait = false;
      p.only_shard = r;
      ring_->kernels.push_back(kernel.make(p));
      cudaEvent_t e;
      TL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      ring_->start.push_back(e);
      ring_->have.emplace_back();
      for (int s = 0; s < P; ++s) {
        TL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        ring_->have.back().push_back(e);
      }
    }
  }
  const size_t shard_bytes = size_t(spr) * plan_.ag.pitch;
  auto shard_ptr = [&](int holder, int shard) {
    return static_cast<char*>(args_.kv->data(holder)) + args_.kv_offset + size_t(shard) * shard_bytes;
  };
  // Step 0 needs only the own shard. Every comm stream waits for its rank's and its successor's
  // previous call (the successor reads this rank's buffer).
  for (int r = 0; r < P; ++r) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaEventRecord(ring_->start[static_cast<size_t>(r)], world.compute_stream(r)));
    TL_CUDA_CHECK(cudaEventRecord(ring_->have[static_cast<size_t>(r)][0], world.compute_stream(r)));
  }
  for (int r = 0; r < P; ++r) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(r), ring_->start[static_cast<size_t>(r)], 0));
    TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(r), ring_->start[static_cast<size_t>((r + 1) % P)], 0));
  }
  for (int s = 0; s < P; ++s) {
    for (int r = 0; r < P; ++r) {
      const size_t ri = static_cast<size_t>(r);
      world.set_device(r);
      // Pass on: rank r fetches, from its predecessor, the shard the predecessor holds at step s.
      if (s + 1 < P) {
        const int prev = (r + P - 1) % P;
        const int shard = (prev + P - s) % P;
        TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(r), ring_->have[static_cast<size_t>(prev)][s], 0));
        TL_CUDA_CHECK(cudaMemcpyAsync(shard_ptr(r, shard), shard_ptr(prev, shard), shard_bytes, cudaMemcpyDefault,
                                      world.comm_stream(r)));
        TL_CUDA_CHECK(cudaEventRecord(ring_->have[ri][static_cast<size_t>(s + 1)], world.comm_stream(r)));
      }
      // Attend to the shard held at step s and merge.
      if (s > 0) TL_CUDA_CHECK(cudaStreamWaitEvent(world.compute_stream(r), ring_->have[ri][static_cast<size_t>(s)], 0));
      ring_->kernels[ri]->set_only_shard((r + P - s) % P);
      ring_->kernels[ri]->run(0, world.compute_stream(r));
      detail::ring_merge(ring_->o_part[ri].get(), ring_->lse_part[ri].get<float>(), ring_->o_acc[ri].get<float>(),
                         ring_->lse_acc[ri].get<float>(), args_.o[ri], args_.lse[ri], spr, plan_.q_heads,
                         plan_.head_dim, s == 0, s + 1 == P, world.compute_stream(r));
    }
  }
}

}  // namespace tilelink
