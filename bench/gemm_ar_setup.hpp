// GEMM+AR's problem as the bench and the trace build it: make_bench_world's ranks, a heap for
// `ops` GemmAr ops (each its K slices of partials, a two-shot buffer and two signal slices; up to
// `ce_ops` of them on the copy-engine path, with every rank's slices staged), and
// per rank random A (M x K/P) and B (N x K/P) and an output; `args` names them with `config`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"

namespace tilelink::bench {

// `ce_ops` of the `ops` on the copy-engine path also stage every rank's slices (world x).
inline size_t gemm_ar_heap_bytes(int ops, uint32_t world, uint32_t m, uint32_t n, uint32_t splits, int ce_ops = 0) {
  const size_t bytes = size_t(m) * n * 2, tiles = size_t((m + 127) / 128) * ((n + 127) / 128);
  const size_t slices = std::max<size_t>(std::min<size_t>(16, 132 / tiles + 1), splits);
  const size_t rounded = (bytes + kMiB - 1) / kMiB * kMiB;
  return size_t(ops) * (slices + 1) * rounded + size_t(ce_ops) * world * slices * rounded + 8 * kMiB +
         (world + 1) * 8;
}

// Each op's two slices: the exit barrier, ready and reduced per tile, a row channel per tile row,
// and (copy-engine path) an arrival per tile row and rank and a gathered channel per tile row.
inline uint32_t gemm_ar_channels(int ops, uint32_t world, uint32_t m, uint32_t n) {
  const uint32_t tiles = ((m + 127) / 128) * ((n + 127) / 128), m_tiles = (m + 127) / 128;
  return 2 * uint32_t(ops) * (world + 1 + 2 * tiles + m_tiles + m_tiles * (world + 1)) + 1024;
}

struct GemmArSetup : BenchMemory {
  int w;
  uint32_t m, n, k_local;
  std::vector<DeviceBuffer> a, b, out;
  GemmArArguments args;

  // Room for `ops` ops alive at once, each with up to max(max_splits, config.splits, the rule's)
  // K slices.
  GemmArSetup(int world_size, uint32_t m_, uint32_t n_, uint32_t k, const GemmArConfig& config, uint64_t seed,
              int ops, const std::string& where, uint32_t max_splits = 0, int ce_ops = 1)
      : BenchMemory(world_size,
                    gemm_ar_heap_bytes(ops, uint32_t(world_size), m_, n_, std::max(max_splits, config.splits), ce_ops) +
                        size_t(gemm_ar_channels(ops, uint32_t(world_size), m_, n_)) * 8,
                    gemm_ar_channels(ops, uint32_t(world_size), m_, n_)),
        w(world_size),
        m(m_),
        n(n_),
        k_local(k / uint32_t(world_size)) {
    TL_REQUIRE(k % uint32_t(world_size) == 0, where.c_str(), "k", k, "a multiple of the world size");
    args.m = m;
    args.n = n;
    args.k = k_local;
    args.config = config;
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      a.emplace_back(size_t(m) * k_local * 2, world.device(r));
      b.emplace_back(size_t(n) * k_local * 2, world.device(r));
      out.emplace_back(size_t(m) * n * 2, world.device(r));
      fill_bf16(a[r].get(), size_t(m) * k_local, rank_seed(seed, r), world.compute_stream(r), 0.25f);
      fill_bf16(b[r].get(), size_t(n) * k_local, rank_seed(seed + 1, r), world.compute_stream(r), 0.25f);
      args.a.push_back(a[r].get());
      args.b.push_back(b[r].get());
      args.out.push_back(out[r].get());
    }
    check_implementable<GemmAr>(world, heap, args, where);
  }
  GemmArSetup(const GemmArSetup&) = delete;  // args points at the buffers
  GemmArSetup& operator=(const GemmArSetup&) = delete;
};

}  // namespace tilelink::bench
