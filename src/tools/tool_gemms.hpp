// What the ops built from the GEMMs (tool_mlp.cpp: fc1 is an AG+GEMM, fc2 a GEMM+RS) borrow from
// the GEMMs' tool files, tool_ag_gemm.cpp and tool_gemm_rs.cpp.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bench/ag_gemm.hpp"
#include "bench/gemm_rs.hpp"
#include "bench/report.hpp"
#include "tools/models.hpp"
#include "tools/options.hpp"
#include "tools/tune_runner.hpp"

namespace tilelink::tool {

// A plan across nodes is for what runs there: a process world spanning nodes takes the put_signal
// transport (WorldOptions::transport auto), under which GEMM+RS scatters with the copy engine. With
// nodes > 1, `op` takes the ce scatter and tile-row signals where the command line (`app`'s
// --scatter, --granularity) did not set them, and the returned note says so ("" otherwise). A
// scatter set to another is left for the model to refuse by name.
std::string gemm_rs_across_nodes(GemmRsConfig& op, int nodes, const CLI::App& app);

// The plan's closing lines for a GEMM+RS (`who`: "op", "fc2"): the method auto takes by the op's
// estimate and, bf16, the engine (owner_tiles or small_m) with both estimates, for `world` ranks on
// m x n x k_local at `cost`'s rates. Predictions, and said to be.
void print_gemm_rs_auto(int world, int nodes, uint32_t m, uint32_t n, uint32_t k_local, GemmRsReducer reducer,
                        uint32_t reduce_ctas, GemmRsPushNotify push_notify, DType dtype, const sim::CostModel& cost,
                        const std::string& who);

// --push-notify deferred|immediate (GemmRsConfig::push_notify); `what` prefixes the help ("fc2: ").
void add_push_notify(CLI::App* app, GemmRsPushNotify& notify, const std::string& what = "");

// The plan's other placements of GEMM+RS's sums beside the one it ran (`ran`: its resolved scatter
// and reducer), when the reducer was left on auto and they can run (more than one rank, a signal
// per tile, not the copy engine): blocks and epilogue, each with the configured scatter or, on
// auto, pull and push. `predict(op)` times `op` (the configuration with that placement); each
// comes back labelled "<prefix><scatter>, reducer <reducer>".
template <class Predict>
std::vector<std::pair<std::string, double>> other_gemm_rs_placements(const GemmRsConfig& op, GemmRsScatter ran_scatter,
                                                                     GemmRsReducer ran_reducer, int world,
                                                                     const std::string& prefix, Predict&& predict) {
  std::vector<std::pair<std::string, double>> out;
  if (op.reducer != GemmRsReducer::kAuto || world <= 1 || op.granularity != SignalGranularity::kTile ||
      ran_scatter == GemmRsScatter::kCopyEngine) {
    return out;
  }
  for (GemmRsReducer reducer : {GemmRsReducer::kBlocks, GemmRsReducer::kEpilogue}) {
    for (GemmRsScatter scatter : {GemmRsScatter::kPull, GemmRsScatter::kEpiloguePush}) {
      if (op.scatter != GemmRsScatter::kAuto && scatter != op.scatter) continue;
      if (reducer == ran_reducer && scatter == ran_scatter) continue;  // the row the plan ran
      GemmRsConfig other = op;
      other.reducer = reducer;
      other.scatter = scatter;
      if (reducer == GemmRsReducer::kEpilogue) other.reduce_blocks = 0;
      out.push_back({prefix + to_string(scatter) + ", reducer " + to_string(reducer), predict(other)});
    }
  }
  return out;
}

// tune ag_gemm's and tune gemm_rs's dry runs: the candidates with the plan model's predictions for
// `shapes` (as their commands take them).
int dry_run_ag_gemm(const TuneSearch& search, int world, const std::vector<Mnk>& shapes, DType dtype = DType::kBf16,
                    Fp8Scaling scaling = Fp8Scaling::kRow);
int dry_run_gemm_rs(const TuneSearch& search, int world, const std::vector<Mnk>& shapes, DType dtype = DType::kBf16,
                    Fp8Scaling scaling = Fp8Scaling::kRow);

// `tilelink tune ag_gemm`: the two-stage search (tune/ag_gemm_tune.hpp), one progress line per
// configuration on `progress`; returns the tuned configuration against the automatic one.
tb::Table tune_ag_gemm(const TuneOptions<tb::AgGemmBenchOptions>& options, std::ostream& progress);
// `tilelink tune gemm_rs`: the two-stage search (tune/gemm_rs_tune.hpp), as tune_ag_gemm.
tb::Table tune_gemm_rs(const TuneOptions<tb::GemmRsBenchOptions>& options, std::ostream& progress);

}  // namespace tilelink::tool
