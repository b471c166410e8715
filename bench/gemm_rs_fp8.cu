// FP8 GEMM+RS (bench gemm_rs --dtype e4m3 --scaling tensor|row|block): the fused op against the
// same partial GEMMs in cuBLASLt's FP8 (mode-matched) and the chains built on them, in one table.
//
//   cuBLASLt e4m3 GEMM     every rank's partial M x N x K/P from its packed e4m3 A (T_gemm)
//   reduce-scatter alone   the bf16 partials' reduce-scatter, as in the bf16 bench (T_comm)
//   ideal                  max(T_gemm, T_comm)
//   non-overlapped         cuBLASLt, then that reduce-scatter
//   tilelink fused / non-overlapped / decomposed   GemmRs::run with that method
//   tilelink fused, quantise first   the op quantises each rank's bf16 A itself
//   fused GEMM alone       the fused kernel without notifies or reduction
//
// The op's methods are checked against its fused output, and the fused output against the
// cuBLASLt chain's (bf16 tolerance; cuBLASLt's scale layout for row and block A is a contiguous
// copy of the packed rows' tails, K-block-major for block scaling as matched on the H100).
#include <cuda_bf16.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt_fp8.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/gemm_rs.hpp"
#include "bench/gemm_rs_setup.hpp"
#include "bench/harness.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::bench {

Table bench_gemm_rs_fp8(const GemmRsBenchOptions& o) {
  const char* where = "bench gemm_rs (e4m3)";
  GemmRsSetup s(o.world, o.m, o.n, o.k, o.config, o.seed, where);  // bf16 A, B (the sources)
  s.use_fp8(o.scaling, where);
  const int w = o.world;
  const uint32_t m = s.m, n = s.n, k = s.k_local;
  const Fp8Scaling scaling = o.scaling;
  const uint64_t pitch = fp8_row_pitch(k, scaling);
  const size_t block_elems = s.block_elems, block_bytes = s.block_bytes;
  World& world = s.world;
  std::vector<DeviceBuffer> &a8 = s.a8, &a_scale = s.a_scale, &b8 = s.b8, &b_scale = s.b_scale;
  std::vector<DeviceBuffer> lt_a_scale, out_base, out_fused;
  for (int r = 0; r < w; ++r) {
    out_base.emplace_back(block_bytes, world.device(r));
    out_fused.emplace_back(block_bytes, world.device(r));
  }
  const GemmRsArguments& args = s.args;  // every knob the caller gave, the FP8 operands
  auto method_op = [&](OpMethod method, bool quantize_first) -> std::unique_ptr<GemmRs> {
    GemmRsArguments a = args;
    a.config.method = method;
    if (quantize_first) {
      a.a.clear();
      a.a_scale.clear();
      for (int r = 0; r < w; ++r) a.a_source.push_back(s.a[r].get());
    }
    if (!GemmRs::can_implement(world, s.heap, a).empty()) return nullptr;
    return std::make_unique<GemmRs>(world, s.heap, s.signals, a,
                                    std::string("bench.gemm_rs.e4m3.") + to_string(method) + (quantize_first ? ".q" : ""));
  };
  std::unique_ptr<GemmRs> op = method_op(OpMethod::kFused, false);
  std::unique_ptr<GemmRs> op_non = method_op(OpMethod::kNonOverlapped, false);
  std::unique_ptr<GemmRs> op_dec = method_op(OpMethod::kDecomposed, false);
  std::unique_ptr<GemmRs> op_first = method_op(OpMethod::kFused, true);

  // cuBLASLt per rank on its packed rows, writing the partial the reduce-scatter baseline reads.
  std::vector<std::unique_ptr<LtFp8Gemm>> lt;
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    const float* as = a_scale[r].get<float>();
    if (scaling != Fp8Scaling::kTensor) {
      const std::vector<float> v = lt_a_scales(a8[r].get(), pitch, m, k, scaling, scaling == Fp8Scaling::kBlock);
      lt_a_scale.emplace_back(v.size() * 4 + 16, world.device(r));
      TL_CUDA_CHECK(cudaMemcpy(lt_a_scale.back().get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
      as = lt_a_scale.back().get<float>();
    }
    lt.push_back(std::make_unique<LtFp8Gemm>(m, n, k, scaling, a8[r].get(), pitch, as, b8[r].get(),
                                             b_scale[r].get<float>(), s.partial.data(r), world.device(r)));
  }
  TL_CUDA_CHECK(cudaDeviceSynchronize());  // the pageable copies' DMA
  const bool have_lt = lt.back()->available();
  Events events(world, 1);
  std::vector<const void*> partials;
  for (int r = 0; r < w; ++r) partials.push_back(s.partial.data(r));
  auto gemm_all = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      if (have_lt) lt[r]->run(world.compute_stream(r));
    }
  };
  auto reduce_scatter = [&] { baseline_reduce_scatter(world, partials, s.recv, out_base, block_elems, events); };
  auto non_overlapped = [&] {
    gemm_all();
    reduce_scatter();
  };

  // Checks: the fused output against the chain's (noted, not thrown: cuBLASLt's scale layouts are
  // its own), the op's other methods against the fused output (thrown).
  auto poison = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      TL_CUDA_CHECK(cudaMemsetAsync(s.out[r].get(), 0xFF, block_bytes, world.compute_stream(r)));
    }
    world.synchronize();
  };
  op->run();
  world.synchronize();
  uint64_t far = 0;
  if (have_lt) {
    non_overlapped();
    world.synchronize();
    for (int r = 0; r < w; ++r) far += count_far(s.out[r].get(), out_base[r].get(), block_elems, world.compute_stream(r));
  }
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    TL_CUDA_CHECK(cudaMemcpyAsync(out_fused[r].get(), s.out[r].get(), block_bytes, cudaMemcpyDeviceToDevice,
                                  world.compute_stream(r)));
  }
  for (GemmRs* each : {op_non.get(), op_dec.get(), op_first.get()}) {
    if (each == nullptr) continue;
    poison();
    each->run();
    world.synchronize();
    uint64_t off = 0;
    for (int r = 0; r < w; ++r) off += count_far(s.out[r].get(), out_fused[r].get(), block_elems, world.compute_stream(r));
    if (off != 0) {
      throw Error(std::string(where) + ": method " + to_string(each->method()) + ": " + std::to_string(off) +
                  " output elements differ from the fused op's");
    }
  }

  std::vector<std::function<void()>> runs = {gemm_all, reduce_scatter, non_overlapped, [&] { op->run(); },
                                             [&] { op->run_gemm_only(); }};
  if (op_non) runs.push_back([&] { op_non->run(); });
  if (op_dec) runs.push_back([&] { op_dec->run(); });
  if (op_first) runs.push_back([&] { op_first->run(); });
  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, o.timing.iters, runs, &gated);
  const Stats& t_gemm = have_lt ? t[0] : t[4];
  GemmOpTable result("gemm_rs",
                     "GEMM+RS, " + ranks_phrase(w) + ": m=" + std::to_string(m) + " n=" + std::to_string(n) +
                         " k=" + std::to_string(o.k) + " (" + std::to_string(k) + " per rank), e4m3, " +
                         to_string(scaling) + " scaling, bf16 partials, fp32 reduction",
                     2.0 * double(m) * double(n) * double(o.k), t_gemm, t[2], t[1]);
  result.row(have_lt ? "cuBLASLt e4m3 GEMM (T_gemm)" : "cuBLASLt e4m3 GEMM: none (T_gemm = fused GEMM alone)", t_gemm);
  result.row(std::string("reduce-scatter alone, ") + baseline_transport(world) + " (T_comm)", t[1]);
  result.ideal_row();
  result.row("non-overlapped (cuBLASLt, then reduce-scatter)", t[2]);
  result.row("tilelink fused", t[3]);
  size_t next = 5;
  if (op_non) result.row("tilelink non-overlapped (op path)", t[next++]);
  if (op_dec) result.row("tilelink decomposed (op path)", t[next++]);
  if (op_first) result.row("tilelink fused, quantise first (bf16 A in)", t[next++]);
  result.row("fused GEMM alone (no scatter, no reduction)", t[4]);
  Table& table = result.table;
  table.params = {{"world", int64_t(w)}, {"m", int64_t(m)}, {"n", int64_t(n)}, {"k", int64_t(o.k)}};
  table.notes.push_back("config: kernel " + op->kernel_name() + ", scatter " + to_string(op->config().scatter) + ", " +
                        (op->plan().reducer == GemmRsReducer::kEpilogue
                             ? std::string("sums in the GEMM's epilogue")
                             : std::to_string(op->reduce_blocks()) + " reduction CTAs") +
                        ", swizzle " + std::to_string(op->swizzle()) + "; packed A rows of " + std::to_string(pitch) +
                        " bytes");
  if (!have_lt) {
    table.notes.push_back("no cuBLASLt baseline: " + lt.back()->why());
  } else if (far == 0) {
    table.notes.push_back("check: the fused output of every rank equals cuBLASLt + reduce-scatter within bf16 "
                          "tolerance; the op's other methods equal the fused output");
  } else {
    table.notes.push_back("cuBLASLt's chain differs from the fused output in " + std::to_string(far) +
                          " elements (its scale layout); its time stands for the same work. The op's own "
                          "correctness: the GPU suite (GemmRsFp8Test) against a dequantised fp32 reference");
  }
  result.common_notes(w, t[3].samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
