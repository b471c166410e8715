// The FP8 operand checks the dense ops share (AgGemm, GemmRs): the data type, the extents, B's
// scales, A's tensor scale and the bf16 source an op quantises itself. Internal to the ops.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tilelink/ops/common/fp8.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

struct Fp8OperandArgs {
  DType dtype = DType::kBf16;
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  uint32_t n = 0, k = 0;  // B is n x k
  const std::vector<const float*>* a_scale = nullptr;
  const std::vector<const float*>* b_scale = nullptr;
  const std::vector<const void*>* a_source = nullptr;
  const char* source_rows = "";  // what each rank's a_source holds, e.g. "m_per_rank x K"
  // Whether a bf16 op takes a_source too (AgGemm: the shard it copies into its own rows as it
  // sends); else a_source is FP8's only.
  bool bf16_source = false;
  // Tensor scaling with a_source: "" when the op computes each rank's scale itself as it quantises
  // (then a_scale must be empty), else why the op refuses it.
  std::string tensor_source_refusal;
};

// "" if the FP8 arguments (or their absence, for bf16) suit the op on `world`, else why not
// (argument, value, expectation).
std::string check_fp8_operands(const World& world, const Fp8OperandArgs& a);

// The FP8 fields of an op's arguments (dtype, scaling, n, k, a_scale, b_scale, a_source).
template <class Args>
Fp8OperandArgs fp8_operand_args(const Args& a, const char* source_rows, std::string tensor_source_refusal = "") {
  Fp8OperandArgs f;
  f.dtype = a.dtype;
  f.scaling = a.scaling;
  f.n = a.n;
  f.k = a.k;
  f.a_scale = &a.a_scale;
  f.b_scale = &a.b_scale;
  f.a_source = &a.a_source;
  f.source_rows = source_rows;
  f.tensor_source_refusal = std::move(tensor_source_refusal);
  return f;
}

}  // namespace tilelink::detail
