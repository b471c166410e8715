// The process suite's FP8 ops (issue 22; tests/process/test_process.cu says how the suite runs):
// AG+GEMM quantising each process's bf16 shard on send (its peers' packed rows cross the process
// boundary with their scales), and GEMM+RS on packed e4m3 rows and on a bf16 A it quantises first.
// Each process makes every rank's inputs from the launch's shared seed, quantises them on the host
// (tilelink/testing/fp8_reference.hpp) and checks its own output against the dequantised inputs
// multiplied in fp32 (cuBLAS SGEMM); outputs poisoned, the peers' gathered rows poisoned, three
// calls of fresh inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../gpu/cublas_ref.hpp"
#include "../gpu/fp8_test_util.hpp"
#include "../gpu/gpu_test_util.hpp"
#include "process_env.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/testing/fp8_reference.hpp"

namespace tilelink::test::process {
namespace {

namespace tt = tilelink::testing;

// got against want within the FP8 GEMM's tolerance (fp8_test_util.hpp) plus `extra` per element.
::testing::AssertionResult fp8_close(const std::vector<__nv_bfloat16>& got, const std::vector<float>& want,
                                     const std::vector<float>& magnitude, const std::vector<float>& extra,
                                     uint32_t cols) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol =
        8e-3f * std::fabs(want[i]) + kFp8AccumulationTolerance * magnitude[i] + (extra.empty() ? 0.0f : extra[i]) + 1e-3f;
    if (!(std::fabs(__bfloat162float(got[i]) - want[i]) <= tol) && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << me() << ": " << bad << " of " << got.size()
                                       << " elements off; first at row " << first / cols << " col " << first % cols
                                       << ": got " << __bfloat162float(got[first]) << ", reference " << want[first];
}

struct Fp8Case {
  const char* name;
  Fp8Scaling scaling;
  CommResource resource = CommResource::kCopyEngine;  // AG+GEMM's all-gather
};

class ProcessAgGemmFp8 : public ::testing::TestWithParam<Fp8Case> {};

// Quantise on send across processes: every process's gathered rows equal the host's quantised rows
// of every rank, and C the dequantised reference.
TEST_P(ProcessAgGemmFp8, QuantisesOnSendAcrossProcesses) {
  const Fp8Case c = GetParam();
  const int w = world().size(), dev = world().device(me());
  const uint32_t m_per_rank = 136, n = 264, k = c.scaling == Fp8Scaling::kBlock ? 384u : 400u;
  const uint32_t m = m_per_rank * uint32_t(w);
  const uint64_t pitch = fp8_row_pitch(k, c.scaling);
  SymmetricHeap heap(world(), size_t(m) * pitch + (4 << 20));
  SignalSet signals(heap, 4096);
  SymmetricBuffer gathered = heap.allocate(size_t(m) * pitch);
  DeviceBuffer b8(size_t(n) * k, dev), b_scale(fp8_b_scales(n, k, c.scaling) * 4 + 16, dev);
  DeviceBuffer source(size_t(m_per_rank) * k * 2, dev), out(size_t(m) * n * 2, dev);
  AgGemmArguments args;
  args.a = &gathered;
  args.m_per_rank = m_per_rank;
  args.n = n;
  args.k = k;
  args.dtype = DType::kE4m3;
  args.scaling = c.scaling;
  args.config.comm.resource = c.resource;
  args.config.comm.comm_rows = 48;  // communication tiles that straddle GEMM tiles
  args.b.assign(w, nullptr);  // other processes' entries are not read
  args.c.assign(w, nullptr);
  args.b_scale.assign(w, nullptr);
  args.a_source.assign(w, nullptr);
  args.b[me()] = b8.get();
  args.c[me()] = out.get();
  args.b_scale[me()] = b_scale.get<float>();
  args.a_source[me()] = source.get();
  ASSERT_EQ(AgGemm::can_implement(world(), heap, args), "");
  AgGemm op(world(), heap, signals, args, std::string("process_ag_gemm_fp8_") + c.name);
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    auto rng = shared_rng(500, call);
    const std::vector<__nv_bfloat16> a_host = realistic_bf16(m, k, rng);
    auto b_rng = shared_rng(600 + me(), call);
    const std::vector<float> b_deq = device_quantized_weight(realistic_bf16(n, k, b_rng), n, k, c.scaling, b8, b_scale, dev);
    upload(source.get(), a_host.data() + size_t(me()) * m_per_rank * k, source.bytes());
    poison(gathered.data(me()), size_t(m) * pitch);  // e4m3 NaN and NaN scales unless gathered
    poison(out.get(), out.bytes());
    world().barrier();  // every process's rows poisoned before any peer's pull
    op.run();
    world().synchronize();
    const std::vector<uint8_t> packed = tt::quantize_rows(a_host, m, k, c.scaling);
    EXPECT_TRUE(bytes_equal(download<uint8_t>(gathered.data(me()), size_t(m) * pitch), packed))
        << "rank " << me() << ": gathered rows differ from the host-quantised ones";
    std::vector<float> want, magnitude;
    CublasHandle cublas;
    dequantised_product(cublas.get(), tt::dequantize_rows(packed.data(), m, k, c.scaling), b_deq, m, n, k, dev, want,
                        magnitude);
    EXPECT_TRUE(fp8_close(download<__nv_bfloat16>(out.get(), size_t(m) * n), want, magnitude, {}, n));
    world().barrier();  // the next call's poison after every peer's reads
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessAgGemmFp8,
                         ::testing::Values(Fp8Case{"row_ce", Fp8Scaling::kRow},
                                           Fp8Case{"block_ce", Fp8Scaling::kBlock},
                                           Fp8Case{"row_sm", Fp8Scaling::kRow, CommResource::kSm}),
                         [](const auto& info) { return std::string(info.param.name); });

struct RsFp8Case {
  const char* name;
  Fp8Scaling scaling;
  bool quantise_first;  // a bf16 A the op quantises itself, or packed rows
  GemmRsScatter scatter = GemmRsScatter::kPull;  // ce: also under the put-with-signal transport
};

class ProcessGemmRsFp8 : public ::testing::TestWithParam<RsFp8Case> {};

// Every rank's partial of its own e4m3 A and B, reduced in rank order: each process's block equals
// the sum of the dequantised products, each rounded to bf16 as the partials are.
TEST_P(ProcessGemmRsFp8, MatchesTheSumOfEveryRanksDequantisedProduct) {
  const RsFp8Case c = GetParam();
  const int w = world().size(), dev = world().device(me());
  const uint32_t rows = 136, n = 264, k = c.scaling == Fp8Scaling::kBlock ? 256u : 272u, m = rows * uint32_t(w);
  const uint64_t pitch = fp8_row_pitch(k, c.scaling);
  SymmetricHeap heap(world(), size_t(m) * n * 2 * 2 + (4 << 20));
  SignalSet signals(heap, 4096);
  SymmetricBuffer partial = heap.allocate(size_t(m) * n * 2), recv = heap.allocate(size_t(m) * n * 2);
  DeviceBuffer a8(size_t(m) * pitch, dev), a_bf16(size_t(m) * k * 2, dev), a_scale(16, dev);
  DeviceBuffer b8(size_t(n) * k, dev), b_scale(fp8_b_scales(n, k, c.scaling) * 4 + 16, dev);
  DeviceBuffer out(size_t(rows) * n * 2, dev);
  GemmRsArguments args;
  args.partial = &partial;
  args.recv = &recv;
  args.m = m;
  args.n = n;
  args.k = k;
  args.dtype = DType::kE4m3;
  args.scaling = c.scaling;
  args.config.scatter = c.scatter;
  // The copy engine moves whole groups of rows: a signal per tile row.
  if (c.scatter == GemmRsScatter::kCopyEngine) args.config.granularity = SignalGranularity::kTileRow;
  args.b.assign(w, nullptr);
  args.out.assign(w, nullptr);
  args.b_scale.assign(w, nullptr);
  args.b[me()] = b8.get();
  args.out[me()] = out.get();
  args.b_scale[me()] = b_scale.get<float>();
  if (c.quantise_first) {
    args.a_source.assign(w, nullptr);
    args.a_source[me()] = a_bf16.get();
  } else {
    args.a.assign(w, nullptr);
    args.a[me()] = a8.get();
    if (c.scaling == Fp8Scaling::kTensor) {
      args.a_scale.assign(w, nullptr);
      args.a_scale[me()] = a_scale.get<float>();
    }
  }
  ASSERT_EQ(GemmRs::can_implement(world(), heap, args), "");
  if (c.scaling == Fp8Scaling::kRow && w > 1 && world().transport() == Transport::kLoadStore) {
    // The push's store view is rotated in a process world, and row scales follow it: refused by name.
    GemmRsArguments push = args;
    push.config.scatter = GemmRsScatter::kEpiloguePush;
    EXPECT_NE(GemmRs::can_implement(world(), heap, push).find("row scaling in a process world"), std::string::npos);
  }
  GemmRs op(world(), heap, signals, args, std::string("process_gemm_rs_fp8_") + c.name);
  if (c.scatter == GemmRsScatter::kAuto && c.scaling == Fp8Scaling::kRow) {
    EXPECT_NE(op.config().scatter, GemmRsScatter::kEpiloguePush) << "auto pulls for row scaling here";
  }
  for (int call = 1; call <= 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    // want: the fp32 sum of every rank's bf16-rounded partial for this rank's rows; magnitude: the
    // sum of their terms' magnitudes; extra: each partial's bf16 rounding.
    std::vector<float> want(size_t(rows) * n, 0.0f), magnitude(want.size(), 0.0f), extra(want.size(), 0.0f);
    for (int p = 0; p < w; ++p) {
      auto rng = shared_rng(700 + p, call);
      const std::vector<__nv_bfloat16> a_p = realistic_bf16(m, k, rng);
      const std::vector<__nv_bfloat16> b_p = realistic_bf16(n, k, rng);
      const float scale = c.scaling == Fp8Scaling::kTensor ? e4m3_scale(tt::amax_of(a_p.data(), a_p.size())) : 1.0f;
      const std::vector<uint8_t> packed = tt::quantize_rows(a_p, m, k, c.scaling, scale);
      DeviceBuffer b8_p(b8.bytes(), dev), b_scale_p(b_scale.bytes(), dev);
      const std::vector<float> b_deq = device_quantized_weight(b_p, n, k, c.scaling, p == me() ? b8 : b8_p,
                                                               p == me() ? b_scale : b_scale_p, dev);
      if (p == me()) {
        upload(a_bf16.get(), a_p.data(), a_bf16.bytes());
        upload(a8.get(), packed.data(), packed.size());
        upload(a_scale.get(), &scale, 4);
      }
      std::vector<float> ref, mag;
      CublasHandle cublas;
      dequantised_product(cublas.get(), tt::dequantize_rows(packed.data(), m, k, c.scaling, scale), b_deq, m, n, k, dev,
                          ref, mag);
      for (size_t i = 0; i < want.size(); ++i) {
        const size_t at = size_t(me()) * rows * n + i;
        const float x = __bfloat162float(__float2bfloat16(ref[at]));  // stored as bf16
        want[i] += x;
        magnitude[i] += mag[at];
        extra[i] += 8e-3f * std::fabs(x);
      }
    }
    poison(out.get(), out.bytes());
    world().barrier();  // every process's operands in place
    op.run();
    world().synchronize();
    EXPECT_TRUE(fp8_close(download<__nv_bfloat16>(out.get(), size_t(rows) * n), want, magnitude, extra, n));
    world().barrier();
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessGemmRsFp8,
                         ::testing::Values(RsFp8Case{"row", Fp8Scaling::kRow, false},
                                           RsFp8Case{"block", Fp8Scaling::kBlock, false},
                                           RsFp8Case{"tensor_quantise_first", Fp8Scaling::kTensor, true},
                                           RsFp8Case{"row_quantise_first", Fp8Scaling::kRow, true},
                                           RsFp8Case{"block_ce", Fp8Scaling::kBlock, false, GemmRsScatter::kCopyEngine},
                                           // the automatic path: push + epilogue where the heap's view allows
                                           RsFp8Case{"block_auto", Fp8Scaling::kBlock, false, GemmRsScatter::kAuto},
                                           RsFp8Case{"row_auto", Fp8Scaling::kRow, false, GemmRsScatter::kAuto}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tilelink::test::process
