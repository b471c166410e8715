// set_operands' one pattern: re-point an op's arguments and rebuild the kernels that hold them,
// all or nothing.
#pragma once

#include <string>

#include "runtime/checks.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {

// A per-call pointer that an op takes exactly when it was built with one (AgGemm's a_source,
// Mlp's x_source): `p` must be null when `built_with` is false, else a 16-byte aligned pointer to
// `what` -- otherwise InvalidArgument naming `where`, `name` and which the op expected.
inline void require_as_built(const char* where, const char* name, bool built_with, const void* p,
                             const std::string& what) {
  if (built_with != (p != nullptr)) {
    throw InvalidArgument(std::string(where) + ": argument '" + name + "' = " + (p != nullptr ? "a pointer" : "null") +
                          ": expected " + (built_with ? what + " (the op was built with " + name + ")"
                                                      : "null (the op was built without " + std::string(name) + ")"));
  }
  if (p != nullptr) require_aligned(where, name, p, "16-byte aligned: " + what);
}

// `update(args)` changes the arguments, then `rebuild()` makes the kernels from them; if the
// rebuild throws, the arguments are put back as they were (they keep naming what the kernels
// hold) and the error goes on.
template <class Args, class Update, class Rebuild>
void repoint(Args& args, Update&& update, Rebuild&& rebuild) {
  const Args before = args;
  update(args);
  try {
    rebuild();
  } catch (...) {
    args = before;
    throw;
  }
}

}  // namespace tilelink::detail
