#include "tilelink/tune/moe_tune.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"
#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/ops/common/all_gather_config.hpp"
#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/sim/moe_sim.hpp"
#include "tune/model_config.hpp"

namespace tilelink {
namespace {

constexpr const char* kWhere = "moe tune";
constexpr uint32_t kCluster = 2;  // the grouped GEMM's clusters (both compiled kernels: c1x2)

void tile_of(const std::string& kernel, const std::vector<std::string>& kernels, uint32_t* bm, uint32_t* bn) {
  TL_REQUIRE(!kernels.empty(), kWhere, "kernels", kernels.size(), "at least one kernel name");
  detail::kernel_tile(kernel.empty() ? kernels.front() : kernel, kWhere, bm, bn);
}

// Part 1's model configuration: the op's automatic choices resolved as the op resolves them.
sim::MoeAgPlanConfig part1_of(const MoeLayerConfig& c, const MoeTuneShape& s) {
  sim::MoeAgPlanConfig q;
  tile_of(c.part1.kernel, s.kernels, &q.bm, &q.bn);
  q.op = c.part1;
  const sim::MoeProblem& p = s.problem;
  q.op.comm = all_gather_policy::resolved(c.part1.comm, p.m / static_cast<uint32_t>(p.world), p.hidden, s.sm_budget);
  q.cluster = kCluster;
  return q;
}

sim::MoeRsPlanConfig part2_of(const MoeLayerConfig& c, const MoeTuneShape& s) {
  sim::MoeRsPlanConfig q;
  tile_of(c.part2.kernel, s.kernels, &q.bm, &q.bn);
  q.op = c.part2;
  q.op.comm_rows = moe_policy::combine_rows(c.part2.comm_rows, s.problem.topk);
  q.op.combine_blocks =
      c.part2.combine_blocks == 0 ? 0 : (c.part2.combine_blocks + kCluster - 1) / kCluster * kCluster;
  q.cluster = kCluster;
  return q;
}

// True when two configurations have the same stage-3 knobs.
bool same_moe_comm(const MoeLayerConfig& a, const MoeLayerConfig& b) {
  return same_comm(a.part1.comm, b.part1.comm) && a.part1.gather_blocks == b.part1.gather_blocks &&
         a.part2.comm_rows == b.part2.comm_rows && a.part2.combine_blocks == b.part2.combine_blocks;
}

}  // namespace

std::vector<MoeLayerConfig> moe_kernel_candidates(const std::vector<std::string>& kernels) {
  TL_REQUIRE(!kernels.empty(), "moe_kernel_candidates", "kernels", kernels.size(), "at least one kernel name");
  MoeLayerConfig automatic;
  automatic.use_tune_cache = false;
  std::vector<MoeLayerConfig> out{automatic};
  for (size_t i = 0; i < kernels.size(); ++i) {
    for (size_t j = 0; j < kernels.size(); ++j) {
      if (i == 0 && j == 0) continue;  // the defaults: the automatic configuration, already first
      uint32_t bm1 = 0, bn1 = 0, bm2 = 0, bn2 = 0;
      detail::kernel_tile(kernels[i], "moe_kernel_candidates", &bm1, &bn1);
      detail::kernel_tile(kernels[j], "moe_kernel_candidates", &bm2, &bn2);
      if (bm1 != bm2) continue;  // the parts share the mapping's tile rows
      MoeLayerConfig c = automatic;
      c.part1.kernel = i == 0 ? "" : kernels[i];
      c.part2.kernel = j == 0 ? "" : kernels[j];
      out.push_back(c);
    }
  }
  // The parts' non-overlapped methods (issue 21), timed like any candidate: where one wins, the
  // cache stores it and the layer's automatic methods run it.
  for (const auto& [m1, m2] : {std::pair{OpMethod::kNonOverlapped, OpMethod::kFused},
                               std::pair{OpMethod::kFused, OpMethod::kNonOverlapped},
                               std::pair{OpMethod::kNonOverlapped, OpMethod::kNonOverlapped}}) {
    MoeLayerConfig c = automatic;
    c.part1.method = m1;
    c.part2.method = m2;
    out.push_back(c);
  }
  // Part 2's combine placed both ways (automatic takes the epilogue with peers, the blocks for one
  // rank: moe_policy::combine), so the tune cache can overrule the rule either way.
  for (MoeCombine combine : {MoeCombine::kEpilogue, MoeCombine::kBlocks}) {
    MoeLayerConfig c = automatic;
    c.part2.combine = combine;
    out.push_back(c);
  }
  return out;
}

std::vector<MoeLayerConfig> moe_order_candidates(const MoeLayerConfig& base) {
  std::vector<MoeLayerConfig> out;
  for (uint32_t swizzle1 : {0u, 1u, 8u}) {  // automatic, row by row, bands of 8 rows
    for (uint32_t swizzle2 : {0u, 1u, 8u}) {
      for (uint32_t sweeps : {0u, MoeGemmRsConfig::kTokenOrder, 2u, 4u, 8u}) {
        MoeLayerConfig c = base;
        c.part1.swizzle = swizzle1;
        c.part2.swizzle = swizzle2;
        c.part2.weight_sweeps = sweeps;
        if (c.part1.swizzle == base.part1.swizzle && c.part2.swizzle == base.part2.swizzle &&
            c.part2.weight_sweeps == base.part2.weight_sweeps) {
          continue;  // `base` itself, timed already
        }
        out.push_back(c);
      }
    }
  }
  return out;
}

std::vector<RankedMoeConfig> moe_comm_candidates(const MoeLayerConfig& base, const MoeTuneShape& shape, size_t top,
                                                 const sim::CostModel& gpu) {
  TL_REQUIRE(top >= 1, "moe_comm_candidates", "top", top, ">= 1");
  const sim::MoeProblem& problem = shape.problem;
  TL_REQUIRE(problem.world >= 1 && problem.m % static_cast<uint32_t>(problem.world) == 0, "moe_comm_candidates",
             "m", problem.m, "a multiple of the world size");
  const sim::CostModel cost = gpu.share(shape.sm_budget);
  const bool swiglu = shape.activation == MlpActivation::kSwiGlu;
  sim::MoeProblem problem1 = problem;
  if (swiglu) problem1.intermediate *= 2;
  const uint32_t tokens_per_rank = problem.m / static_cast<uint32_t>(problem.world);

  MoeLayerConfig automatic = base;
  const MoeLayerConfig defaults;
  automatic.part1.comm = defaults.part1.comm;
  automatic.part1.gather_blocks = defaults.part1.gather_blocks;
  automatic.part2.comm_rows = defaults.part2.comm_rows;
  automatic.part2.combine_blocks = defaults.part2.combine_blocks;

  // The layer's time is part 1's + the activation's + part 2's, and the knobs of stage 3 move
  // the parts independently: rank each part's variants, then every pair by the sum.
  struct Part1 {
    AllGatherConfig comm;
    uint32_t gather_blocks;
    double us;
  };
  struct Part2 {
    uint32_t comm_rows, combine_blocks;
    double us;
  };
  std::vector<Part1> part1;
  auto add1 = [&](const AllGatherConfig& comm, uint32_t gather_blocks) {
    if (comm.comm_rows > tokens_per_rank) return;
    MoeLayerConfig c = automatic;
    c.part1.comm = comm;
    c.part1.gather_blocks = gather_blocks;
    part1.push_back({comm, gather_blocks, sim::predict_moe_ag(problem1, part1_of(c, shape), cost).fused * 1e6});
  };
  const uint32_t quarter = static_cast<uint32_t>(std::max(1, shape.sm_budget / 4));
  const uint32_t n1 = (swiglu ? 2 : 1) * problem.intermediate / static_cast<uint32_t>(problem.world);
  std::vector<uint32_t> gathers{0};
  for (uint32_t g : {1u, 2u, 4u, 8u}) {
    if (g <= quarter && g != moe_policy::gather_blocks(shape.sm_budget, n1)) gathers.push_back(g);
  }
  std::vector<AllGatherConfig> comms{defaults.part1.comm};
  if (problem.world > 1) {
    for (uint32_t rows : {256u, 512u, 1024u, 2048u}) {
      comms.push_back({CommResource::kCopyEngine, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, rows, 0, 512});
    }
    for (uint32_t rows : {128u, 256u, 512u}) {
      for (uint32_t blocks : {0u, quarter}) {
        comms.push_back({CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, rows, blocks, 512});
      }
    }
  }
  for (const AllGatherConfig& comm : comms) {
    for (uint32_t g : gathers) add1(comm, g);
  }

  std::vector<Part2> part2;
  const uint32_t k2 = problem.intermediate / static_cast<uint32_t>(problem.world);
  // The automatic count of the placement stage 2 kept (the epilogue's reduction: a CTA per SM).
  const bool epilogue = moe_policy::combine(automatic.part2.combine, problem.world, false,
                                            automatic.part2.method) == MoeCombine::kEpilogue;
  const uint32_t auto_combine = epilogue ? static_cast<uint32_t>(shape.sm_budget)
                                         : moe_policy::combine_blocks(shape.sm_budget, problem.topk, k2,
                                                                      problem.world, kCluster);
  for (uint32_t rows : {0u, 16u, 32u, 128u}) {
    if (rows != 0 && (rows * problem.topk > moe_policy::kCombineMaxPairs || rows > tokens_per_rank ||
                      rows == moe_policy::combine_rows(0, problem.topk))) {
      continue;
    }
    for (uint32_t blocks : {0u, 2u, 4u, 8u}) {
      if (blocks != 0 && (blocks > quarter || blocks == auto_combine)) continue;
      MoeLayerConfig c = automatic;
      c.part2.comm_rows = rows;
      c.part2.combine_blocks = blocks;
      part2.push_back({rows, blocks, sim::predict_moe_gemm_rs(problem, part2_of(c, shape), cost).fused * 1e6});
    }
  }
  // The activation between the parts, once (the same for every candidate).
  const sim::MoePrediction whole =
      sim::predict_moe_layer(problem, shape.activation, part1_of(automatic, shape), part2_of(automatic, shape), cost);
  // part1[0] and part2[0] are the automatic parts (the first of each list).
  const double act_us = whole.fused * 1e6 - part1.front().us - part2.front().us;

  std::vector<RankedMoeConfig> all;
  for (const Part1& a : part1) {
    for (const Part2& b : part2) {
      MoeLayerConfig c = base;
      c.part1.comm = a.comm;
      c.part1.gather_blocks = a.gather_blocks;
      c.part2.comm_rows = b.comm_rows;
      c.part2.combine_blocks = b.combine_blocks;
      all.push_back({c, a.us + act_us + b.us});
    }
  }
  return detail::keep_top(std::move(all), top, {automatic, whole.fused * 1e6}, same_moe_comm);
}

}  // namespace tilelink
