// The world, buffers and random inputs of an AG+GEMM benchmark (bench ag_gemm, tune ag_gemm):
// make_bench_world's ranks, a heap with the gathered A (each rank's own shard filled), and per rank B and C.
// With dtype e4m3 the operands are FP8 (ops/common/fp8.hpp): each rank's bf16 shard (`source`) is
// quantised into its packed rows of the gathered A, B into e4m3 with its scales (`b_scale`); tensor
// scaling's one A scale (`a_scale`, per rank: the largest rank's, so every rank's shard fits) too.
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
#include "tilelink/ops/common/fp8_quantize.hpp"

namespace tilelink::bench {

struct AgGemmSetup : BenchMemory {
  int w;
  uint32_t m, n_local, k, m_per_rank;
  DType dtype;
  Fp8Scaling scaling;
  uint64_t pitch;  // bytes of one gathered row (bf16: 2 k)
  size_t a_bytes, shard_bytes, c_elems;
  SymmetricBuffer gathered;
  std::vector<DeviceBuffer> b, c;
  std::vector<DeviceBuffer> source, b_scale, a_scale;  // e4m3 only

  // n: columns over all ranks. `min_comm_rows`: the finest communication tile to make signal
  // channels for (1 when unknown).
  AgGemmSetup(int world_size, uint32_t m_, uint32_t n, uint32_t k_, uint64_t seed, uint32_t min_comm_rows,
              DType dtype_ = DType::kBf16, Fp8Scaling scaling_ = Fp8Scaling::kTensor)
      : BenchMemory(world_size,
                    size_t(m_) * row_pitch(k_, dtype_, scaling_) + size_t(channels(m_, world_size, min_comm_rows)) * 8 +
                        (8u << 20),
                    channels(m_, world_size, min_comm_rows)),
        w(world_size),
        m(m_),
        n_local(n / static_cast<uint32_t>(world_size)),
        k(k_),
        m_per_rank(m_ / static_cast<uint32_t>(world_size)),
        dtype(dtype_),
        scaling(scaling_),
        pitch(row_pitch(k_, dtype_, scaling_)),
        a_bytes(size_t(m_) * pitch),
        shard_bytes(size_t(m_per_rank) * pitch),
        c_elems(size_t(m_) * n_local),
        gathered(heap.allocate(a_bytes)) {
    const bool fp8 = dtype == DType::kE4m3;
    if (fp8) {
      if (std::string e = check_fp8_extents(k, scaling); !e.empty()) throw InvalidArgument("AgGemmSetup: " + e);
    }
    float tensor_scale = 0.0f;  // tensor scaling: the largest rank's
    for (int r = 0; r < w; ++r) {
      const int dev = world.device(r);
      const cudaStream_t s = world.compute_stream(r);
      c.emplace_back(c_elems * 2, dev);
      TL_CUDA_CHECK(cudaMemsetAsync(c[r].get(), 0xFF, c[r].bytes(), s));
      if (!fp8) {
        b.emplace_back(size_t(n_local) * k * 2, dev);
        fill_bf16(b[r].get(), size_t(n_local) * k, rank_seed(seed, r), s);
        fill_bf16(static_cast<char*>(gathered.data(r)) + r * shard_bytes, size_t(m_per_rank) * k,
                  rank_seed(seed ^ 0xA11A11ull, r), s);
        continue;
      }
      DeviceBuffer b_bf16(size_t(n_local) * k * 2, dev);
      fill_bf16(b_bf16.get(), size_t(n_local) * k, rank_seed(seed, r), s);
      b.emplace_back(size_t(n_local) * k, dev);
      b_scale.emplace_back(fp8_b_scales(n_local, k, scaling) * 4 + 16, dev);
      quantize_weight_e4m3(b_bf16.get(), n_local, k, scaling, b[r].get(), b_scale[r].get<float>(), s);
      source.emplace_back(size_t(m_per_rank) * k * 2, dev);
      fill_bf16(source[r].get(), size_t(m_per_rank) * k, rank_seed(seed ^ 0xA11A11ull, r), s);
      a_scale.emplace_back(16, dev);
      if (scaling == Fp8Scaling::kTensor) {
        tensor_scale_e4m3(source[r].get(), k, m_per_rank, k, a_scale[r].get<float>(), s);
        float v = 0.0f;
        TL_CUDA_CHECK(cudaMemcpyAsync(&v, a_scale[r].get(), 4, cudaMemcpyDeviceToHost, s));
        TL_CUDA_CHECK(cudaStreamSynchronize(s));  // b_bf16 is freed after this iteration, too
        tensor_scale = std::max(tensor_scale, v);
      } else {
        TL_CUDA_CHECK(cudaStreamSynchronize(s));  // b_bf16 is freed after this iteration
      }
    }
    for (int r = 0; r < w && fp8; ++r) {  // each rank's own packed rows
      const cudaStream_t s = world.compute_stream(r);
      if (scaling == Fp8Scaling::kTensor) {
        TL_CUDA_CHECK(cudaMemcpyAsync(a_scale[r].get(), &tensor_scale, 4, cudaMemcpyHostToDevice, s));
      }
      quantize_rows_e4m3(source[r].get(), k, m_per_rank, k, scaling, a_scale[r].get<float>(),
                         static_cast<char*>(gathered.data(r)) + r * shard_bytes, s);
      TL_CUDA_CHECK(cudaStreamSynchronize(s));  // the host's tensor_scale is read by the copy above
    }
  }

  AgGemmArguments args(const AgGemmConfig& config) const {
    AgGemmArguments a;
    a.a = &gathered;
    a.m_per_rank = m_per_rank;
    a.n = n_local;
    a.k = k;
    a.config = config;
    a.dtype = dtype;
    a.scaling = scaling;
    for (int r = 0; r < w; ++r) {
      a.b.push_back(b[r].get());
      a.c.push_back(c[r].get());
      if (dtype != DType::kE4m3) continue;
      a.b_scale.push_back(b_scale[r].get<float>());
      if (scaling == Fp8Scaling::kTensor) a.a_scale.push_back(a_scale[r].get<float>());
    }
    return a;
  }

  static uint64_t row_pitch(uint32_t k, DType dtype, Fp8Scaling scaling) {
    return dtype == DType::kE4m3 ? fp8_row_pitch(k, scaling) : uint64_t(k) * 2;
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
