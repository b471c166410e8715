// Host side of AG+GEMM: validation, the all-gather half, per-rank kernel parameters, launch.
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"

#include <algorithm>
#include <string>

#include "runtime/checks.hpp"
#include "ops/common/kernel_configs.hpp"
#include "ops/ag_gemm/sm90_ag_gemm_kernel.hpp"
#include "ops/common/repoint.hpp"
#include "ops/common/tuned_config.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "ops/common/fp8_operands.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_policy.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm_protocol.hpp"
#include "tilelink/primitives/host.hpp"

namespace tilelink {

namespace detail {

// One function per compiled configuration (sm90_ag_gemm_<config>.cu). Listed here rather than
// self-registered: a static library drops object files nothing references.
Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c2x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_256x128x64_c1x2();
Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c1x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c2x1_splittail();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_tensor_128x128x128_c1x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_row_128x128x128_c1x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_block_128x128x128_c1x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_tensor_128x128x128_c2x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_row_128x128x128_c2x1();
Sm90AgGemmConfigInfo sm90_ag_gemm_e4m3_block_128x128x128_c2x1();

const std::vector<Sm90AgGemmConfigInfo>& sm90_ag_gemm_configs() {
  // Per data type and scaling mode the first is the default: FP8's 2x1-cluster tiles, measured
  // faster than their unclustered twins in every scaling mode (H100, docs/PERF.md 2026-12-05).
  static const std::vector<Sm90AgGemmConfigInfo> configs = {
      sm90_ag_gemm_128x256x64_c2x1(),           sm90_ag_gemm_256x128x64_c1x2(),
      sm90_ag_gemm_128x256x64_c1x1(),           sm90_ag_gemm_128x256x64_c2x1_splittail(),
      sm90_ag_gemm_e4m3_tensor_128x128x128_c2x1(),
      sm90_ag_gemm_e4m3_row_128x128x128_c2x1(),  sm90_ag_gemm_e4m3_block_128x128x128_c2x1(),
      sm90_ag_gemm_e4m3_tensor_128x128x128_c1x1(), sm90_ag_gemm_e4m3_row_128x128x128_c1x1(),
      sm90_ag_gemm_e4m3_block_128x128x128_c1x1()};
  return configs;
}

}  // namespace detail

namespace {

using all_gather_policy::kElementBytes;

bool fp8(const AgGemmArguments& a) { return a.dtype == DType::kE4m3; }

// Bytes of one gathered row of A.
uint64_t a_row_bytes(const AgGemmArguments& a) {
  return fp8(a) ? fp8_row_pitch(a.k, a.scaling) : uint64_t(a.k) * kElementBytes;
}

// A's row pitch in elements, as the kernel takes it: K bf16, or the packed row's bytes of e4m3.
uint64_t a_lda(const AgGemmArguments& a) { return fp8(a) ? a_row_bytes(a) : a.k; }

bool serves(const detail::Sm90AgGemmConfigInfo& c, const AgGemmArguments& a) {
  return c.dtype == a.dtype && (!fp8(a) || c.scaling == a.scaling);
}

// The configuration named by config.kernel, or for "" the first that serves the data type and
// scaling; nullptr if there is none.
const detail::Sm90AgGemmConfigInfo* find_kernel(const AgGemmArguments& a) {
  for (const detail::Sm90AgGemmConfigInfo& c : detail::sm90_ag_gemm_configs()) {
    if (a.config.kernel.empty() ? serves(c, a) : a.config.kernel == c.name) return &c;
  }
  return nullptr;
}

std::string operand_type(const AgGemmArguments& a) {
  return fp8(a) ? std::string("e4m3 with ") + to_string(a.scaling) + " scaling" : "bf16";
}

// bf16 with a_source at world 1: the GEMM reads the shard where it is -- it is all of A, and no
// peer reads it -- so nothing is copied.
bool gemm_reads_source(const World& world, const AgGemmArguments& a) {
  return !fp8(a) && !a.a_source.empty() && world.size() == 1;
}

// bf16 with a_source at world > 1: the all-gather copies each rank's shard into its own rows
// (AllGatherArguments::own_rows). FP8's a_source is quantised into them before the call instead.
bool copies_source(const World& world, const AgGemmArguments& a) {
  return !fp8(a) && !a.a_source.empty() && world.size() > 1;
}

AllGatherArguments all_gather_arguments(const World& world, const AgGemmArguments& a) {
  AllGatherArguments ag = all_gather_policy::all_gather_arguments_bytes(world, a.a, a.a_offset, a.m_per_rank,
                                                                        a_row_bytes(a), a.config.comm);
  if (copies_source(world, a)) ag.own_rows = a.a_source;
  return ag;
}

// "" if the FP8 operands (or their absence for bf16) suit `a`, else why not.
std::string check_fp8_operands(const World& world, const AgGemmArguments& a) {
  detail::Fp8OperandArgs f =
      detail::fp8_operand_args(a, "m_per_rank x K",
                               "quantising on send needs row or block scaling (tensor scaling's one scale covers "
                               "every rank's shard: quantise with tensor_scale_e4m3 over the whole A before the call)");
  f.bf16_source = true;  // bf16: the shard the all-gather copies in as it sends
  return detail::check_fp8_operands(world, f);
}

int gemm_sm_count(const World& world, int rank, const AgGemmArguments& a, uint32_t comm_blocks) {
  return all_gather_policy::gemm_sm_count(world.sm_budget(rank), world.size(), comm_blocks, a.config.gemm_sms);
}

// With config.kernel automatic: the split-tail twin of `kernel` (the same tiles and cluster, the
// last, partial wave cut along K over the CTAs it would leave idle) where the fused GEMM's grid on
// `sm_count` SMs leaves a tail that splits, else `kernel`. Measured (docs/PERF.md, twenty-second
// session): the paper's 8192 x 14336 x 4096 (27.15 waves) from 0.960 to 0.975 of cuBLAS.
const detail::Sm90AgGemmConfigInfo* with_split_tail(const AgGemmArguments& a, const detail::Sm90AgGemmConfigInfo* kernel,
                                                    uint32_t m, uint32_t swizzle, int sm_count) {
  if (!a.config.kernel.empty() || kernel->tail_splits != nullptr) return kernel;
  detail::Sm90AgGemmProblem p;
  p.m = m;
  p.n = a.n;
  p.k = a.k;
  p.lda = a_lda(a);
  p.sm_count = sm_count;
  p.swizzle = static_cast<int>(swizzle);
  for (const detail::Sm90AgGemmConfigInfo& c : detail::sm90_ag_gemm_configs()) {
    const bool twin = c.tail_splits != nullptr && serves(c, a) && c.tile_m == kernel->tile_m &&
                      c.tile_n == kernel->tile_n && c.tile_k == kernel->tile_k && c.cluster_m == kernel->cluster_m &&
                      c.cluster_n == kernel->cluster_n;
    if (twin && c.can_implement(p).empty() && c.tail_splits(p) > 1) return &c;
  }
  return kernel;
}

uint32_t choose_swizzle(const AgGemmArguments& a, const detail::Sm90AgGemmConfigInfo& kernel, uint64_t l2_share) {
  return ag_gemm_policy::auto_swizzle(a.config.swizzle, kernel.tile_m * kernel.cluster_m, a.m_per_rank,
                                      a_row_bytes(a), l2_share);
}

}  // namespace

const char* to_string(BLayout v) { return v == BLayout::kNK ? "nk" : "kn"; }

std::vector<std::string> AgGemm::kernel_names() { return kernel_names(DType::kBf16); }

std::vector<std::string> AgGemm::kernel_names(DType dtype, Fp8Scaling scaling) {
  AgGemmArguments a;
  a.dtype = dtype;
  a.scaling = scaling;
  std::vector<std::string> names;
  for (const detail::Sm90AgGemmConfigInfo& c : detail::sm90_ag_gemm_configs()) {
    if (serves(c, a)) names.emplace_back(c.name);
  }
  return names;
}

std::string AgGemm::can_implement(const World& world, const SymmetricHeap& heap, const AgGemmArguments& a) {
  if (a.b_layout != BLayout::kNK) {
    return std::string("argument 'b_layout' = ") + to_string(a.b_layout) +
           ": expected 'nk' (B as N x K row-major, K contiguous; transpose a K x N weight once at load time)";
  }
  if (a.m_per_rank == 0) return "argument 'm_per_rank' = 0: expected at least one row";
  if (static_cast<uint32_t>(a.config.method) > static_cast<uint32_t>(OpMethod::kNonOverlapped)) {
    return "argument 'config.method' = " + std::to_string(static_cast<uint32_t>(a.config.method)) +
           ": expected auto, fused, decomposed or non_overlapped";
  }
  const uint64_t m = uint64_t(a.m_per_rank) * world.size();
  if (m > 0x7FFFFFFFull) {
    return "argument 'm_per_rank' = " + std::to_string(a.m_per_rank) + ": expected world * m_per_rank below 2^31";
  }
  if (std::string e = check_rank_pointers(world, a.b, "b"); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, a.c, "c"); !e.empty()) return e;
  if (std::string e = check_fp8_operands(world, a); !e.empty()) return e;
  const detail::Sm90AgGemmConfigInfo* kernel = find_kernel(a);
  if (kernel == nullptr) return detail::unknown_config(detail::sm90_ag_gemm_configs(), a.config.kernel);
  if (!serves(*kernel, a)) {
    return "argument 'config.kernel' = '" + a.config.kernel + "': a " +
           (kernel->dtype == DType::kE4m3 ? std::string("e4m3 ") + to_string(kernel->scaling) + "-scaled" : "bf16") +
           " configuration; expected one for " + operand_type(a) + " operands (AgGemm::kernel_names())";
  }
  // Extents, alignment and swizzle first: the sizes checked next depend on them. The SM count is
  // checked per rank below, with the all-gather's share named.
  detail::Sm90AgGemmProblem p;
  p.m = static_cast<uint32_t>(m);
  p.n = a.n;
  p.k = a.k;
  p.lda = a_lda(a);
  p.sm_count = static_cast<int>(kernel->cluster_m * kernel->cluster_n);
  p.swizzle = static_cast<int>(choose_swizzle(a, *kernel, uint64_t(1) << 40));
  if (std::string e = kernel->can_implement(p); !e.empty()) return e;
  if (std::string e = check_symmetric(world, heap, a.a, a.a_offset, m * a_row_bytes(a), "a"); !e.empty()) {
    return e;
  }
  const AllGatherArguments ag = all_gather_arguments(world, a);
  if (std::string e = AllGather::can_implement(world, heap, ag); !e.empty()) return e;

  const uint32_t comm_blocks = ag.config.resource == CommResource::kSm ? ag.config.num_blocks : 0;
  const int cluster = p.sm_count;
  // The knob that set the GEMM's share: its own count, else the SM all-gather's blocks.
  const std::string knob = a.config.gemm_sms != 0 ? "argument 'config.gemm_sms' = " + std::to_string(a.config.gemm_sms)
                                                  : "argument 'config.comm.num_blocks' = " + std::to_string(comm_blocks);
  int waiting = 0;
  for (int r = 0; r < world.size(); ++r) {
    const int sms = gemm_sm_count(world, r, a, comm_blocks);
    if (sms < cluster) {
      return knob + ": rank " + std::to_string(r) + " has " + std::to_string(world.sm_budget(r)) + " SMs, " +
             std::to_string(comm_blocks) + " taken by the all-gather, leaving " + std::to_string(std::max(sms, 0)) +
             "; expected at least one " + std::to_string(cluster) + "-CTA cluster for the GEMM";
    }
    waiting += sms;
    if (std::string e = all_gather_policy::check_own_rows_room(world, ag.config, !ag.own_rows.empty(), r, sms);
        !e.empty()) {
      return knob + ": " + e;
    }
  }
  if (std::string e = all_gather_policy::check_copy_engine_room(world, ag.config, waiting); !e.empty()) {
    return knob + ": " + e;
  }
  return "";
}

TuneKey ag_gemm_tune_key(const World& world, const AgGemmArguments& a) {
  // FP8 entries are their own: another kernel table, another rate.
  const std::string op = fp8(a) ? std::string("ag_gemm.e4m3.") + to_string(a.scaling) : std::string("ag_gemm");
  return make_tune_key(world, op, a.m_per_rank * static_cast<uint32_t>(world.size()), a.n, a.k);
}

AgGemm::AgGemm(const World& world, SymmetricHeap& heap, SignalSet& signals, const AgGemmArguments& args,
               const std::string& name)
    : world_(&world), args_(args) {
  if (std::string why = can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("AgGemm '" + name + "': " + why);
  }
  // With every knob on automatic, the tune cache's configuration for this GPU, world and shape
  // (its method too, unless the caller chose one).
  args_ = detail::with_tuned_config<AgGemm>(
      world, heap, args, [&] { return ag_gemm_tune_key(world, args); },
      [](auto& tuned, const auto& callers) {
        if (callers.method != OpMethod::kAuto) tuned.method = callers.method;
      },
      &tuned_from_);
  kernel_info_ = find_kernel(args_);
  row_bytes_ = a_row_bytes(args_);
  swizzle_ = choose_swizzle(args_, *kernel_info_, world.l2_share(0));
  m_ = args_.m_per_rank * static_cast<uint32_t>(world.size());
  ag_ = std::make_unique<AllGather>(world, heap, signals, all_gather_arguments(world, args_), name);
  {
    const uint32_t comm_blocks = args_.config.comm.resource == CommResource::kSm ? ag_->num_blocks() : 0;
    kernel_info_ = with_split_tail(args_, kernel_info_, m_, swizzle_,
                                   gemm_sm_count(world, world.tightest_rank(), args_, comm_blocks));
  }
  const detail::Sm90AgGemmConfigInfo& kernel = *kernel_info_;
  kernel_name_ = kernel.name;
  choose_method(args.config.method, kernel);

  const uint32_t m_tiles = (m_ + kernel.tile_m - 1) / kernel.tile_m;
  m_order_host_.resize(static_cast<size_t>(world.size()));
  m_order_.resize(static_cast<size_t>(world.size()));
  workspaces_.resize(static_cast<size_t>(world.size()));
  for (int r : world.local_ranks()) {
    std::vector<uint32_t> order(m_tiles);
    make_m_order(ag_->plan(), static_cast<uint32_t>(r), kernel.tile_m, order.data());
    DeviceBuffer table(m_tiles * sizeof(uint32_t), world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(table.get(), order.data(), table.bytes(), cudaMemcpyHostToDevice));
    m_order_host_[static_cast<size_t>(r)] = std::move(order);
    m_order_[static_cast<size_t>(r)] = std::move(table);
    if (method_ == OpMethod::kDecomposed) {  // a shard's GEMM visits its own tile rows in order
      const uint32_t shard_tiles = (args_.m_per_rank + kernel.tile_m - 1) / kernel.tile_m;
      std::vector<uint32_t> identity(shard_tiles);
      for (uint32_t t = 0; t < shard_tiles; ++t) identity[t] = t;
      DeviceBuffer shard_table(shard_tiles * sizeof(uint32_t), world.device(r));
      TL_CUDA_CHECK(cudaMemcpy(shard_table.get(), identity.data(), shard_table.bytes(), cudaMemcpyHostToDevice));
      shard_order_.resize(static_cast<size_t>(world.size()));
      shard_order_[static_cast<size_t>(r)] = std::move(shard_table);
      // The shards in the order the rank's all-gather lands them (mesh, ring, pull or push).
      std::vector<uint32_t> by_arrival(static_cast<size_t>(world.size()));
      for (uint32_t s = 0; s < by_arrival.size(); ++s) by_arrival[s] = s;
      std::stable_sort(by_arrival.begin(), by_arrival.end(), [&](uint32_t x, uint32_t y) {
        return arrival_step(ag_->plan(), static_cast<uint32_t>(r), x * args_.m_per_rank, args_.m_per_rank) <
               arrival_step(ag_->plan(), static_cast<uint32_t>(r), y * args_.m_per_rank, args_.m_per_rank);
      });
      shard_arrival_.resize(static_cast<size_t>(world.size()));
      shard_arrival_[static_cast<size_t>(r)] = std::move(by_arrival);
    }
    make_kernels(r);
  }
}

void AgGemm::choose_method(OpMethod callers, const detail::Sm90AgGemmConfigInfo& kernel) {
  const World& world = *world_;
  ag_gemm_policy::MethodShape s;
  s.world = static_cast<uint32_t>(world.size());
  s.m_per_rank = args_.m_per_rank;
  s.n = args_.n;
  s.k = args_.k;
  s.tile_m = kernel.tile_m;
  s.tile_n = kernel.tile_n;
  s.row_bytes = row_bytes_;
  s.fp8 = fp8(args_);
  const uint32_t comm_blocks = args_.config.comm.resource == CommResource::kSm ? ag_->num_blocks() : 0;
  const int r0 = world.tightest_rank();  // alike in every process
  s.gemm_sms = gemm_sm_count(world, r0, args_, comm_blocks);
  s.budget = args_.config.gemm_sms != 0 ? std::min(world.sm_budget(r0), static_cast<int>(args_.config.gemm_sms))
                                        : world.sm_budget(r0);
  s.one_rank_per_gpu = world.mode() != WorldMode::kVirtual;
  estimates_ = ag_gemm_policy::estimate_methods(s);
  method_ = ag_gemm_policy::choose_method(args_.config.method, estimates_);
  auto us = [](double t) { return std::to_string(static_cast<long long>(t * 1e6 + 0.5)); };
  const std::string estimates = "fused " + us(estimates_.fused) + " us, decomposed " + us(estimates_.decomposed) +
                                " us, non-overlapped " + us(estimates_.non_overlapped) + " us";
  if (callers != OpMethod::kAuto) {
    method_why_ = "configured";
  } else if (args_.config.method != OpMethod::kAuto) {
    method_why_ = "the tune cache's measured winner (" + tuned_from_ + ")";
  } else {
    method_why_ = "the estimate's fastest (" + estimates + ")";
  }
}

void AgGemm::make_kernels(int r) {
  const detail::Sm90AgGemmConfigInfo& kernel = *kernel_info_;
  const World& world = *world_;
  const uint32_t comm_blocks = args_.config.comm.resource == CommResource::kSm ? ag_->num_blocks() : 0;
  detail::Sm90AgGemmProblem p;
  p.a = gemm_reads_source(world, args_) ? args_.a_source[static_cast<size_t>(r)]
                                        : static_cast<const char*>(args_.a->data(r)) + args_.a_offset;
  p.lda = a_lda(args_);
  p.b = args_.b[static_cast<size_t>(r)];
  if (fp8(args_)) {
    p.b_scale = args_.b_scale[static_cast<size_t>(r)];
    if (args_.scaling == Fp8Scaling::kTensor) p.a_scale = args_.a_scale[static_cast<size_t>(r)];
  }
  p.c = args_.c[static_cast<size_t>(r)];
  p.m = m_;
  p.n = args_.n;
  p.k = args_.k;
  p.m_order = m_order_[static_cast<size_t>(r)].get<uint32_t>();
  p.plan = ag_->plan();
  p.sig = ag_->signals().device_view(r, std::string("sm90_ag_gemm_") + kernel.name);
  p.device = world.device(r);
  p.sm_count = gemm_sm_count(world, r, args_, comm_blocks);
  p.swizzle = static_cast<int>(swizzle_);
  p.workspaces = &workspaces_[static_cast<size_t>(r)];  // every kernel of the rank runs on its compute stream
  // The other methods' kernels first, into locals: a throw leaves the rank's kernels as they were.
  std::vector<std::unique_ptr<detail::Sm90AgGemmKernel>> shards;
  std::unique_ptr<detail::Sm90AgGemmKernel> whole;
  if (method_ == OpMethod::kDecomposed) {  // a plain GEMM per shard: its rows of A and of C
    for (int s = 0; s < world.size(); ++s) {
      detail::Sm90AgGemmProblem q = p;
      q.a = static_cast<const char*>(p.a) + uint64_t(s) * args_.m_per_rank * row_bytes_;
      q.c = static_cast<char*>(p.c) + uint64_t(s) * args_.m_per_rank * args_.n * kElementBytes;
      q.m = args_.m_per_rank;
      q.m_order = shard_order_[static_cast<size_t>(r)].get<uint32_t>();
      q.wait = false;
      shards.push_back(kernel.make(q));
    }
  } else if (method_ == OpMethod::kNonOverlapped) {  // nothing runs beside it: the whole budget
    detail::Sm90AgGemmProblem q = p;
    q.wait = false;
    q.sm_count = args_.config.gemm_sms != 0 ? std::min(world.sm_budget(r), static_cast<int>(args_.config.gemm_sms))
                                            : world.sm_budget(r);
    whole = kernel.make(q);
  }
  detail::make_fused_and_plain(kernel, p, kernels_, plain_kernels_, r);
  if (trace_ != nullptr) kernels_[static_cast<size_t>(r)]->set_trace(trace_->view(r));
  shard_kernels_.resize(static_cast<size_t>(world.size()));
  shard_kernels_[static_cast<size_t>(r)] = std::move(shards);
  whole_kernels_.resize(static_cast<size_t>(world.size()));
  whole_kernels_[static_cast<size_t>(r)] = std::move(whole);
}

void AgGemm::set_operands(int rank, const void* b, void* c) {
  if (!fp8(args_) && !args_.a_source.empty()) {  // FP8: the overload below says which one it takes
    throw InvalidArgument("AgGemm::set_operands: this op was built with a_source; expected the overload that takes "
                          "the rank's shard");
  }
  set_operands(rank, b, c, nullptr);
}

void AgGemm::set_operands(int rank, const void* b, void* c, const void* a_source) {
  constexpr const char* where = "AgGemm::set_operands";
  if (fp8(args_)) {
    throw InvalidArgument(std::string(where) + ": this op's operands are e4m3; pass B's scales (and the bf16 shard "
                          "when quantising on send) with the FP8 overload");
  }
  world_->check_local_rank(rank, where);
  require_aligned(where, "b", b, "a 16-byte aligned N x K bf16 weight on the rank's device");
  require_aligned(where, "c", c, "a 16-byte aligned M x N bf16 output on the rank's device");
  detail::require_as_built(where, "a_source", !args_.a_source.empty(), a_source, "the rank's bf16 shard");
  const size_t r = static_cast<size_t>(rank);
  // The all-gather reads the shard's address at each call; only a GEMM that reads it (world 1)
  // holds it in its descriptors.
  const bool source_in_kernels = gemm_reads_source(*world_, args_) && args_.a_source[r] != a_source;
  if (args_.b[r] != b || args_.c[r] != c || source_in_kernels) {
    detail::repoint(
        args_,
        [&](AgGemmArguments& a) {
          a.b[r] = b;
          a.c[r] = c;
          if (a_source != nullptr) a.a_source[r] = a_source;
        },
        [&] { make_kernels(rank); });  // every kernel of the rank or none
  } else if (a_source != nullptr) {
    args_.a_source[r] = a_source;
  }
  if (a_source != nullptr && ag_->has_own_rows()) ag_->set_own_rows(rank, a_source);
}

void AgGemm::set_operands(int rank, const void* b, const float* b_scale, void* c, const void* a_source) {
  const char* where = "AgGemm::set_operands";
  if (!fp8(args_)) throw InvalidArgument(std::string(where) + ": this op's operands are bf16; expected the bf16 overload");
  world_->check_local_rank(rank, where);
  require_aligned(where, "b", b, "a 16-byte aligned N x K e4m3 weight on the rank's device");
  require_aligned(where, "b_scale", b_scale, "B's 16-byte aligned fp32 scales on the rank's device");
  require_aligned(where, "c", c, "a 16-byte aligned M x N bf16 output on the rank's device");
  const size_t r = static_cast<size_t>(rank);
  detail::require_as_built(where, "a_source", !args_.a_source.empty(), a_source,
                           "the rank's bf16 shard, which the op quantises on send");
  if (args_.b[r] == b && args_.b_scale[r] == b_scale && args_.c[r] == c) {
    if (a_source != nullptr) args_.a_source[r] = a_source;  // read by the host at each call
    return;
  }
  detail::repoint(
      args_,
      [&](AgGemmArguments& a) {
        a.b[r] = b;
        a.b_scale[r] = b_scale;
        a.c[r] = c;
        if (a_source != nullptr) a.a_source[r] = a_source;
      },
      [&] { make_kernels(rank); });
}

// Quantise on send: every local rank's bf16 shard into its own packed rows, on its compute stream
// (the previous call's readers of those rows are done: each call ends with the compute stream
// after the exit barrier), before anything of this call.
void AgGemm::quantize_own_rows() {
  if (!fp8(args_) || args_.a_source.empty()) return;
  const World& world = *world_;
  for (int r : world.local_ranks()) {
    world.set_device(r);
    char* own = static_cast<char*>(args_.a->data(r)) + args_.a_offset + uint64_t(r) * args_.m_per_rank * row_bytes_;
    quantize_rows_e4m3(args_.a_source[static_cast<size_t>(r)], args_.k, args_.m_per_rank, args_.k, args_.scaling,
                       nullptr, own, world.compute_stream(r));
  }
}

AgGemm::~AgGemm() = default;

int AgGemm::gemm_ctas(int rank) const {
  world_->check_local_rank(rank, "AgGemm::gemm_ctas");
  return kernels_[static_cast<size_t>(rank)]->ctas();
}

uint64_t AgGemm::run() {
  quantize_own_rows();
  if (method_ == OpMethod::kNonOverlapped) return run_non_overlapped();
  if (method_ == OpMethod::kDecomposed) return run_decomposed();
  // With the copy engine the GEMM goes first, so that it is running while the host still enqueues
  // the all-gather (one copy and one memop per communication tile), except the copies of the rank's
  // own rows from a_source, which need SMs (AllGather::announce_first); the SM path's kernel goes
  // before it (AllGather::producer_first).
  return ag_->run_under([&](int r, uint64_t epoch) {
    kernels_[static_cast<size_t>(r)]->run(epoch, world_->compute_stream(r));
  });
}

uint64_t AgGemm::run_non_overlapped() {
  const World& world = *world_;
  const uint64_t epoch = ag_->run();  // ordered after the previous call's GEMMs
  for (int r : world.local_ranks()) {
    world.compute_after_comm(r);  // all of A, and the peers done reading this rank's rows
    whole_kernels_[static_cast<size_t>(r)]->run(0, world.compute_stream(r));
  }
  return epoch;
}

uint64_t AgGemm::run_decomposed() {
  const World& world = *world_;
  const uint64_t epoch = ag_->begin_call();
  // Every rank's announcement, then every rank's transfer, before any stream waits on a shard
  // (a stream left waiting on work the host has not enqueued yet: AllGather::announce).
  for (int r : world.local_ranks()) {
    world.comm_after_compute(r);
    ag_->announce(r);
  }
  for (int r : world.local_ranks()) ag_->transfer(r);
  for (int r : world.local_ranks()) {
    world.set_device(r);
    const cudaStream_t compute = world.compute_stream(r);
    const SignalView sig = ag_->signals().host_view(r);
    for (uint32_t s : shard_arrival_[static_cast<size_t>(r)]) {  // the own shard first, then as they land
      if (s != static_cast<uint32_t>(r) || ag_->has_own_rows()) {  // own rows copied in by the call: theirs too
        const ChannelRange ch = ag_->plan().consumer_channels(s * args_.m_per_rank, args_.m_per_rank);
        for (uint32_t c = ch.first; c < ch.first + ch.count; ++c) rank_wait(compute, sig, c);
      }
      shard_kernels_[static_cast<size_t>(r)][s]->run(0, compute);
    }
    world.compute_after_comm(r);  // the exit barrier: peers done reading this rank's rows
  }
  return epoch;
}

void AgGemm::set_trace(const TraceBuffer* trace) {
  trace_ = trace;
  for (int r : world_->local_ranks()) {
    kernels_[static_cast<size_t>(r)]->set_trace(trace != nullptr ? trace->view(r) : TraceView{});
  }
  ag_->set_trace(trace);
}

void AgGemm::run_gemm_only() {
  const World& world = *world_;
  for (int r : world.local_ranks()) {
    world.set_device(r);
    plain_kernels_[static_cast<size_t>(r)]->run(0, world.compute_stream(r));
  }
}

}  // namespace tilelink
