// The tensor-parallel MLP block as one call: AG+GEMM (fc1, column-parallel) -> activation ->
// GEMM+RS (fc2, row-parallel).
//
// Every rank r holds a row shard of the tokens X (M/P x H, in the symmetric `x` buffer at rows
// [r*M/P, (r+1)*M/P), as AgGemm expects), its column slice of fc1 W1_r and its row slice of fc2
// W2_r, and gets rows [r*M/P, (r+1)*M/P) of
//   out = sum_r act(allgather(X) * W1_r^T) * W2_r^T          (M/P x H, bf16, fp32 reduction)
// with
//   kSwiGlu: W1_r is (2 I/P) x H -- the gate rows, then the up rows; act(g | u) = silu(g) * u
//   kGelu:   W1_r is I/P x H;                                          act(y) = gelu(y) (erf)
// and W2_r is H x I/P (the nn.Linear layout of both weights). The two ops' signal slices come
// from the same SignalSet; each keeps its own epoch, so calls may repeat without resets. The
// activation runs on each rank's compute stream between the two.
//
// FP8 (dtype e4m3, ops/common/fp8.hpp): both GEMMs in e4m3 with one scaling mode, W1_r and W2_r
// e4m3 with their scales apart. fc1 all-gathers packed e4m3 token rows (the op quantises each
// rank's bf16 shard on send; with tensor scaling the caller writes them, one scale for all); the
// activation stays bf16 and fc2 quantises it itself each call (tensor scaling: each rank's own
// scale), then reduces bf16 partials in fp32 as for bf16.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/common/mlp_activation.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/mlp/mlp_config.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink {

struct MlpArguments {
  const SymmetricBuffer* x = nullptr;        // M x H bf16 (every rank writes its row shard)
  std::vector<const void*> w1;               // per rank: (2 I/P or I/P) x H bf16
  std::vector<const void*> w2;               // per rank: H x I/P bf16
  std::vector<void*> out;                    // per rank: M/P x H bf16
  const SymmetricBuffer* partial = nullptr;  // M x H bf16: fc2's partials (GemmRsArguments::partial)
  const SymmetricBuffer* recv = nullptr;     // M x H bf16: fc2 with config.fc2.scatter = ce or method decomposed only
  uint32_t m = 0;                            // tokens over all ranks
  uint32_t hidden = 0;                       // H
  uint32_t intermediate = 0;                 // I over all ranks
  MlpConfig config;
  // FP8. With dtype e4m3, w1 and w2 are e4m3 and `x` holds packed FP8 token rows
  // (fp8_row_pitch(hidden, scaling) bytes each), and:
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  std::vector<const float*> w1_scale, w2_scale;  // per rank: fp8_b_scales of W1_r and of W2_r
  // Per rank, its M/P x H bf16 token shard anywhere on its device (fc1's a_source), or empty (the
  // caller writes the rank's rows of `x`). bf16: copied into them by fc1's all-gather under its GEMM.
  // FP8 row and block scaling: quantised on send into them each call. FP8 tensor scaling: empty.
  std::vector<const void*> x_source;
  std::vector<const float*> x_scale;  // tensor scaling: per rank, the tokens' one scale (equal on every rank)
};

class Mlp {
 public:
  // Validates (InvalidArgument naming the argument; nothing launched), allocates each rank's fc1
  // output and activation (M x 2I/P and M x I/P bf16) and builds both ops.
  Mlp(const World& world, SymmetricHeap& heap, SignalSet& signals, const MlpArguments& args,
      const std::string& name = "mlp");
  ~Mlp();
  Mlp(const Mlp&) = delete;
  Mlp& operator=(const Mlp&) = delete;

  static std::string can_implement(const World& world, const SymmetricHeap& heap, const MlpArguments& args);

  // Enqueues one call on every rank; complete on the compute streams.
  void run();

  // Points rank's next calls at other weights and output (AgGemm / GemmRs::set_operands: host-only,
  // the GEMMs' descriptors rebuilt when a pointer changed), as a framework that allocates each
  // call's output needs (the PyTorch operator). Throws InvalidArgument on a null or misaligned
  // pointer; the kernels are then those of the previous operands.
  void set_operands(int rank, const void* w1, const void* w2, void* out);
  // Built with x_source: the same with the rank's token shard for the next calls.
  void set_operands(int rank, const void* w1, const void* w2, void* out, const void* x_source);
  // FP8: the same with the weights' scales and, quantising on send, the rank's bf16 token shard
  // (else nullptr).
  void set_operands(int rank, const void* w1, const float* w1_scale, const void* w2, const float* w2_scale, void* out,
                    const void* x_source);

  const AgGemm& fc1() const { return *fc1_; }
  const GemmRs& fc2() const { return *fc2_; }
  AgGemm& fc1() { return *fc1_; }
  GemmRs& fc2() { return *fc2_; }
  // Rank r's fc1 output (M x fc1 columns) and activation (M x I/P), for tests and benchmarks.
  const void* fc1_out(int rank) const { return y_[static_cast<size_t>(rank)].get(); }
  const void* activation_out(int rank) const { return h_[static_cast<size_t>(rank)].get(); }
  // The activation alone on every rank (benchmarks).
  void run_activation();

 private:
  const World* world_;
  MlpArguments args_;
  std::vector<DeviceBuffer> y_, h_;
  std::unique_ptr<AgGemm> fc1_;
  std::unique_ptr<GemmRs> fc2_;
};

}  // namespace tilelink
