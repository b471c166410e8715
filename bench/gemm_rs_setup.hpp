// The world, buffers and random inputs of a GEMM+RS benchmark (bench, trace and tune gemm_rs):
// make_bench_world's ranks, a heap with every rank's partial, the baselines' slots and the op's
// receive slots (always passed, so that a copy-engine configuration from the tune cache applies
// too), per rank A, B and the output block.
#pragma once

#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"

namespace tilelink::bench {

// The small-M engine's own heap buffers, where the estimate may take it (M up to 512): up to 16 K
// slices of M x N bf16 partials per rank, and on the copy-engine path every rank's as many again.
inline size_t small_m_headroom(int world, uint32_t m, uint32_t n) {
  return m <= 512 ? size_t(16) * (world + 1) * m * n * 2 : 0;
}

struct GemmRsSetup : BenchMemory {
  int w;
  uint32_t m, n, k_local, rows;
  size_t partial_bytes, block_elems, block_bytes;
  SymmetricBuffer partial;
  SymmetricBuffer recv;        // the baselines' slots: w x rows x n
  SymmetricBuffer fused_recv;  // the op's (used by the copy-engine scatter)
  std::vector<DeviceBuffer> a, b, out;
  GemmRsArguments args;

  // m: output rows over all ranks; k: the inner dimension over all ranks (each rank holds k / w).
  GemmRsSetup(int world_size, uint32_t m_, uint32_t n_, uint32_t k, const GemmRsConfig& config, uint64_t seed,
              const char* where)
      : BenchMemory(checked_world(world_size, m_, k, where),
                    3 * size_t(m_) * n_ * 2 + (16u << 20) + small_m_headroom(world_size, m_, n_),
                    1u << 17),  // three ops' slices
        w(world_size),
        m(m_),
        n(n_),
        k_local(k / static_cast<uint32_t>(world_size)),
        rows(m_ / static_cast<uint32_t>(world_size)),
        partial_bytes(size_t(m_) * n_ * 2),
        block_elems(size_t(rows) * n_),
        block_bytes(block_elems * 2),
        partial(heap.allocate(partial_bytes)),
        recv(heap.allocate(partial_bytes)),
        fused_recv(heap.allocate(partial_bytes)) {
    args.partial = &partial;
    args.recv = &fused_recv;
    args.m = m;
    args.n = n;
    args.k = k_local;
    args.config = config;
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      a.emplace_back(size_t(m) * k_local * 2, dev);
      b.emplace_back(size_t(n) * k_local * 2, dev);
      out.emplace_back(block_bytes, dev);
      fill_bf16(a[r].get(), size_t(m) * k_local, rank_seed(seed, r), world.compute_stream(r));
      fill_bf16(b[r].get(), size_t(n) * k_local, rank_seed(seed ^ 0xB0B0ull, r), world.compute_stream(r));
      TL_CUDA_CHECK(cudaMemsetAsync(out[r].get(), 0xFF, block_bytes, world.compute_stream(r)));
      args.a.push_back(a[r].get());
      args.b.push_back(b[r].get());
      args.out.push_back(out[r].get());
    }
    check_implementable<GemmRs>(world, heap, args, where);
  }

  // e4m3 operands (bench, tune and trace gemm_rs --dtype e4m3): each rank's A quantised into
  // packed rows (a8; tensor scaling: the rank's own scale in a_scale), B into e4m3 with its scales;
  // `args` then names them. The bf16 A stays in `a` (a quantise-first op's source).
  std::vector<DeviceBuffer> a8, a_scale, b8, b_scale;
  void use_fp8(Fp8Scaling scaling, const char* where) {
    if (std::string e = check_fp8_extents(k_local, scaling); !e.empty()) {
      throw InvalidArgument(std::string(where) + ": each rank's k = " + std::to_string(k_local) + ": " + e);
    }
    const uint64_t pitch = fp8_row_pitch(k_local, scaling);
    args.dtype = DType::kE4m3;
    args.scaling = scaling;
    args.a.clear();
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      const int dev = world.device(r);
      const cudaStream_t st = world.compute_stream(r);
      a8.emplace_back(size_t(m) * pitch, dev);
      a_scale.emplace_back(16, dev);
      b8.emplace_back(size_t(n) * k_local, dev);
      b_scale.emplace_back(fp8_b_scales(n, k_local, scaling) * 4 + 16, dev);
      if (scaling == Fp8Scaling::kTensor) tensor_scale_e4m3(a[r].get(), k_local, m, k_local, a_scale[r].get<float>(), st);
      quantize_rows_e4m3(a[r].get(), k_local, m, k_local, scaling, a_scale[r].get<float>(), a8[r].get(), st);
      quantize_weight_e4m3(b[r].get(), n, k_local, scaling, b8[r].get(), b_scale[r].get<float>(), st);
      args.a.push_back(a8[r].get());
      args.b[r] = b8[r].get();
      args.b_scale.push_back(b_scale[r].get<float>());
      if (scaling == Fp8Scaling::kTensor) args.a_scale.push_back(a_scale[r].get<float>());
    }
    world.synchronize();
    check_implementable<GemmRs>(world, heap, args, where);
  }

 private:
  // `world_size` once it, m and k are checked, before any rank is made.
  static int checked_world(int world_size, uint32_t m, uint32_t k, const char* where) {
    TL_REQUIRE(world_size >= 1, where, "world", world_size, ">= 1");
    TL_REQUIRE(m > 0 && m % world_size == 0, where, "m", m,
               "a positive multiple of the world size " + std::to_string(world_size) +
                   " (the baselines reduce-scatter equal blocks; the op itself takes any m)");
    TL_REQUIRE(k % world_size == 0 && (k / world_size) % 8 == 0, where, "k", k,
               "a multiple of 8 * world (" + std::to_string(8 * world_size) + "): K is split over the ranks");
    return world_size;
  }
};

}  // namespace tilelink::bench
