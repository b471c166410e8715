// An sm90 mainloop wrapper, the mainloop's counterpart of Sm90HookedEpilogue: Base = the
// builder's TMA warp-specialized mainloop; Hook = what an op's producer warp needs besides Base's
// (what it waits on before a tile's loads, its trace), carried in the mainloop's Arguments and
// Params as `hook`. The op's mainloop derives from it and overrides load() (and, where it views
// the problem differently, to_underlying_arguments / load_init, starting from these).
#pragma once

#include <cutlass/cutlass.h>

namespace tilelink::detail {

template <class Base, class Hook>
struct Sm90HookedMainloop : Base {
  struct Arguments : Base::Arguments {
    Hook hook;
  };
  struct Params : Base::Params {
    Hook hook;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args,
                                        void* workspace) {
    return Params{Base::to_underlying_arguments(problem_shape, args, workspace), args.hook};
  }
};

}  // namespace tilelink::detail
