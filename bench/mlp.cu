// The fused tensor-parallel MLP on virtual ranks or one rank per GPU against the non-overlapped
// chain, in one table.
//
//   fc1 cuBLAS          every rank's M x 2I/P (SwiGLU) or M x I/P (GELU) x H GEMM on the gathered tokens
//   activation          the activation kernel alone (T_act)
//   fc2 cuBLAS          every rank's M x H x I/P partial
//   all-gather alone    the fused op's copy-engine all-gather of the tokens (T_ag)
//   reduce-scatter      the baseline's reduce-scatter of the partials (T_rs): NCCL's across GPUs;
//                       on virtual ranks copy-engine copies of the owner blocks + a rank-order sum
//   cuBLAS chain        fc1, activation, fc2 with no communication (T_gemm: the compute floor)
//   ideal               max(T_fc1, T_ag) + T_act + max(T_fc2, T_rs)
//   non-overlapped      all-gather, cuBLAS fc1, activation, cuBLAS fc2, reduce-scatter
//   tilelink fused      Mlp::run
//
// The fused output is checked once against the non-overlapped one (bf16 tolerance).
#include <cuda_bf16.h>

#include <string>
#include <vector>

#include "bench/mlp.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/mlp_setup.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::bench {

Table bench_mlp(const MlpBenchOptions& o) {
  if (o.dtype == DType::kE4m3) return bench_mlp_fp8(o);
  MlpSetup s(o.world, o.m, o.hidden, o.intermediate, o.config, o.seed, "bench mlp");
  const int w = o.world;
  const uint32_t m = s.m, hidden = s.hidden, i_local = s.i_local, fc1_cols = s.fc1_cols;
  const size_t x_bytes = s.x_bytes, shard_bytes = s.shard_bytes, block_elems = s.block_elems;
  World& world = s.world;
  SymmetricBuffer &x = s.x, &slots = s.slots;
  std::vector<DeviceBuffer> &w1 = s.w1, &w2 = s.w2, &out = s.out;
  std::vector<DeviceBuffer> out_base, x_base, y_base, h_base, p_base;
  for (int r = 0; r < w; ++r) {
    const int dev = world.device(r);
    out_base.emplace_back(s.block_bytes, dev);
    x_base.emplace_back(x_bytes, dev);
    y_base.emplace_back(size_t(m) * fc1_cols * 2, dev);
    h_base.emplace_back(size_t(m) * i_local * 2, dev);
    p_base.emplace_back(x_bytes, dev);
  }
  Mlp op(world, s.heap, s.signals, s.args, "bench.mlp");
  Cublas cublas(world);
  Events events(world, 1);
  world.synchronize();
  for (int r = 0; r < w; ++r) {  // the baseline's tokens start with the rank's own shard
    TL_CUDA_CHECK(cudaMemcpyAsync(x_base[r].get<char>() + r * shard_bytes, x.as<char>(r) + r * shard_bytes,
                                  shard_bytes, cudaMemcpyDeviceToDevice, world.compute_stream(r)));
  }
  world.synchronize();

  auto fc1_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], x_base[r].get(), w1[r].get(), y_base[r].get(), m, fc1_cols, hidden);
    }
  };
  auto act_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      detail::launch_mlp_activation(o.config.activation, y_base[r].get(), h_base[r].get(), m, i_local,
                                    world.compute_stream(r));
    }
  };
  auto fc2_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], h_base[r].get(), w2[r].get(), p_base[r].get(), m, hidden, i_local);
    }
  };
  auto all_gather = [&] { baseline_all_gather(world, x, x_base, shard_bytes); };
  std::vector<const void*> partials;
  for (int r = 0; r < w; ++r) partials.push_back(p_base[r].get());
  auto reduce_scatter = [&] { baseline_reduce_scatter(world, partials, slots, out_base, block_elems, events); };
  auto chain = [&] {
    fc1_all();
    act_all();
    fc2_all();
  };
  auto non_overlapped = [&] {
    all_gather();
    chain();
    reduce_scatter();
  };
  auto fused = [&] { op.run(); };

  // Check once: the fused output against the non-overlapped chain's.
  check_against(world, "bench mlp", fused, non_overlapped, out, out_base, block_elems);

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {fc1_all, act_all, fc2_all, [&] { op.fc1().all_gather().run(); }, reduce_scatter, chain, non_overlapped, fused},
      &gated);
  const Stats &t_fc1 = t[0], &t_act = t[1], &t_fc2 = t[2], &t_ag = t[3], &t_rs = t[4], &t_chain = t[5],
              &t_non = t[6], &t_fused = t[7];
  const double flop = 2.0 * m * double(hidden) * double(fc1_cols) * w + 2.0 * m * double(hidden) * double(i_local) * w;
  GemmOpTable result("mlp",
                     "MLP (" + std::string(to_string(o.config.activation)) + "), " + ranks_phrase(w) +
                         ": tokens=" + std::to_string(m) +
                         " hidden=" + std::to_string(hidden) + " intermediate=" + std::to_string(o.intermediate) +
                         " (" + std::to_string(i_local) + " per rank), bf16",
                     flop, t_chain, t_non, t_chain);
  result.ideal = std::max(t_fc1.median, t_ag.median) + t_act.median + std::max(t_fc2.median, t_rs.median);
  result.row("fc1 cuBLAS (T_fc1)", t_fc1);
  result.row("activation (T_act)", t_act);
  result.row("fc2 cuBLAS (T_fc2)", t_fc2);
  result.row("all-gather alone, copy engine (T_ag)", t_ag);
  result.row(std::string("reduce-scatter alone, ") + baseline_transport(world) + " (T_rs)", t_rs);
  result.row("cuBLAS chain, no communication (T_gemm)", t_chain);
  result.ideal_row("ideal max(T_fc1, T_ag) + T_act + max(T_fc2, T_rs)");
  result.row("non-overlapped (all-gather, chain, reduce-scatter)", t_non);
  result.row("tilelink fused (Mlp::run)", t_fused);
  Table& table = result.table;
  table.notes.push_back("config: fc1 kernel " + op.fc1().kernel_name() + ", swizzle " +
                        std::to_string(op.fc1().swizzle()) +
                        (op.fc2().engine() == GemmRsEngine::kSmallM
                             ? std::string("; fc2 on the small-M engine (below)")
                             : "; fc2 scatter " + std::string(to_string(op.fc2().config().scatter)) + ", signal per " +
                                   to_string(op.fc2().config().granularity) + ", " +
                                   std::to_string(op.fc2().reduce_blocks()) + " reduction CTAs, swizzle " +
                                   std::to_string(op.fc2().swizzle())));
  table.notes.push_back(std::string("fc2 engine ") + to_string(op.fc2().engine()) + ": " + op.fc2().engine_why());
  for (const std::string* from : {&op.fc1().tuned_from(), &op.fc2().tuned_from()}) {
    if (!from->empty()) {
      table.notes.push_back(std::string(from == &op.fc1().tuned_from() ? "fc1" : "fc2") +
                            " config from the tune cache " + *from);
    }
  }
  table.notes.push_back("check: fused output of every rank equals the non-overlapped chain's within bf16 tolerance");
  table.notes.push_back("TFLOP/s counts both GEMMs; vs cuBLAS = T_gemm (the chain without communication) / time");
  result.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
