#include "ops/common/fp8_operands.hpp"

#include "runtime/checks.hpp"

namespace tilelink::detail {

std::string check_fp8_operands(const World& world, const Fp8OperandArgs& a) {
  if (a.dtype != DType::kBf16 && a.dtype != DType::kE4m3) {
    return "argument 'dtype' = " + std::to_string(static_cast<uint32_t>(a.dtype)) + ": expected bf16 or e4m3";
  }
  if (a.dtype == DType::kBf16) {
    if (!a.a_scale->empty() || !a.b_scale->empty() || (!a.bf16_source && !a.a_source->empty())) {
      return a.bf16_source ? "arguments 'a_scale', 'b_scale': expected empty with dtype bf16 (they are FP8's)"
                           : "arguments 'a_scale', 'b_scale', 'a_source': expected empty with dtype bf16 (they are FP8's)";
    }
    if (!a.a_source->empty()) {
      if (std::string e = check_rank_pointers(world, *a.a_source, "a_source"); !e.empty()) {
        return e + " (each rank's " + a.source_rows + " bf16 rows)";
      }
    }
    return "";
  }
  if (static_cast<uint32_t>(a.scaling) > static_cast<uint32_t>(Fp8Scaling::kBlock)) {
    return "argument 'scaling' = " + std::to_string(static_cast<uint32_t>(a.scaling)) +
           ": expected tensor, row or block";
  }
  if (std::string e = check_fp8_extents(a.k, a.scaling); !e.empty()) return e;
  if (std::string e = check_rank_pointers(world, *a.b_scale, "b_scale"); !e.empty()) {
    return e + " (B's " + std::to_string(fp8_b_scales(a.n, a.k, a.scaling)) + " fp32 scales)";
  }
  const bool source = !a.a_source->empty();
  if (source) {
    if (a.scaling == Fp8Scaling::kTensor && !a.tensor_source_refusal.empty()) {
      return "argument 'a_source': " + a.tensor_source_refusal;
    }
    if (std::string e = check_rank_pointers(world, *a.a_source, "a_source"); !e.empty()) {
      return e + " (each rank's " + a.source_rows + " bf16 rows)";
    }
  }
  if (a.scaling == Fp8Scaling::kTensor && !source) {
    if (std::string e = check_rank_pointers(world, *a.a_scale, "a_scale"); !e.empty()) {
      return e + " (tensor scaling: A's one fp32 scale)";
    }
  } else if (!a.a_scale->empty()) {
    return std::string("argument 'a_scale': expected empty with ") + to_string(a.scaling) + " scaling" +
           (a.scaling == Fp8Scaling::kTensor ? " and a_source (the op computes each rank's scale as it quantises)"
                                             : " (A's scales travel in its packed rows)");
  }
  return "";
}

}  // namespace tilelink::detail
