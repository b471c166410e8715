#include "tilelink/sim/gemm_ar_sim.hpp"

#include <algorithm>

#include "tilelink/core/error.hpp"

namespace tilelink::sim {

GemmArRates gemm_ar_rates(const CostModel& cost, int world, int nodes, GemmArPath path) {
  GemmArRates r;
  r.flops = cost.flops;
  r.sms = cost.sms;
  r.hbm_bandwidth = cost.hbm_bandwidth;
  r.link_bandwidth = cost.nvlink_bandwidth;
  r.network_bandwidth = cost.network_bandwidth;
  r.cta_bandwidth = cost.sm_copy_bandwidth_per_cta;
  r.notify_latency = cost.notify_latency;
  // Peers on other nodes: (world - world / nodes) of the world - 1 peers.
  r.remote_fraction = world > 1 && nodes > 1 ? double(world - world / nodes) / double(world - 1) : 0.0;
  // The op's path: as configured, else -- the world's transport being put_signal across nodes
  // (auto) -- the copy-engine path there.
  r.copy_engine = path == GemmArPath::kCopyEngine || (path == GemmArPath::kAuto && nodes > 1);
  r.ce_bandwidth = cost.ce_bandwidth;
  r.ce_put_overhead = cost.ce_chunk_overhead;
  return r;
}

GemmArPrediction predict_gemm_ar(const GemmArProblem& p, const GemmArPlanConfig& c, const CostModel& cost) {
  constexpr const char* kWhere = "predict_gemm_ar";
  check_world(kWhere, p.world, p.nodes);
  check_split(kWhere, "k", p.k, p.world, "K is split evenly");
  TL_REQUIRE(p.m > 0, kWhere, "m", p.m, "> 0");
  TL_REQUIRE(p.n > 0 && p.n % 8 == 0, kWhere, "n", p.n, "a positive multiple of 8");
  check_across_nodes(kWhere, p.nodes, c.op.path != GemmArPath::kSm, "path", to_string(c.op.path),
                     "copy_engine or auto (the streams' puts)");
  const GemmArShape s{p.world, cost.sms, p.m, p.n, p.k / uint32_t(p.world), c.norm};
  const GemmArRates r = gemm_ar_rates(cost, p.world, p.nodes, c.op.path);
  GemmArPrediction out;
  out.weight_bytes = double(p.n) * s.k * 2.0;
  out.choice = gemm_ar_choice(s, c.op, r);
  TL_REQUIRE(out.choice.gemm_sms >= 1, kWhere, "reduce_blocks", c.op.reduce_blocks,
             "a count that leaves the GEMM an SM");
  auto forced = [&](GemmArSchedule schedule, AllReduceMethod method) {
    GemmArConfig f = c.op;
    f.schedule = schedule;
    if (method != AllReduceMethod::kAuto) f.method = method;
    return gemm_ar_choice(s, f, r).estimate;
  };
  out.fused_one_shot = forced(GemmArSchedule::kFused, AllReduceMethod::kOneShot);
  out.fused_two_shot = forced(GemmArSchedule::kFused, AllReduceMethod::kTwoShot);
  out.non_overlapped = forced(GemmArSchedule::kNonOverlapped, AllReduceMethod::kAuto);
  // The chain: cuBLAS (the longer of its FLOPs at the cost model's rate and the weight's and A's
  // bytes over HBM: measured 115.9 us at M = 1, n 8192, k 28672 on the H200 against 109 predicted),
  // then the faster all-reduce on every SM.
  out.t_gemm = std::max(2.0 * p.m * p.n * s.k / cost.flops, (double(p.n) + p.m) * s.k * 2.0 / cost.hbm_bandwidth);
  if (p.world > 1 || c.norm) {
    // Every SM, each tile cut into as many parts as a part per CTA allows.
    const gemm_ar_policy::Tile tile = gemm_ar_policy::gemm_tile(p.m);
    const uint32_t tiles = ((p.m + tile.m - 1) / tile.m) * ((p.n + tile.n - 1) / tile.n);
    const uint32_t ctas = uint32_t(s.sm_budget), parts = gemm_ar_policy::parts_for(ctas, tiles, tile.n);
    GemmArRates sm = r;  // the chain's all-reduce loads and stores (NCCL's, across nodes), not puts
    sm.copy_engine = false;
    out.t_ar = gemm_ar_policy::kReduceKernelTime +  // the chain launches its all-reduce too
               std::min(gemm_ar_policy::all_reduce_time(s, ArMethod::kOneShot, 1, ctas, parts, sm),
                        gemm_ar_policy::all_reduce_time(s, ArMethod::kTwoShot, 1, ctas, parts, sm));
  }
  out.chain = out.t_gemm + out.t_ar;
  out.ideal = std::max(out.t_gemm, out.t_ar);
  return out;
}

}  // namespace tilelink::sim
