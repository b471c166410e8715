// FP8 AG+GEMM (bench ag_gemm --dtype e4m3 --scaling tensor|row|block): the fused op against the
// same GEMM in cuBLASLt's FP8 (mode-matched) and its chains, all in one table.
//
//   cuBLASLt e4m3 GEMM     every rank's M x N/P x K GEMM on the complete packed A (T_gemm)
//   all-gather, e4m3 rows  the op's all-gather half by itself: packed FP8 rows with their scales (T_comm)
//   all-gather, bf16 rows  the same rows in bf16, for the traffic FP8 saves
//   ideal                  max(T_gemm, T_comm)
//   non-overlapped         the copy-engine all-gather of the packed rows, then cuBLASLt
//   tilelink fused / decomposed / non-overlapped   AgGemm::run with that method
//   tilelink fused, quantise on send   (row, block) the op quantises each rank's bf16 shard first
//   fused kernel alone     the fused kernel without its waits
//
// cuBLASLt's scale layouts for row and block scaling are not tilelink's packed tails: the bench
// hands it contiguous copies, trying each documented-or-plausible order until its C matches the
// op's, and says which matched (the time does not depend on it).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/ag_gemm.hpp"
#include "bench/ag_gemm_setup.hpp"
#include "bench/cublaslt_fp8.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"

namespace tilelink::bench {
Table bench_ag_gemm_fp8(const AgGemmBenchOptions& o) {
  const char* where = "bench_ag_gemm (e4m3)";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size " + std::to_string(o.world));
  TL_REQUIRE(o.n % o.world == 0 && (o.n / o.world) % 8 == 0, where, "n", o.n,
             "a multiple of 8 * world (" + std::to_string(8 * o.world) + "): N is split over the ranks");
  if (std::string e = check_fp8_extents(o.k, o.scaling); !e.empty()) throw InvalidArgument(std::string(where) + ": " + e);
  const int w = o.world;
  const uint32_t m = o.m, k = o.k, n_local = o.n / static_cast<uint32_t>(w), m_per_rank = m / static_cast<uint32_t>(w);
  const Fp8Scaling scaling = o.scaling;
  const uint64_t pitch = fp8_row_pitch(k, scaling);
  const size_t a_bytes = size_t(m) * pitch, shard_bytes = size_t(m_per_rank) * pitch, c_elems = size_t(m) * n_local;
  const uint32_t channels = AgGemmSetup::channels(m, w, o.config.comm.comm_rows);
  BenchMemory mem(w, a_bytes + size_t(m) * k * 3 + size_t(3 * channels) * 8 + (8u << 20), 3 * channels);
  World& world = mem.world;
  SymmetricBuffer gathered = mem.heap.allocate(a_bytes);
  SymmetricBuffer gathered_bf16 = mem.heap.allocate(size_t(m) * k * 2);  // the contrast's rows
  // The non-overlapped chain as cuBLASLt's users run it: A's e4m3 values K-contiguous (its scales
  // apart, gathered once at setup and not timed), all-gathered, then cuBLASLt. Each rank's own
  // rows, copied from its packed rows after quantising.
  SymmetricBuffer compact = mem.heap.allocate(size_t(m) * k);
  const size_t compact_shard = size_t(m_per_rank) * k;

  std::vector<DeviceBuffer> b_bf16, b8, b_scale, c, c_ref, source, a_base, lt_a_scale, lt_b_scale;
  DeviceBuffer scale_max(16, world.device(0));
  float tensor_scale = 0.0f;
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    const cudaStream_t s = world.compute_stream(r);
    b_bf16.emplace_back(size_t(n_local) * k * 2, world.device(r));
    b8.emplace_back(size_t(n_local) * k, world.device(r));
    b_scale.emplace_back(fp8_b_scales(n_local, k, scaling) * 4 + 16, world.device(r));
    c.emplace_back(c_elems * 2, world.device(r));
    c_ref.emplace_back(c_elems * 2, world.device(r));
    source.emplace_back(size_t(m_per_rank) * k * 2, world.device(r));
    a_base.emplace_back(size_t(m) * k, world.device(r));
    fill_bf16(b_bf16[r].get(), size_t(n_local) * k, rank_seed(o.seed, r), s);
    fill_bf16(source[r].get(), size_t(m_per_rank) * k, rank_seed(o.seed ^ 0xA11A11ull, r), s);
    TL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(gathered_bf16.data(r)) + size_t(r) * m_per_rank * k * 2,
                                  source[r].get(), size_t(m_per_rank) * k * 2, cudaMemcpyDeviceToDevice, s));
    quantize_weight_e4m3(b_bf16[r].get(), n_local, k, scaling, b8[r].get(), b_scale[r].get<float>(), s);
    if (scaling == Fp8Scaling::kTensor) {  // one scale for the whole A: the largest rank's
      tensor_scale_e4m3(source[r].get(), k, m_per_rank, k, scale_max.get<float>(), s);
      TL_CUDA_CHECK(cudaStreamSynchronize(s));
      float v = 0;
      TL_CUDA_CHECK(cudaMemcpy(&v, scale_max.get(), 4, cudaMemcpyDeviceToHost));
      tensor_scale = std::max(tensor_scale, v);
    }
  }
  std::vector<DeviceBuffer> a_scale;
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    a_scale.emplace_back(16, world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(a_scale[r].get(), &tensor_scale, 4, cudaMemcpyHostToDevice));
    TL_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy's DMA may still run
    quantize_rows_e4m3(source[r].get(), k, m_per_rank, k, scaling, a_scale[r].get<float>(),
                       static_cast<char*>(gathered.data(r)) + r * shard_bytes, world.compute_stream(r));
    TL_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(compact.data(r)) + r * compact_shard, k,
                                    static_cast<char*>(gathered.data(r)) + r * shard_bytes, pitch, k, m_per_rank,
                                    cudaMemcpyDeviceToDevice, world.compute_stream(r)));
  }
  world.synchronize();

  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = m_per_rank;
  args.n = n_local;
  args.k = k;
  args.config = o.config;
  args.dtype = DType::kE4m3;
  args.scaling = scaling;
  for (int r = 0; r < w; ++r) {
    args.b.push_back(b8[r].get());
    args.c.push_back(c[r].get());
    args.b_scale.push_back(b_scale[r].get<float>());
    if (scaling == Fp8Scaling::kTensor) args.a_scale.push_back(a_scale[r].get<float>());
  }
  check_implementable<AgGemm>(world, mem.heap, args, "bench ag_gemm");
  auto with = [&](OpMethod method, bool on_send) {
    AgGemmArguments a = args;
    a.config.method = method;
    if (on_send) {
      for (int r = 0; r < w; ++r) a.a_source.push_back(source[r].get());
    }
    return a;
  };
  AgGemm op(world, mem.heap, mem.signals, with(OpMethod::kFused, false), "bench.ag_gemm.e4m3");
  AgGemm op_dec(world, mem.heap, mem.signals, with(OpMethod::kDecomposed, false), "bench.ag_gemm.e4m3.decomposed");
  AgGemm op_non(world, mem.heap, mem.signals, with(OpMethod::kNonOverlapped, false), "bench.ag_gemm.e4m3.non");
  const bool on_send = scaling != Fp8Scaling::kTensor;
  std::unique_ptr<AgGemm> op_send;
  if (on_send) {
    op_send = std::make_unique<AgGemm>(world, mem.heap, mem.signals, with(OpMethod::kFused, true),
                                       "bench.ag_gemm.e4m3.on_send");
  }
  AllGather ag_bf16(world, mem.heap, mem.signals,
                    all_gather_policy::all_gather_arguments(world, &gathered_bf16, 0, m_per_rank, k, args.config.comm),
                    "bench.ag_gemm.bf16_rows");
  op.run();  // the gathered packed rows, for the baselines' A and scales
  world.synchronize();

  // cuBLASLt on each rank's gathered A, its A scales as contiguous copies (row: M floats; block:
  // M x K/128, K-block fastest, or its transpose), B's as ours or transposed (block).
  const uint32_t kb = k / kFp8BlockK, nb = (n_local + kFp8BlockN - 1) / kFp8BlockN;
  std::vector<std::unique_ptr<LtFp8Gemm>> lt, lt_base;
  std::string lt_layout = "scalar scales";
  uint64_t far = ~0ull;
  auto make_lt = [&](bool a_t, bool b_t) {
    lt.clear();
    lt_base.clear();
    lt_a_scale.clear();
    lt_b_scale.clear();
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      const float* as = scaling == Fp8Scaling::kTensor ? a_scale[r].get<float>() : nullptr;
      const float* bs = b_scale[r].get<float>();
      if (scaling != Fp8Scaling::kTensor) {
        const std::vector<float> tails = lt_a_scales(gathered.data(r), pitch, m, k, scaling, a_t);
        lt_a_scale.emplace_back(tails.size() * 4 + 16, world.device(r));
        TL_CUDA_CHECK(cudaMemcpy(lt_a_scale.back().get(), tails.data(), tails.size() * 4, cudaMemcpyHostToDevice));
        TL_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy's DMA may still run
        as = lt_a_scale.back().get<float>();
      }
      if (scaling == Fp8Scaling::kBlock && b_t) {
        std::vector<float> v(size_t(nb) * kb);
        TL_CUDA_CHECK(cudaMemcpy(v.data(), b_scale[r].get(), v.size() * 4, cudaMemcpyDeviceToHost));
        v = transposed(v, nb, kb);
        lt_b_scale.emplace_back(v.size() * 4 + 16, world.device(r));
        TL_CUDA_CHECK(cudaMemcpy(lt_b_scale.back().get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        TL_CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy's DMA may still run
        bs = lt_b_scale.back().get<float>();
      }
      lt.push_back(std::make_unique<LtFp8Gemm>(m, n_local, k, scaling, gathered.data(r), pitch, as, b8[r].get(), bs,
                                               c_ref[r].get(), world.device(r)));
      lt_base.push_back(std::make_unique<LtFp8Gemm>(m, n_local, k, scaling, a_base[r].get(), k, as, b8[r].get(),
                                                    bs, c_ref[r].get(), world.device(r)));
      if (!lt.back()->available()) return;
    }
    far = 0;
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      lt[r]->run(world.compute_stream(r));
      far += count_far(c[r].get(), c_ref[r].get(), c_elems, world.compute_stream(r));
    }
  };
  if (scaling == Fp8Scaling::kTensor) {
    make_lt(false, false);
  } else {
    const bool two_b = scaling == Fp8Scaling::kBlock;
    for (int t = 0; t < (two_b ? 4 : 2) && far != 0; ++t) {
      make_lt(t & 1, (t >> 1) & 1);
      if (!lt.empty() && !lt.back()->available()) break;
      lt_layout = std::string("A scales ") + ((t & 1) ? "K-block-major" : "row-major (ours)") +
                  (two_b ? std::string(", B scales ") + (((t >> 1) & 1) ? "transposed" : "as ours") : "");
    }
  }
  const bool have_lt = !lt.empty() && lt.back()->available();
  const std::string lt_why = lt.empty() ? "" : lt.back()->why();
  if (have_lt && far != 0 && scaling == Fp8Scaling::kTensor) {
    throw Error("bench ag_gemm (e4m3): " + std::to_string(far) + " elements of the op's C differ from cuBLASLt's");
  }
  // The op's other methods against the fused op's C (in c_ref after a copy).
  // Every copy and poison on the ranks' compute streams (the world's streams do not order with the
  // legacy default stream).
  std::vector<DeviceBuffer> c_fused;
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    c_fused.emplace_back(c_elems * 2, world.device(r));
    TL_CUDA_CHECK(cudaMemcpyAsync(c_fused[r].get(), c[r].get(), c_elems * 2, cudaMemcpyDeviceToDevice,
                                  world.compute_stream(r)));
  }
  for (AgGemm* each : {&op_dec, &op_non, op_send.get()}) {
    if (each == nullptr) continue;
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      TL_CUDA_CHECK(cudaMemsetAsync(c[r].get(), 0xFF, c_elems * 2, world.compute_stream(r)));
    }
    world.synchronize();
    each->run();
    world.synchronize();
    uint64_t off = 0;
    for (int r = 0; r < w; ++r) off += count_far(c[r].get(), c_fused[r].get(), c_elems, world.compute_stream(r));
    if (off != 0) {
      throw Error("bench ag_gemm (e4m3): method " + std::string(to_string(each->method())) + ": " +
                  std::to_string(off) + " elements of C differ from the fused op's");
    }
  }
  for (int r = 0; r < w; ++r) {  // the baseline's A starts with the rank's own rows
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpyAsync(a_base[r].get<char>() + r * compact_shard,
                                  static_cast<char*>(compact.data(r)) + r * compact_shard, compact_shard,
                                  cudaMemcpyDeviceToDevice, world.compute_stream(r)));
  }
  world.synchronize();

  auto lt_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      if (have_lt) lt[r]->run(world.compute_stream(r));
    }
  };
  auto non_overlapped = [&] {
    baseline_all_gather(world, compact, a_base, compact_shard);
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      if (have_lt) lt_base[r]->run(world.compute_stream(r));
    }
  };
  std::vector<std::function<void()>> runs = {lt_all,
                                             [&] { op.all_gather().run(); },
                                             [&] { ag_bf16.run(); },
                                             non_overlapped,
                                             [&] { op.run(); },
                                             [&] { op_dec.run(); },
                                             [&] { op_non.run(); },
                                             [&] { op.run_gemm_only(); }};
  if (op_send) runs.push_back([&] { op_send->run(); });
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, o.timing.iters, runs, &gated);
  const Stats& t_gemm = have_lt ? t[0] : t[7];
  GemmOpTable out("ag_gemm",
                  "AG+GEMM, " + ranks_phrase(w) + ": m=" + std::to_string(m) + " n=" + std::to_string(o.n) + " (" +
                      std::to_string(n_local) + " per rank) k=" + std::to_string(k) + ", e4m3, " +
                      to_string(scaling) + " scaling",
                  2.0 * double(m) * double(o.n) * double(k), t_gemm, t[3], t[1]);
  out.row(have_lt ? "cuBLASLt e4m3 GEMM (T_gemm)" : "cuBLASLt e4m3 GEMM: none (T_gemm = fused kernel alone)", t_gemm);
  out.row("all-gather alone, e4m3 rows (T_comm)", t[1]);
  out.row("all-gather alone, bf16 rows (contrast)", t[2]);
  out.ideal_row();
  out.row(std::string("non-overlapped (") + baseline_transport(world) + " all-gather, then cuBLASLt)", t[3]);
  out.row("tilelink fused", t[4]);
  out.row("tilelink decomposed (op path)", t[5]);
  out.row("tilelink non-overlapped (op path)", t[6]);
  if (op_send) out.row("tilelink fused, quantise on send", t[8]);
  out.row("fused kernel alone (no waits)", t[7]);
  Table& table = out.table;
  table.params = {{"world", int64_t(w)}, {"m", int64_t(m)}, {"n", int64_t(o.n)}, {"k", int64_t(k)}};
  table.notes.push_back("config: kernel " + op.kernel_name() + ", swizzle " + std::to_string(op.swizzle()) +
                        ", GEMM CTAs per rank " + std::to_string(op.gemm_ctas(0)) + "; packed A rows of " +
                        std::to_string(pitch) + " bytes (bf16: " + std::to_string(2 * k) + ")");
  if (!have_lt) {
    table.notes.push_back("no cuBLASLt baseline: " + lt_why);
  } else if (far == 0) {
    table.notes.push_back("check: C of every rank equals cuBLASLt's within bf16 tolerance (" + lt_layout +
                          "); the op's other methods equal its fused C");
  } else {
    table.notes.push_back("cuBLASLt's C differs from the op's under every scale layout tried (" + std::to_string(far) +
                          " elements at the last); its time stands for the same work. The op's own correctness: "
                          "the GPU suite (AgGemmFp8Test) against a dequantised fp32 reference");
  }
  out.common_notes(w, t[4].samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
