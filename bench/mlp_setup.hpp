// The world, buffers and random inputs of a tensor-parallel MLP benchmark (bench mlp, trace mlp):
// make_bench_world's ranks, a heap with the gathered tokens (each rank's own shard filled), the
// fc2 partials, the baseline's reduce-scatter slots and the op's receive slots (always passed, so
// that a copy-engine fc2 configuration from the tune cache applies too); per rank the weights (uniform in [-1, 1) / 64, so that the activations stay O(1)) and
// the output block.
#pragma once

#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/mlp/mlp.hpp"

namespace tilelink::bench {

struct MlpSetup : BenchMemory {
  int w;
  uint32_t m, hidden, rows, i_local, fc1_cols;
  size_t x_bytes, shard_bytes, block_elems, block_bytes;
  SymmetricBuffer x, partial;
  SymmetricBuffer slots;  // the baseline's reduce-scatter slots
  SymmetricBuffer recv;   // the op's (used by the copy-engine scatter)
  std::vector<DeviceBuffer> w1, w2, out;
  MlpArguments args;

  // m: tokens over all ranks; intermediate: over all ranks (each rank holds intermediate / w).
  MlpSetup(int world_size, uint32_t m_, uint32_t hidden_, uint32_t intermediate, const MlpConfig& config,
           uint64_t seed, const char* where)
      : BenchMemory(checked_world(world_size, where), 4 * size_t(m_) * hidden_ * 2 + (16u << 20), 1u << 16),
        w(world_size),
        m(m_),
        hidden(hidden_),
        rows(m_ / static_cast<uint32_t>(world_size)),
        i_local(intermediate / static_cast<uint32_t>(world_size)),
        fc1_cols(config.activation == MlpActivation::kSwiGlu ? 2 * i_local : i_local),
        x_bytes(size_t(m_) * hidden_ * 2),
        shard_bytes(size_t(rows) * hidden_ * 2),
        block_elems(size_t(rows) * hidden_),
        block_bytes(block_elems * 2),
        x(heap.allocate(x_bytes)),
        partial(heap.allocate(x_bytes)),
        slots(heap.allocate(x_bytes)),
        recv(heap.allocate(x_bytes)) {
    args.x = &x;
    args.partial = &partial;
    args.recv = &recv;
    args.m = m;
    args.hidden = hidden;
    args.intermediate = intermediate;
    args.config = config;
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      const cudaStream_t s = world.compute_stream(r);
      w1.emplace_back(size_t(fc1_cols) * hidden * 2, dev);
      w2.emplace_back(size_t(hidden) * i_local * 2, dev);
      out.emplace_back(block_bytes, dev);
      fill_bf16(w1[r].get(), size_t(fc1_cols) * hidden, rank_seed(seed ^ 0x11ull, r), s, 1.0f / 64);
      fill_bf16(w2[r].get(), size_t(hidden) * i_local, rank_seed(seed ^ 0x22ull, r), s, 1.0f / 64);
      fill_bf16(x.as<char>(r) + r * shard_bytes, size_t(rows) * hidden, rank_seed(seed ^ 0x33ull, r), s);
      TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, block_bytes, s));
      args.w1.push_back(w1[r].get());
      args.w2.push_back(w2[r].get());
      args.out.push_back(out[r].get());
    }
    check_implementable<Mlp>(world, heap, args, where);
  }

 private:
  static int checked_world(int world_size, const char* where) {
    TL_REQUIRE(world_size >= 1, where, "world", world_size, ">= 1");
    return world_size;
  }
};

}  // namespace tilelink::bench
