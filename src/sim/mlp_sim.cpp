#include "tilelink/sim/mlp_sim.hpp"

#include <string>

#include "tilelink/core/error.hpp"

namespace tilelink::sim {

MlpPrediction predict_mlp(const MlpProblem& p, const MlpPlanConfig& c, const CostModel& cost) {
  const bool swiglu = p.activation == MlpActivation::kSwiGlu;
  check_world("predict_mlp", p.world, p.nodes);
  check_split("predict_mlp", "intermediate", p.intermediate, p.world, "the intermediate size is split evenly");
  const uint32_t fc1_cols = (swiglu ? 2 : 1) * p.intermediate;
  const AgGemmPrediction fc1 =
      predict_ag_gemm({p.m, fc1_cols, p.hidden, 2, p.world, p.nodes, p.dtype, p.scaling}, c.fc1, cost);
  const GemmRsPrediction fc2 =
      predict_gemm_rs({p.m, p.hidden, p.intermediate, 2, 2, p.world, p.nodes, p.dtype}, c.fc2, cost);

  MlpPrediction out;
  const double i_local = double(p.intermediate) / p.world;
  // The activation reads fc1's output and writes its own (bf16); FP8's fc2 reads that again and
  // writes it packed (about a byte per value).
  const double quantize = p.dtype == DType::kE4m3 ? i_local * (2 + 1) : 0.0;
  out.t_act = double(p.m) * ((swiglu ? 2 : 1) * i_local * 2 + i_local * 2 + quantize) / cost.hbm_bandwidth;
  out.fused = fc1.fused + out.t_act + fc2.fused;
  out.non_overlapped = fc1.non_overlapped + out.t_act + fc2.non_overlapped;
  out.decomposed = fc1.decomposed + out.t_act + fc2.decomposed;
  out.ideal = fc1.ideal + out.t_act + fc2.ideal;
  out.t_comp = fc1.t_comp + fc2.t_comp;
  out.t_comm = fc1.t_comm + fc2.t_comm;
  out.flop = fc1.flop + fc2.flop;
  out.fc2_reduce_ctas = fc2.reduce_ctas;
  out.fc2_scatter = fc2.scatter;
  out.fc2_reducer = fc2.reducer;
  for (const Interval& e : fc1.timeline) out.timeline.push_back({"fc1 " + e.lane, e.name, e.start, e.end});
  out.timeline.push_back({"activation", swiglu ? "SwiGLU" : "GELU", fc1.fused, fc1.fused + out.t_act});
  const double shift = fc1.fused + out.t_act;
  for (const Interval& e : fc2.timeline) out.timeline.push_back({"fc2 " + e.lane, e.name, shift + e.start, shift + e.end});
  return out;
}

}  // namespace tilelink::sim
