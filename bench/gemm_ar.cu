// GEMM+AR on virtual ranks or one rank per GPU, one table per M:
//
//   cuBLAS GEMM            every rank's partial M x N x K/P (T_gemm)
//   all-reduce alone       the op's bf16 all-reduce of complete partials (one-shot or two-shot as
//                          auto picks, every SM of the budget; T_ar)
//   chain                  cuBLAS, then that all-reduce (what a decode engine runs today)
//   ideal                  max(T_gemm, T_ar)
//   tilelink one-shot / two-shot   GemmAr::run, fused schedule
//   tilelink auto          GemmAr::run as configured by default: the estimate's choice
//   non-overlapped         GemmAr with the non-overlapped schedule: its GEMM, then its all-reduce
//   copy-engine path       the same schedule on the copy-engine path (the streams put the partials
//                          into the peers; the path the put-with-signal transport runs)
//   fused GEMM alone       GemmAr::run_gemm_only (the same GEMM, no notifies, no reduction)
//
// Every fused variant's output is checked once against the chain's. Times are the slowest rank's
// per call, variants interleaved call by call; median and p99 over the timed calls.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/gemm_ar.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/gemm_ar_setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::bench {
namespace {

// Runs `op` and the chain once and throws Error unless every rank's output is the chain's within
// bf16 roundings: 2^-6 of the element, plus 2^-6 of the output's RMS per rounded partial (every
// rank's K slices are rounded to bf16 before the sum, world * splits of them; a slice in the
// tail of the distribution is several RMS, half an ulp of it 2^-9 of that). A wrong tile is off
// by about the RMS itself.
void check_against_chain(const World& world, const char* where, GemmAr& op, const std::function<void()>& chain,
                         const std::vector<DeviceBuffer>& got, const std::vector<DeviceBuffer>& want, size_t elems) {
  op.run();
  world.synchronize();
  chain();
  world.synchronize();
  const double partials = double(world.size()) * op.splits();
  uint64_t far = 0;
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    far += count_far_partials(got[size_t(r)].get(), want[size_t(r)].get(), elems, partials);
  }
  if (far != 0) {
    throw Error(std::string(where) + ": " + std::to_string(far) + " output elements of " + op.describe_choice() +
                " differ from the chain's beyond bf16 tolerance");
  }
}

}  // namespace

Table bench_gemm_ar(const GemmArBenchOptions& o) {
  const char* where = "bench gemm_ar";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  GemmArSetup setup(o.world, o.m, o.n, o.k, o.config, o.seed, 7, where);
  const int w = o.world;
  const uint32_t m = setup.m, n = setup.n, k = setup.k_local;
  const size_t elems = size_t(m) * n, bytes = elems * 2;
  World& world = setup.world;
  BenchMemory& mem = setup;
  std::vector<DeviceBuffer>& a = setup.a;
  std::vector<DeviceBuffer>& b = setup.b;
  std::vector<DeviceBuffer>& out = setup.out;
  std::vector<DeviceBuffer> out_ref;
  for (int r = 0; r < w; ++r) out_ref.emplace_back(bytes, world.device(r));
  const GemmArArguments& args = setup.args;
  auto make = [&](AllReduceMethod method, GemmArSchedule schedule, uint32_t splits, std::vector<DeviceBuffer>& dst,
                  const char* name, GemmArPath path = GemmArPath::kAuto,
                  GemmArSliceSum slice_sum = GemmArSliceSum::kAuto) {
    GemmArArguments x = args;
    x.config.method = method;
    x.config.schedule = schedule;
    x.config.path = path;
    if (slice_sum != GemmArSliceSum::kAuto) x.config.slice_sum = slice_sum;
    if (splits != 0) x.config.splits = splits;
    for (int r = 0; r < w; ++r) x.out[size_t(r)] = dst[size_t(r)].get();
    check_implementable<GemmAr>(world, mem.heap, x, where);
    return std::make_unique<GemmAr>(world, mem.heap, mem.signals, x, name);
  };
  auto one = make(AllReduceMethod::kOneShot, GemmArSchedule::kFused, 0, out, "bench.gemm_ar.one_shot");
  auto two = make(AllReduceMethod::kTwoShot, GemmArSchedule::kFused, 0, out, "bench.gemm_ar.two_shot");
  auto automatic = make(AllReduceMethod::kAuto, GemmArSchedule::kAuto, 0, out, "bench.gemm_ar.auto");
  auto non = make(AllReduceMethod::kAuto, GemmArSchedule::kNonOverlapped, 0, out, "bench.gemm_ar.non_overlapped");
  auto ce = make(AllReduceMethod::kAuto, GemmArSchedule::kNonOverlapped, 0, out, "bench.gemm_ar.copy_engine",
                 GemmArPath::kCopyEngine);
  // The automatic configuration with the K slices as partials of their own, summed by the
  // reduction (auto sums them in the GEMM).
  auto partials = make(AllReduceMethod::kAuto, GemmArSchedule::kAuto, 0, out, "bench.gemm_ar.auto_slice_partials",
                       GemmArPath::kAuto, GemmArSliceSum::kReduction);
  // The chain: cuBLAS writes each rank's whole partial into the op's buffer (one slice), then the
  // op's all-reduce alone.
  auto chain_op = make(AllReduceMethod::kAuto, GemmArSchedule::kNonOverlapped, 1, out_ref, "bench.gemm_ar.chain");
  Cublas cublas(world);
  world.synchronize();

  auto gemm_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], a[r].get(), b[r].get(), chain_op->partial(r), m, n, k);
    }
  };
  auto all_reduce = [&] { chain_op->run_all_reduce_only(); };
  auto chain = [&] {
    gemm_all();
    all_reduce();
  };
  for (GemmAr* op : {one.get(), two.get(), automatic.get(), non.get(), ce.get(), partials.get()}) {
    check_against_chain(world, where, *op, chain, out, out_ref, elems);
  }

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {gemm_all, all_reduce, chain, [&] { one->run(); }, [&] { two->run(); }, [&] { automatic->run(); },
       [&] { non->run(); }, [&] { automatic->run_gemm_only(); }, [&] { ce->run(); }, [&] { partials->run(); },
       [&] { partials->run_gemm_only(); }},
      &gated);
  const Stats &t_gemm = t[0], &t_ar = t[1], &t_chain = t[2];
  const double weight_bytes = double(n) * k * 2;  // one rank's weight, read once per call

  Table table;
  table.name = "gemm_ar";
  table.title = "GEMM+AR, " + ranks_phrase(w) + ": m=" + std::to_string(m) + " n=" + std::to_string(n) +
                " k=" + std::to_string(o.k) + " (" + std::to_string(k) + " per rank), bf16, fp32 reduction";
  table.columns = {{"variant", "variant", 0},        {"time_us", "median µs", 1}, {"p99_us", "p99 µs", 1},
                   {"min_us", "min µs", 1},          {"weight_gbs", "weight GB/s", 0},
                   {"vs_chain", "speedup vs chain", 3}, {"vs_ideal", "ideal / time", 3}};
  const double ideal = std::max(t_gemm.median, t_ar.median);
  auto row = [&](const std::string& name, const Stats& s) {
    table.add_row({name, s.median, s.p99, s.min, gb_per_s(weight_bytes, s.median), t_chain.median / s.median,
                   ideal / s.median});
  };
  row("cuBLAS GEMM (T_gemm)", t_gemm);
  row(std::string("all-reduce alone, ") + to_string(chain_op->method()) + " (T_ar)", t_ar);
  table.add_row({std::string("ideal max(T_gemm, T_ar)"), ideal, Value{}, Value{}, gb_per_s(weight_bytes, ideal),
                 t_chain.median / ideal, 1.0});
  row("chain (cuBLAS, then the all-reduce)", t_chain);
  row("tilelink fused one-shot", t[3]);
  row("tilelink fused two-shot", t[4]);
  row(std::string("tilelink auto (") + to_string(automatic->choice().schedule) + ", " +
          to_string(automatic->method()) + ")",
      t[5]);
  row("tilelink non-overlapped (its GEMM, then its all-reduce)", t[6]);
  row("the auto op's GEMM alone (its K slices summed in it; no notifies, no reduction)", t[7]);
  row(std::string("tilelink copy-engine path (non-overlapped, ") + to_string(ce->method()) + ")", t[8]);
  row(std::string("tilelink auto, K slices summed by the reduction (") + std::to_string(partials->choice().splits) +
          " partial(s))",
      t[9]);
  row("that op's GEMM alone (its slices' partials; no notifies, no reduction)", t[10]);
  table.params = {{"world", int64_t(w)}, {"m", int64_t(m)}, {"n", int64_t(n)}, {"k", int64_t(o.k)}};
  table.notes.push_back("auto: " + automatic->describe_choice() + " (the estimate of gemm_ar_policy.hpp)");
  table.notes.push_back("one-shot: " + one->describe_choice() + "; two-shot: " + two->describe_choice());
  table.notes.push_back("auto, K slices summed by the reduction: " + partials->describe_choice());
  table.notes.push_back("weight GB/s = one rank's weight (n x k/P bf16) / time: the GEMM is weight-bandwidth-bound "
                        "at small m");
  table.notes.push_back("check: every variant's output on every rank equals the chain's within bf16 roundings (2^-6 "
                        "of the element, plus 2^-6 of the RMS per rounded partial, world x K slices of them)");
  table.notes.push_back("time = slowest rank's CUDA-event time per call; median and p99 of " +
                        std::to_string(t_chain.samples) + " calls after " + std::to_string(o.timing.warmup) +
                        " warm-up calls, the variants interleaved call by call" +
                        (gated ? "" : "; host enqueue time included (the gate expired)"));
  return table;
}

}  // namespace tilelink::bench
