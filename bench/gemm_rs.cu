// GEMM+RS on virtual ranks or one rank per GPU: the fused op (any scatter variant) against its
// baselines, in one table.
//
//   cuBLAS GEMM          every rank's partial M x N x K/P (T_gemm)
//   reduce-scatter alone the reduce-scatter of complete partials (T_comm): NCCL's across GPUs; on
//                        virtual ranks the copy engine, each owner copying its rows from every
//                        peer, then a kernel summing them in rank order
//   ideal                max(T_gemm, T_comm)
//   non-overlapped       cuBLAS, then that reduce-scatter
//   decomposed           per owner block: cuBLAS on the block's rows (other owners first), its copy
//                        to the owner on the comm stream while the next block computes; the owner
//                        sums once every block has arrived (async-TP style)
//   tilelink fused       GemmRs::run
//   tilelink non-overlapped / auto  GemmRs::run with method non_overlapped / auto (the tune cache's
//                        method, else the estimate's; auto also picks the engine)
//   tilelink small-M engine  GemmRs::run with engine small_m (GEMM+AR's engine reduce-scattering:
//                        decode's M), its schedule automatic
// The rows above it run the engine configured (--engine), else the owner-tile GEMM.
//   fused GEMM alone     GemmRs::run_gemm_only: the fused kernel without notifies or reduction
//
// The fused output is checked once against the non-overlapped one (bf16 tolerance). Times are the
// slowest rank's per call, variants interleaved call by call.
#include <cuda_bf16.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gemm_rs.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::bench {
namespace {

const char* granularity_name(SignalGranularity g) {
  return g == SignalGranularity::kTile ? "tile" : g == SignalGranularity::kTileRow ? "tile row" : "owner block";
}

}  // namespace

Table bench_gemm_rs(const GemmRsBenchOptions& o) {
  if (o.dtype == DType::kE4m3) return bench_gemm_rs_fp8(o);
  GemmRsSetup s(o.world, o.m, o.n, o.k, o.config, o.seed, "bench gemm_rs");
  const int w = o.world;
  const uint32_t m = s.m, n = s.n, k_local = s.k_local, rows = s.rows;
  const size_t block_elems = s.block_elems, block_bytes = s.block_bytes;
  World& world = s.world;
  SymmetricBuffer &partial = s.partial, &recv = s.recv;
  std::vector<DeviceBuffer> &a = s.a, &b = s.b, &out = s.out;
  std::vector<DeviceBuffer> out_base;
  for (int r = 0; r < w; ++r) out_base.emplace_back(block_bytes, world.device(r));
  // The fused op, and its non-overlapped path (not beside the epilogue reducer, which sums inside
  // the GEMM).
  GemmRsArguments main_args = s.args;
  main_args.config.method = OpMethod::kFused;
  if (main_args.config.engine == GemmRsEngine::kAuto) main_args.config.engine = GemmRsEngine::kOwnerTiles;
  GemmRs op(world, s.heap, s.signals, main_args, "bench.gemm_rs");
  // The op's other paths, where the configuration allows them (null otherwise).
  auto method_op = [&](OpMethod method) -> std::unique_ptr<GemmRs> {
    GemmRsArguments args = main_args;
    args.config.method = method;
    if (!GemmRs::can_implement(world, s.heap, args).empty()) return nullptr;
    return std::make_unique<GemmRs>(world, s.heap, s.signals, args, std::string("bench.gemm_rs.") + to_string(method));
  };
  std::unique_ptr<GemmRs> op_non = method_op(OpMethod::kNonOverlapped), op_dec = method_op(OpMethod::kDecomposed);
  // The small-M engine at its automatic schedule, where it can run (bf16).
  std::unique_ptr<GemmRs> op_small;
  if (GemmRsArguments args = s.args; args.config.engine != GemmRsEngine::kOwnerTiles) {
    args.config.engine = GemmRsEngine::kSmallM;
    args.config.method = OpMethod::kAuto;
    if (GemmRs::can_implement(world, s.heap, args).empty()) {
      op_small = std::make_unique<GemmRs>(world, s.heap, s.signals, args, "bench.gemm_rs.small_m");
    }
  }
  // The op as a caller leaves it (method auto): the tune cache's method, else its estimate's.
  GemmRs op_auto(world, s.heap, s.signals, s.args, "bench.gemm_rs.auto");
  Cublas cublas(world);
  Events events(world, w + 1);  // per rank: one per decomposed block, one "all pushed"
  world.synchronize();

  auto gemm_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], a[r].get(), b[r].get(), partial.data(r), m, n, k_local);
    }
  };
  std::vector<const void*> partials;
  for (int r = 0; r < w; ++r) partials.push_back(partial.data(r));
  // Copy engine: owner q copies its rows from every rank's partial into its slots, then sums them.
  auto reduce_scatter = [&] {
    if (baseline_uses_nccl(world)) {
      nccl_reduce_scatter(world, partials, recv, out_base, block_elems);
      return;
    }
    for (int q = 0; q < w; ++q) {
      world.set_device(q);
      world.comm_after_compute(q);
      for (int s = 0; s < w; ++s) {
        TL_CUDA_CHECK(cudaMemcpyAsync(recv.as<char>(q) + s * block_bytes,
                                      partial.as<char>(s) + size_t(q) * block_bytes, block_bytes,
                                      cudaMemcpyDeviceToDevice, world.comm_stream(q)));
      }
      sum_slots(recv.data(q), out_base[q].get(), block_elems, w, world.comm_stream(q));
      world.compute_after_comm(q);
    }
  };
  auto non_overlapped = [&] {
    gemm_all();
    // Every rank's GEMM before any owner copies: owners read all partials.
    for (int r = 0; r < w; ++r) {
      TL_CUDA_CHECK(cudaEventRecord(events.events[size_t(r) * (w + 1) + w], world.compute_stream(r)));
    }
    for (int q = 0; q < w; ++q) {
      for (int r = 0; r < w; ++r) {
        TL_CUDA_CHECK(cudaStreamWaitEvent(world.compute_stream(q), events.events[size_t(r) * (w + 1) + w], 0));
      }
    }
    reduce_scatter();
  };
  auto decomposed = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      world.comm_after_compute(r);
      for (int step = 1; step <= w; ++step) {
        const int q = (r + step) % w;  // own block last
        char* block = partial.as<char>(r) + size_t(q) * block_bytes;
        cublas_gemm(cublas.handles[r], a[r].get<char>() + size_t(q) * rows * k_local * 2, b[r].get(), block, rows, n,
                    k_local);
        cudaEvent_t e = events.events[size_t(r) * (w + 1) + step - 1];
        TL_CUDA_CHECK(cudaEventRecord(e, world.compute_stream(r)));
        TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(r), e, 0));
        TL_CUDA_CHECK(cudaMemcpyAsync(recv.as<char>(q) + size_t(r) * block_bytes, block, block_bytes,
                                      cudaMemcpyDeviceToDevice, world.comm_stream(r)));
      }
      TL_CUDA_CHECK(cudaEventRecord(events.events[size_t(r) * (w + 1) + w], world.comm_stream(r)));
    }
    for (int q = 0; q < w; ++q) {
      for (int r = 0; r < w; ++r) {
        TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(q), events.events[size_t(r) * (w + 1) + w], 0));
      }
      sum_slots(recv.data(q), out_base[q].get(), block_elems, w, world.comm_stream(q));
      world.compute_after_comm(q);
    }
  };
  auto fused = [&] { op.run(); };
  auto fused_gemm_alone = [&] { op.run_gemm_only(); };
  auto op_non_overlapped = [&] { op_non->run(); };
  auto op_decomposed = [&] { op_dec->run(); };
  auto op_automatic = [&] { op_auto.run(); };
  auto op_small_m = [&] { op_small->run(); };

  // Check once: the op's output (each method) against the non-overlapped chain's; before each
  // path but the first, the output is NaN unless the path writes it.
  // The small-M engine rounds each rank's K slices to bf16 before summing them: its tolerance counts them.
  auto partials_of = [&](const GemmRs& x) { return x.small_m() != nullptr ? double(w) * x.small_m()->splits() : 0.0; };
  check_against(world, "bench gemm_rs", fused, non_overlapped, out, out_base, block_elems, partials_of(op));
  auto check_path = [&](const char* what, const std::function<void()>& path, double partials = 0) {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, block_bytes, world.compute_stream(r)));
    }
    world.synchronize();
    check_against(world, what, path, non_overlapped, out, out_base, block_elems, partials);
  };
  if (op_non) check_path("bench gemm_rs, op non-overlapped", op_non_overlapped, partials_of(*op_non));
  if (op_dec) check_path("bench gemm_rs, op decomposed", op_decomposed);
  check_path("bench gemm_rs, op on auto", op_automatic, partials_of(op_auto));
  if (op_small) check_path("bench gemm_rs, op small-M engine", op_small_m, partials_of(*op_small));

  bool gated = true;
  std::vector<std::function<void()>> variants = {gemm_all, reduce_scatter, non_overlapped, decomposed, fused,
                                                 fused_gemm_alone};
  variants.push_back(op_automatic);
  if (op_non) variants.push_back(op_non_overlapped);
  if (op_dec) variants.push_back(op_decomposed);
  if (op_small) variants.push_back(op_small_m);
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, o.timing.iters, variants, &gated);
  const Stats &t_gemm = t[0], &t_comm = t[1], &t_non = t[2], &t_dec = t[3], &t_fused = t[4], &t_alone = t[5];
  GemmOpTable result("gemm_rs",
                  "GEMM+RS, " + ranks_phrase(w) + ": m=" + std::to_string(m) +
                      " n=" + std::to_string(n) + " k=" + std::to_string(o.k) + " (" + std::to_string(k_local) +
                      " per rank), bf16, fp32 reduction",
                  2.0 * double(m) * double(n) * double(o.k), t_gemm, t_non, t_comm);
  result.row("cuBLAS GEMM (T_gemm)", t_gemm);
  result.row(std::string("reduce-scatter alone, ") + baseline_transport(world) + " (T_comm)", t_comm);
  result.ideal_row();
  result.row("non-overlapped (cuBLAS, then reduce-scatter)", t_non);
  result.row("decomposed (per-owner cuBLAS + copies, 2 streams)", t_dec);
  result.row("tilelink fused", t_fused);
  if (op_non) result.row("tilelink non-overlapped (op path)", t[7]);
  if (op_dec) result.row("tilelink decomposed (op path: block GEMMs + copy engine)", t[op_non ? 8 : 7]);
  if (op_small) {
    result.row(std::string("tilelink small-M engine (") + to_string(op_small->method()) + ", " +
                   std::to_string(op_small->small_m()->splits()) + " K slices)",
               t.back());
  }
  result.row(std::string("tilelink auto (ran ") + to_string(op_auto.engine()) + ", " + to_string(op_auto.method()) + ")",
             t[6]);
  result.row("fused GEMM alone (no scatter, no reduction)", t_alone);
  Table& table = result.table;
  // The shape as `tilelink plan gemm_rs` takes it (bench/predicted_vs_measured.py reads these).
  table.params = {{"world", int64_t(w)},
                  {"m", int64_t(m)},
                  {"n", int64_t(n)},
                  {"k", int64_t(o.k)},
                  {"reducer", std::string(to_string(op.plan().reducer))}};
  table.notes.push_back(std::string("config: kernel ") + op.kernel_name() + ", scatter " + to_string(op.config().scatter) +
                        ", signal per " +
                        granularity_name(op.config().granularity) + ", " +
                        (op.plan().reducer == GemmRsReducer::kEpilogue
                             ? std::string("sums in the GEMM's epilogue (reducer epilogue)")
                             : std::to_string(op.reduce_blocks()) + " reduction CTAs") +
                        ", swizzle " + std::to_string(op.swizzle()));
  if (!op.tuned_from().empty()) table.notes.push_back("config from the tune cache " + op.tuned_from());
  table.notes.push_back("check: the op's output of every rank (each method) equals cuBLAS + reduce-scatter within "
                        "bf16 tolerance");
  table.notes.push_back(std::string("method auto ran ") + to_string(op_auto.method()) + ": " + op_auto.method_why());
  table.notes.push_back(std::string("engine auto ran ") + to_string(op_auto.engine()) + ": " + op_auto.engine_why());
  result.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
