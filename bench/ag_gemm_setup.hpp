// The world, buffers and random inputs of an AG+GEMM benchmark (bench ag_gemm, tune ag_gemm):
// make_bench_world's ranks, a heap with the gathered A (each rank's own shard filled), and per rank B and C.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"

namespace tilelink::bench {

struct AgGemmSetup : BenchMemory {
  int w;
  uint32_t m, n_local, k, m_per_rank;
  size_t a_bytes, shard_bytes, c_elems;
  SymmetricBuffer gathered;
  std::vector<DeviceBuffer> b, c;

  // n: columns over all ranks. `min_comm_rows`: the finest communication tile to make signal
  // channels for (1 when unknown).
  AgGemmSetup(int world_size, uint32_t m_, uint32_t n, uint32_t k_, uint64_t seed, uint32_t min_comm_rows)
      : BenchMemory(world_size,
                    size_t(m_) * k_ * 2 + size_t(channels(m_, world_size, min_comm_rows)) * 8 + (8u << 20),
                    channels(m_, world_size, min_comm_rows)),
        w(world_size),
        m(m_),
        n_local(n / static_cast<uint32_t>(world_size)),
        k(k_),
        m_per_rank(m_ / static_cast<uint32_t>(world_size)),
        a_bytes(size_t(m_) * k_ * 2),
        shard_bytes(size_t(m_per_rank) * k_ * 2),
        c_elems(size_t(m_) * n_local),
        gathered(heap.allocate(a_bytes)) {
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      b.emplace_back(size_t(n_local) * k * 2, dev);
      c.emplace_back(c_elems * 2, dev);
      const cudaStream_t s = world.compute_stream(r);
      fill_bf16(b[r].get(), size_t(n_local) * k, rank_seed(seed, r), s);
      fill_bf16(static_cast<char*>(gathered.data(r)) + r * shard_bytes, size_t(m_per_rank) * k,
                rank_seed(seed ^ 0xA11A11ull, r), s);
      TL_CUDA_CHECK(cudaMemsetAsync(c[r].get(), 0xFF, c[r].bytes(), s));
    }
  }

  AgGemmArguments args(const AgGemmConfig& config) const {
    AgGemmArguments a;
    a.a = &gathered;
    a.m_per_rank = m_per_rank;
    a.n = n_local;
    a.k = k;
    a.config = config;
    for (int r = 0; r < w; ++r) {
      a.b.push_back(b[r].get());
      a.c.push_back(c[r].get());
    }
    return a;
  }

  // The all-gather's channels for tiles of `min_comm_rows` rows of m rows over the world, for
  // four ops (the bench's fused op, its two other methods and the op on auto), and spares.
  static uint32_t channels(uint32_t m, int world_size, uint32_t min_comm_rows) {
    AllGatherPlan plan;
    plan.map = RowShardMapping{m / static_cast<uint32_t>(world_size), std::max(1u, min_comm_rows),
                               static_cast<uint32_t>(world_size)};
    return 4 * plan.num_channels() + 64;
  }
};

}  // namespace tilelink::bench
