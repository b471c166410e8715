#include "tilelink/tune/ag_gemm_tune.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"
#include "tune/model_config.hpp"

namespace tilelink {
namespace {

// The CTA tile of a kernel (the default kernel for the operands: "").
void kernel_tile(const std::string& kernel, const AgGemmTuneShape& s, uint32_t* bm, uint32_t* bn) {
  detail::kernel_tile(kernel.empty() ? AgGemm::kernel_names(s.dtype, s.scaling).front() : kernel, "ag_gemm tune", bm,
                      bn);
}

double predict_us(const AgGemmConfig& c, const AgGemmTuneShape& s, const sim::CostModel& gpu) {
  sim::AgGemmProblem p;
  p.world = s.world;
  p.m = s.m_per_rank * static_cast<uint32_t>(s.world);
  p.n = s.n * static_cast<uint32_t>(s.world);
  p.k = s.k;
  p.dtype = s.dtype;
  p.scaling = s.scaling;
  sim::AgGemmPlanConfig q;
  kernel_tile(c.kernel, s, &q.bm, &q.bn);
  q.op = c;
  q.op.comm = s.dtype == DType::kE4m3 ? all_gather_policy::resolved_bytes(c.comm, s.m_per_rank,
                                                                          fp8_row_pitch(s.k, s.scaling), s.sm_budget)
                                      : all_gather_policy::resolved(c.comm, s.m_per_rank, s.k, s.sm_budget);
  return sim::predict_ag_gemm(p, q, gpu.share(s.sm_budget)).fused * 1e6;
}

}  // namespace

std::vector<AgGemmConfig> ag_gemm_compute_candidates(const std::vector<std::string>& kernels) {
  std::vector<AgGemmConfig> out;
  AgGemmConfig automatic;
  automatic.use_tune_cache = false;
  out.push_back(automatic);
  for (size_t i = 0; i < kernels.size(); ++i) {
    AgGemmConfig c = automatic;
    c.kernel = i == 0 ? "" : kernels[i];
    detail::append_swizzles(out, c, i != 0);  // the first kernel's automatic swizzle: `automatic`, already first
  }
  // The op's other methods (issue 21), timed like any candidate: where one wins, the cache
  // stores it and AgGemm's automatic method runs it.
  for (OpMethod m : {OpMethod::kFused, OpMethod::kDecomposed, OpMethod::kNonOverlapped}) {
    AgGemmConfig c = automatic;
    c.method = m;
    out.push_back(c);
  }
  return out;
}

std::vector<RankedAgGemmConfig> ag_gemm_comm_candidates(const AgGemmConfig& base, const AgGemmTuneShape& shape,
                                                        size_t top, const sim::CostModel& gpu) {
  TL_REQUIRE(top >= 1, "ag_gemm_comm_candidates", "top", top, ">= 1");
  const RankedAgGemmConfig auto_ranked = detail::ranked_automatic(
      base, shape.world, [](AgGemmConfig& c) { c.comm = AgGemmConfig{}.comm; },
      [&](const AgGemmConfig& c) { return predict_us(c, shape, gpu); });
  if (shape.world == 1) return {auto_ranked};

  std::vector<RankedAgGemmConfig> all;
  auto add = [&](const AllGatherConfig& comm) {
    if (comm.comm_rows > shape.m_per_rank) return;
    AgGemmConfig c = base;
    c.comm = comm;
    all.push_back({c, predict_us(c, shape, gpu)});
  };
  for (uint32_t rows : {256u, 512u, 1024u, 2048u, 4096u}) {
    add({CommResource::kCopyEngine, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, rows, 0, 512});
  }
  const uint32_t more_blocks = static_cast<uint32_t>(std::max(2, shape.sm_budget / 4));
  for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
    for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
      for (DataPath path : {DataPath::kLdSt, DataPath::kBulk}) {
        for (uint32_t rows : {128u, 256u, 512u}) {
          for (uint32_t blocks : {0u, more_blocks}) add({CommResource::kSm, method, path, order, rows, blocks, 512});
        }
      }
    }
  }
  return detail::keep_top(std::move(all), top, auto_ranked, [](const AgGemmConfig& a, const AgGemmConfig& b) {
    return same_comm(a.comm, b.comm);
  });
}

}  // namespace tilelink
