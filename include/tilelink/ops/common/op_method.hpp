// How an overlapped op runs a call (issue 21: "never slower than not overlapping"). Every op has
// the knob; kFused is what the op is for, the other two are the plain chains users would write
// instead, as real code paths of the op, so that the automatic choice can take them where they
// win (a small M whose GEMM is shorter than its communication, a machine whose links are slower
// than the model's).
#pragma once

#include <cstdint>

namespace tilelink {

enum class OpMethod : uint32_t {
  kAuto = 0,           // the tune cache's measured winner for this GPU, world and shape, else the
                       // op's estimate (the op says which ran and why)
  kFused = 1,          // one kernel per rank that waits for (or notifies) the communication per tile
  kDecomposed = 2,     // the communication per rank's chunk, a plain GEMM per chunk once it is in
                       // (PyTorch async-TP's decomposition)
  kNonOverlapped = 3,  // all of the communication, then the plain GEMM (or the GEMM, then all of it)
};
const char* to_string(OpMethod m);  // "auto", "fused", "decomposed", "non_overlapped"

}  // namespace tilelink
