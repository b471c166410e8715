// What every benchmark setup (bench/*_setup.hpp) starts and ends with: its ranks with their heap
// and signals first, and the op's check of the arguments it built last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

// make_bench_world's ranks, a symmetric heap of `heap_bytes` per rank and `channels` signal
// channels on it. Setups derive from it, so it is made before their buffers.
struct BenchMemory {
  World world;
  SymmetricHeap heap;
  SignalSet signals;

  BenchMemory(int world_size, size_t heap_bytes, uint32_t channels)
      : world(make_bench_world(world_size)), heap(world, heap_bytes), signals(heap, channels) {}
};

// A setup's last step: InvalidArgument "<where>: <why>" when `Op` refuses the arguments it built.
template <class Op, class Args>
void check_implementable(const World& world, const SymmetricHeap& heap, const Args& args, const std::string& where) {
  if (const std::string why = Op::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument(where + ": " + why);
  }
}

}  // namespace tilelink::bench
