// set_operands' one pattern: re-point an op's arguments and rebuild the kernels that hold them,
// all or nothing.
#pragma once

namespace tilelink::detail {

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
