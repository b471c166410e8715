#include "tilelink/ops/common/op_method.hpp"

namespace tilelink {

const char* to_string(OpMethod m) {
  switch (m) {
    case OpMethod::kAuto: return "auto";
    case OpMethod::kFused: return "fused";
    case OpMethod::kDecomposed: return "decomposed";
    case OpMethod::kNonOverlapped: return "non_overlapped";
  }
  return "?";
}

}  // namespace tilelink
