// AG+GEMM on virtual ranks or one rank per GPU: the fused op against its baselines, all in one table.
//
//   cuBLAS GEMM          every rank's M x N/P x K GEMM on the complete A (T_gemm)
//   all-gather alone     the op's all-gather half by itself (T_comm)
//   ideal                max(T_gemm, T_comm)
//   non-overlapped       all-gather (NCCL across GPUs; on virtual ranks the copy engine,
//                        cudaMemcpyAsync from every peer), then cuBLAS
//   decomposed           per-shard cuBLAS GEMMs, each after its shard's copy, copies and GEMMs on
//                        two streams (PyTorch async-TP style)
//   tilelink fused       AgGemm::run (method fused)
//   tilelink decomposed / non-overlapped (op paths)
//                        AgGemm::run with AgGemmConfig::method decomposed / non_overlapped: the
//                        baselines' chains as the op runs them (its plain GEMM, its all-gather)
//   tilelink auto        AgGemm::run with method auto (the tune cache's method, else the estimate's)
//   fused kernel alone   the fused kernel without its waits, on a complete A
//
// The fused result is checked once against cuBLAS (bf16 outputs, relative tolerance). Times are
// the slowest rank's per call (RankTimer), median of the timed calls.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/ag_gemm_setup.hpp"
#include "bench/ag_gemm.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/cublas_check.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"


namespace tilelink::bench {
namespace {

std::string comm_name(const AllGatherConfig& c, const AllGatherPlan& plan, uint32_t blocks) {
  std::string s = std::string(to_string(c.resource)) + " " + to_string(c.method) + " " + to_string(c.order);
  if (c.resource == CommResource::kSm) s += std::string(" ") + to_string(c.path) + " " + std::to_string(blocks) + " CTAs";
  return s + ", " + std::to_string(plan.map.comm_rows) + "-row tiles";
}

}  // namespace

Table bench_ag_gemm(const AgGemmBenchOptions& o) {
  if (o.dtype == DType::kE4m3) return bench_ag_gemm_fp8(o);
  const char* where = "bench_ag_gemm";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size " + std::to_string(o.world));
  TL_REQUIRE(o.n % o.world == 0 && (o.n / o.world) % 8 == 0, where, "n", o.n,
             "a multiple of 8 * world (" + std::to_string(8 * o.world) + "): N is split over the ranks");
  AgGemmSetup setup(o.world, o.m, o.n, o.k, o.seed, o.config.comm.comm_rows);
  const int w = setup.w;
  const uint32_t m = setup.m, k = setup.k, n_local = setup.n_local, m_per_rank = setup.m_per_rank;
  const size_t a_bytes = setup.a_bytes, shard_bytes = setup.shard_bytes, c_elems = setup.c_elems;
  World& world = setup.world;
  SymmetricHeap& heap = setup.heap;
  SymmetricBuffer& gathered = setup.gathered;
  const std::vector<DeviceBuffer>& b = setup.b;
  const std::vector<DeviceBuffer>& c = setup.c;
  const AgGemmArguments args = setup.args(o.config);
  std::vector<DeviceBuffer> c_ref, a_base, c_base;
  for (int r = 0; r < w; ++r) {
    c_ref.emplace_back(c_elems * 2, world.device(r));
    a_base.emplace_back(a_bytes, world.device(r));  // the baselines' gathered A
    c_base.emplace_back(c_elems * 2, world.device(r));
  }
  if (const std::string why = AgGemm::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("bench ag_gemm: " + why);
  }
  // The fused op, and its two other methods (the tune cache's other knobs apply to all three).
  AgGemmArguments main_args = args;
  main_args.config.method = OpMethod::kFused;
  AgGemm op(world, heap, setup.signals, main_args, "bench.ag_gemm");
  auto with_method = [&](OpMethod m) {
    AgGemmArguments a = args;
    a.config.method = m;
    return a;
  };
  AgGemm op_dec(world, heap, setup.signals, with_method(OpMethod::kDecomposed), "bench.ag_gemm.decomposed");
  AgGemm op_non(world, heap, setup.signals, with_method(OpMethod::kNonOverlapped), "bench.ag_gemm.non_overlapped");
  // The op as a caller leaves it (method auto): the tune cache's method, else its estimate's.
  AgGemm op_auto(world, heap, setup.signals, args, "bench.ag_gemm.auto");
  // Fused, each rank's shard handed over where the caller has it (a_source, as the PyTorch operator
  // does): the all-gather copies it in tile by tile under the GEMM (at world 1 the GEMM reads it).
  std::vector<DeviceBuffer> source;
  AgGemmArguments source_args = main_args;
  for (int r = 0; r < w; ++r) {
    source.emplace_back(shard_bytes, world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(source[r].get(), static_cast<char*>(gathered.data(r)) + r * shard_bytes, shard_bytes,
                             cudaMemcpyDeviceToDevice));
    source_args.a_source.push_back(source[r].get());
  }
  AgGemm op_src(world, heap, setup.signals, source_args, "bench.ag_gemm.a_source");
  Cublas cublas(world);
  Events events(world, w);
  world.synchronize();

  // Check once: each method of the op against cuBLAS on the gathered A, each from C and the peers'
  // rows of A poisoned (bf16 0xFFFF is NaN: a GEMM that read a row before it landed, or left C
  // unwritten, shows).
  // op_src starts from its own rows poisoned too (it brings them from a_source); they are put back
  // after its check, for the baselines.
  for (AgGemm* each : {&op, &op_dec, &op_non, &op_auto, &op_src}) {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      const cudaStream_t stream = world.compute_stream(r);
      TL_CUDA_CHECK(cudaMemsetAsync(c[r].get(), 0xFF, c_elems * 2, stream));
      char* g = static_cast<char*>(gathered.data(r));
      if (r > 0) TL_CUDA_CHECK(cudaMemsetAsync(g, 0xFF, size_t(r) * shard_bytes, stream));
      if (r + 1 < w) TL_CUDA_CHECK(cudaMemsetAsync(g + size_t(r + 1) * shard_bytes, 0xFF, size_t(w - r - 1) * shard_bytes, stream));
      if (each == &op_src) TL_CUDA_CHECK(cudaMemsetAsync(g + size_t(r) * shard_bytes, 0xFF, shard_bytes, stream));
    }
    world.synchronize();
    each->run();
    world.synchronize();
    if (each == &op_src) {
      for (int r = 0; r < w; ++r) {  // the own rows again (at world 1 the op did not write them)
        TL_CUDA_CHECK(cudaMemcpy(static_cast<char*>(gathered.data(r)) + r * shard_bytes, source[r].get(), shard_bytes,
                                 cudaMemcpyDeviceToDevice));
      }
    }
    uint64_t far = 0;
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], gathered.data(r), b[r].get(), c_ref[r].get(), m, n_local, k);
      far += count_far(c[r].get(), c_ref[r].get(), c_elems, world.compute_stream(r));
    }
    if (far != 0) {
      throw Error("bench ag_gemm: method " + std::string(to_string(each->method())) + ": " + std::to_string(far) +
                  " elements of C differ from cuBLAS beyond bf16 tolerance");
    }
  }
  // The baselines' A starts with each rank's own shard; their copies bring the rest.
  for (int r = 0; r < w; ++r) {
    TL_CUDA_CHECK(cudaMemcpyAsync(a_base[r].get<char>() + r * shard_bytes,
                                  static_cast<char*>(gathered.data(r)) + r * shard_bytes, shard_bytes,
                                  cudaMemcpyDeviceToDevice, world.compute_stream(r)));
  }
  world.synchronize();

  auto copy_shard = [&](int r, int from) {
    TL_CUDA_CHECK(cudaMemcpyAsync(a_base[r].get<char>() + from * shard_bytes,
                                  static_cast<char*>(gathered.data(from)) + from * shard_bytes, shard_bytes,
                                  cudaMemcpyDeviceToDevice, world.comm_stream(r)));
  };
  auto cublas_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], gathered.data(r), b[r].get(), c_ref[r].get(), m, n_local, k);
    }
  };
  auto comm_alone = [&] { op.all_gather().run(); };
  auto non_overlapped = [&] {
    baseline_all_gather(world, gathered, a_base, shard_bytes);
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], a_base[r].get(), b[r].get(), c_base[r].get(), m, n_local, k);
    }
  };
  auto decomposed = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      world.comm_after_compute(r);
      for (int s = 0; s < w; ++s) {
        const int from = (r + s) % w;
        if (s > 0) {
          copy_shard(r, from);
          cudaEvent_t e = events.events[size_t(r) * w + s];
          TL_CUDA_CHECK(cudaEventRecord(e, world.comm_stream(r)));
          TL_CUDA_CHECK(cudaStreamWaitEvent(world.compute_stream(r), e, 0));
        }
        cublas_gemm(cublas.handles[r], a_base[r].get<char>() + from * shard_bytes, b[r].get(),
                    c_base[r].get<char>() + size_t(from) * m_per_rank * n_local * 2, m_per_rank, n_local, k);
      }
    }
  };
  auto fused = [&] { op.run(); };
  auto op_decomposed = [&] { op_dec.run(); };
  auto op_non_overlapped = [&] { op_non.run(); };
  auto op_automatic = [&] { op_auto.run(); };
  auto fused_from_source = [&] { op_src.run(); };
  auto fused_kernel_alone = [&] { op.run_gemm_only(); };
  if (baseline_uses_nccl(world)) {  // untimed: NCCL's communicators are made on first use (a second or so)
    non_overlapped();
    world.synchronize();
  }

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {cublas_all, comm_alone, non_overlapped, decomposed, fused, fused_kernel_alone, op_decomposed,
       op_non_overlapped, op_automatic, fused_from_source},
      &gated);
  const Stats &t_gemm = t[0], &t_comm = t[1], &t_non = t[2], &t_dec = t[3], &t_fused = t[4], &t_kernel = t[5];
  GemmOpTable out("ag_gemm",
                  "AG+GEMM, " + ranks_phrase(w) + ": m=" + std::to_string(m) +
                      " n=" + std::to_string(o.n) + " (" + std::to_string(n_local) + " per rank) k=" + std::to_string(k) +
                      ", bf16",
                  2.0 * double(m) * double(o.n) * double(k), t_gemm, t_non, t_comm);
  out.row("cuBLAS GEMM (T_gemm)", t_gemm);
  out.row("all-gather alone (T_comm)", t_comm);
  out.ideal_row();
  out.row(std::string("non-overlapped (") + baseline_transport(world) + " all-gather, then cuBLAS)", t_non);
  out.row("decomposed (per-shard cuBLAS, 2 streams)", t_dec);
  out.row("tilelink fused", t_fused);
  out.row("tilelink decomposed (op path)", t[6]);
  out.row("tilelink non-overlapped (op path)", t[7]);
  out.row(std::string("tilelink auto (ran ") + to_string(op_auto.method()) + ")", t[8]);
  out.row("tilelink fused, shard from a_source (the PyTorch op's path)", t[9]);
  out.row("fused kernel alone (no waits)", t_kernel);
  Table& table = out.table;
  const double ideal = out.ideal;
  // The shape as `tilelink plan ag_gemm` takes it (bench/predicted_vs_measured.py reads these).
  table.params = {{"world", int64_t(w)}, {"m", int64_t(m)}, {"n", int64_t(o.n)}, {"k", int64_t(k)}};

  if (!op.tuned_from().empty()) table.notes.push_back("config from the tune cache " + op.tuned_from());
  table.notes.push_back("config: kernel " + op.kernel_name() + ", all-gather " + comm_name(op.config().comm, op.all_gather().plan(), op.all_gather().num_blocks()) +
                        ", swizzle " + std::to_string(op.swizzle()) + ", GEMM CTAs per rank " +
                        std::to_string(op.gemm_ctas(0)) + " (SM budget " + std::to_string(world.sm_budget(0)) + ")");
  table.notes.push_back("check: C of every rank equals cuBLAS within bf16 tolerance, for each of the op's methods");
  table.notes.push_back(std::string("method auto ran ") + to_string(op_auto.method()) + ": " + op_auto.method_why());
  if (w > 1) {
    // Against the fused kernel without waits, so that the kernel's own speed (which the
    // non-overlapped baseline's cuBLAS does not share) does not count as communication.
    const double hidden = std::clamp(1.0 - (t_fused.median - t_kernel.median) / t_comm.median, 0.0, 1.0);
    char line[200];
    std::snprintf(line, sizeof(line),
                  "communication hidden: %.0f %% (1 - (fused - fused kernel alone) / T_comm); fused / ideal = %.2f",
                  100 * hidden, t_fused.median / ideal);
    table.notes.push_back(line);
  }
  out.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
