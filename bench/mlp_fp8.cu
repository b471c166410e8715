// The FP8 tensor-parallel MLP (bench mlp --dtype e4m3 --scaling tensor|row|block) against the same
// block in bf16, in one table:
//
//   tilelink fused, bf16           Mlp::run on the bf16 weights and tokens (the reference point)
//   tilelink fused, e4m3           Mlp::run with e4m3 weights: fc1 quantises each rank's tokens on
//                                  send (tensor scaling: the packed rows written beforehand), fc2
//                                  quantises the activation
//   tilelink non-overlapped, e4m3  both ops' non-overlapped paths
//   fc1 / fc2 alone, e4m3          each op's fused call by itself
//
// The FP8 paths' outputs are checked against each other (bf16 tolerance: the same math).
#include <cuda_bf16.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/mlp.hpp"
#include "bench/mlp_setup.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::bench {

Table bench_mlp_fp8(const MlpBenchOptions& o) {
  const char* where = "bench mlp (e4m3)";
  MlpSetup s(o.world, o.m, o.hidden, o.intermediate, o.config, o.seed, where, DType::kE4m3, o.scaling);
  const int w = o.world;
  World& world = s.world;
  Mlp bf16(world, s.heap, s.signals, s.args, "bench.mlp");
  Mlp fp8(world, s.heap, s.signals, s.fp8, "bench.mlp.e4m3");
  MlpArguments non_args = s.fp8;
  non_args.config.fc1.method = OpMethod::kNonOverlapped;
  non_args.config.fc2.method = OpMethod::kNonOverlapped;
  check_implementable<Mlp>(world, s.heap, non_args, where);
  Mlp fp8_non(world, s.heap, s.signals, non_args, "bench.mlp.e4m3.non");
  world.synchronize();

  // The two FP8 paths compute the same math: their outputs must agree.
  std::vector<DeviceBuffer> ref;
  for (int r = 0; r < w; ++r) ref.emplace_back(s.block_bytes, world.device(r));
  fp8.run();
  world.synchronize();
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpyAsync(ref[r].get(), s.out[r].get(), s.block_bytes, cudaMemcpyDeviceToDevice,
                                  world.compute_stream(r)));
    TL_CUDA_CHECK(cudaMemsetAsync(s.out[r].get(), 0xFF, s.block_bytes, world.compute_stream(r)));
  }
  fp8_non.run();
  world.synchronize();
  uint64_t far = 0;
  for (int r = 0; r < w; ++r) far += count_far(s.out[r].get(), ref[r].get(), s.block_elems, world.compute_stream(r));
  if (far != 0) {
    throw Error(std::string(where) + ": the non-overlapped paths' output differs from the fused op's in " +
                std::to_string(far) + " elements");
  }

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {[&] { bf16.run(); }, [&] { fp8.run(); }, [&] { fp8_non.run(); }, [&] { fp8.fc1().run(); },
       [&] { fp8.fc2().run(); }},
      &gated);
  const double flop = 2.0 * o.m * double(s.fc1_cols) * w * o.hidden + 2.0 * o.m * double(o.hidden) * s.i_local * w;
  Table table;
  table.name = "mlp";
  table.title = "MLP, " + ranks_phrase(w) + ": tokens=" + std::to_string(o.m) + " hidden=" + std::to_string(o.hidden) +
                " intermediate=" + std::to_string(o.intermediate) + " " + to_string(o.config.activation) + ", e4m3, " +
                to_string(o.scaling) + " scaling";
  table.columns = {{"variant", "variant", 0}, {"time_us", "time µs", 1},  {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},   {"tflops", "TFLOP/s", 1},   {"vs_bf16", "bf16 fused / time", 3}};
  const char* names[] = {"tilelink fused, bf16", "tilelink fused, e4m3", "tilelink non-overlapped, e4m3 (op paths)",
                         "fc1 alone, e4m3 (AG+GEMM)", "fc2 alone, e4m3 (GEMM+RS)"};
  for (size_t i = 0; i < t.size(); ++i) {
    const double f = i == 3 ? 2.0 * o.m * double(s.fc1_cols) * w * o.hidden
                     : i == 4 ? 2.0 * o.m * double(o.hidden) * s.i_local * w
                              : flop;
    table.add_row({std::string(names[i]), t[i].median, t[i].min, t[i].max, f / (t[i].median * 1e-6) / 1e12,
                   t[0].median / t[i].median});
  }
  table.params = {{"world", int64_t(w)}, {"m", int64_t(o.m)}, {"hidden", int64_t(o.hidden)},
                  {"intermediate", int64_t(o.intermediate)}};
  table.notes.push_back("config: fc1 kernel " + fp8.fc1().kernel_name() + ", fc2 kernel " + fp8.fc2().kernel_name() +
                        "; fc1's rows " + std::to_string(fp8.fc1().row_bytes()) + " bytes (bf16: " +
                        std::to_string(2 * o.hidden) + ")");
  table.notes.push_back("check: the non-overlapped paths' output equals the fused e4m3 op's within bf16 tolerance; "
                        "the e4m3 op's own correctness: the GPU suite (MlpFp8Test) against dequantised references");
  table.notes.push_back(std::string("time = slowest rank's CUDA-event time per call; median of ") +
                        std::to_string(t[0].samples) + " calls, variants interleaved" + (gated ? "" : " (not gated)"));
  return table;
}

}  // namespace tilelink::bench
