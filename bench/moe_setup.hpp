// The world, buffers and random inputs of a MoE layer benchmark (bench moe, trace moe):
// make_bench_world's ranks, a heap with the gathered tokens (each rank's own shard filled), the
// op's reduce-scatter slots and the baseline's; a synthetic routing (ids and uniform weights in
// [0, 1)) on every rank; per rank the experts' weights (uniform in [-1, 1) / 64, so that the
// activations stay O(1)) and the output block.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "bench/moe.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

namespace tilelink::bench {

// The synthetic routing of a bench MoE problem (m x topk expert ids), drawn from the options'
// seed: one definition for bench moe_ag, the layer's setup and tune moe's plan model.
inline std::vector<int32_t> bench_routing(const MoeBenchOptions& o) {
  std::mt19937_64 rng(o.seed);
  return synthetic_routing(rng, o.m, o.topk, o.experts, o.routing);
}

struct MoeLayerSetup : BenchMemory {
  int w;
  uint32_t m, hidden, k, rows_per_rank, n1;  // k: each expert's intermediate per rank; n1: part 1's columns
  size_t x_bytes, shard_bytes, block_elems;
  SymmetricBuffer x;
  SymmetricBuffer recv;   // the fused op's slots
  SymmetricBuffer slots;  // the baseline's reduce-scatter slots
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<DeviceBuffer> ids_dev, weights_dev, w1, w2, out;
  MoeLayerArguments args;

  MoeLayerSetup(const MoeBenchOptions& o, const char* where)
      : BenchMemory(checked_world(o, where), 3 * size_t(o.m) * o.hidden * 2 + (16u << 20), 1u << 16),
        w(o.world),
        m(o.m),
        hidden(o.hidden),
        k(o.intermediate / static_cast<uint32_t>(o.world)),
        rows_per_rank(o.m / static_cast<uint32_t>(o.world)),
        n1((o.activation == MlpActivation::kSwiGlu ? 2 : 1) * k),
        x_bytes(size_t(o.m) * o.hidden * 2),
        shard_bytes(size_t(rows_per_rank) * o.hidden * 2),
        block_elems(size_t(rows_per_rank) * o.hidden),
        x(heap.allocate(x_bytes)),
        recv(heap.allocate(x_bytes)),
        slots(heap.allocate(x_bytes)) {
    ids = bench_routing(o);
    std::mt19937_64 rng(o.seed ^ 0x44ull);  // the routing weights
    weights.resize(ids.size());
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (float& v : weights) v = unit(rng);
    args.x = &x;
    args.tokens_per_rank = rows_per_rank;
    args.hidden = hidden;
    args.intermediate = o.intermediate;
    args.experts = o.experts;
    args.topk = o.topk;
    args.recv = &recv;
    args.config.activation = o.activation;
    args.config.part1 = o.config;
    args.config.part2 = o.part2;
    args.config.use_tune_cache = o.use_tune_cache;
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      const cudaStream_t s = world.compute_stream(r);
      ids_dev.emplace_back(ids.size() * 4, dev);
      weights_dev.emplace_back(weights.size() * 4, dev);
      TL_CUDA_CHECK(cudaMemcpy(ids_dev[r].get(), ids.data(), ids_dev[r].bytes(), cudaMemcpyHostToDevice));
      TL_CUDA_CHECK(cudaMemcpy(weights_dev[r].get(), weights.data(), weights_dev[r].bytes(), cudaMemcpyHostToDevice));
      w1.emplace_back(size_t(o.experts) * n1 * hidden * 2, dev);
      w2.emplace_back(size_t(o.experts) * hidden * k * 2, dev);
      out.emplace_back(block_elems * 2, dev);
      fill_bf16(w1[r].get(), size_t(o.experts) * n1 * hidden, rank_seed(o.seed ^ 0x11ull, r), s, 1.0f / 64);
      fill_bf16(w2[r].get(), size_t(o.experts) * hidden * k, rank_seed(o.seed ^ 0x22ull, r), s, 1.0f / 64);
      fill_bf16(x.as<char>(r) + r * shard_bytes, size_t(rows_per_rank) * hidden, rank_seed(o.seed ^ 0x33ull, r), s);
      args.ids.push_back(ids_dev[r].get<int32_t>());
      args.weights.push_back(weights_dev[r].get<float>());
      args.w1.push_back(w1[r].get());
      args.w2.push_back(w2[r].get());
      args.out.push_back(out[r].get());
    }
    check_implementable<MoeLayer>(world, heap, args, where);
  }

 private:
  static int checked_world(const MoeBenchOptions& o, const char* where) {
    TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
    TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size (" + std::to_string(o.world) + ")");
    TL_REQUIRE(o.intermediate % o.world == 0, where, "intermediate", o.intermediate,
               "a multiple of the world size (" + std::to_string(o.world) + ")");
    return o.world;
  }
};

}  // namespace tilelink::bench
