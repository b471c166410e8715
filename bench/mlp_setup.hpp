// The world, buffers and random inputs of a tensor-parallel MLP benchmark (bench mlp, trace mlp):
// make_bench_world's ranks, a heap with the gathered tokens (each rank's own shard filled), the
// fc2 partials, the baseline's reduce-scatter slots and the op's receive slots (always passed, so
// that a copy-engine fc2 configuration from the tune cache applies too); per rank the weights (uniform in [-1, 1) / 64, so that the activations stay O(1)) and
// the output block.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "bench/gemm_helpers.hpp"
#include "bench/random.hpp"
#include "bench/setup.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/common/fp8_quantize.hpp"
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
  // dtype e4m3: the same block in FP8 (`fp8`): the weights quantised (w1_8, w2_8 and their scales),
  // the tokens' packed rows in x8 -- quantised on send from each rank's bf16 rows of `x`, or, with
  // tensor scaling, written here with the ranks' largest scale.
  SymmetricBuffer x8;
  std::vector<DeviceBuffer> w1_8, w2_8, w1_scale, w2_scale, x_scale;
  MlpArguments fp8;

  // m: tokens over all ranks; intermediate: over all ranks (each rank holds intermediate / w).
  MlpSetup(int world_size, uint32_t m_, uint32_t hidden_, uint32_t intermediate, const MlpConfig& config,
           uint64_t seed, const char* where, DType dtype = DType::kBf16, Fp8Scaling scaling = Fp8Scaling::kRow)
      : BenchMemory(checked_world(world_size, where),
                    (dtype == DType::kE4m3 ? 5 : 4) * size_t(m_) * hidden_ * 2 + (16u << 20), 1u << 16),
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
    if (dtype == DType::kE4m3) make_fp8(scaling, where);
  }

 private:
  void make_fp8(Fp8Scaling scaling, const char* where) {
    for (uint32_t k : {hidden, i_local}) {
      if (std::string e = check_fp8_extents(k, scaling); !e.empty()) throw InvalidArgument(std::string(where) + ": " + e);
    }
    const uint64_t pitch = fp8_row_pitch(hidden, scaling);
    x8 = heap.allocate(size_t(m) * pitch);
    fp8 = args;
    fp8.x = &x8;
    fp8.dtype = DType::kE4m3;
    fp8.scaling = scaling;
    fp8.w1.clear();
    fp8.w2.clear();
    float tensor_scale = 0.0f;  // tensor scaling: the largest rank's
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      const int dev = world.device(r);
      const cudaStream_t s = world.compute_stream(r);
      w1_8.emplace_back(size_t(fc1_cols) * hidden, dev);
      w2_8.emplace_back(size_t(hidden) * i_local, dev);
      w1_scale.emplace_back(fp8_b_scales(fc1_cols, hidden, scaling) * 4 + 16, dev);
      w2_scale.emplace_back(fp8_b_scales(hidden, i_local, scaling) * 4 + 16, dev);
      x_scale.emplace_back(16, dev);
      quantize_weight_e4m3(w1[r].get(), fc1_cols, hidden, scaling, w1_8[r].get(), w1_scale[r].get<float>(), s);
      quantize_weight_e4m3(w2[r].get(), hidden, i_local, scaling, w2_8[r].get(), w2_scale[r].get<float>(), s);
      fp8.w1.push_back(w1_8[r].get());
      fp8.w2.push_back(w2_8[r].get());
      fp8.w1_scale.push_back(w1_scale[r].get<float>());
      fp8.w2_scale.push_back(w2_scale[r].get<float>());
      const char* own = x.as<char>(r) + r * shard_bytes;
      if (scaling != Fp8Scaling::kTensor) {
        fp8.x_source.push_back(own);
        continue;
      }
      tensor_scale_e4m3(own, hidden, rows, hidden, x_scale[r].get<float>(), s);
      float v = 0.0f;
      TL_CUDA_CHECK(cudaMemcpyAsync(&v, x_scale[r].get(), 4, cudaMemcpyDeviceToHost, s));
      TL_CUDA_CHECK(cudaStreamSynchronize(s));
      tensor_scale = std::max(tensor_scale, v);
    }
    for (int r = 0; r < w && scaling == Fp8Scaling::kTensor; ++r) {
      world.set_device(r);
      const cudaStream_t s = world.compute_stream(r);
      TL_CUDA_CHECK(cudaMemcpyAsync(x_scale[r].get(), &tensor_scale, 4, cudaMemcpyHostToDevice, s));
      quantize_rows_e4m3(x.as<char>(r) + r * shard_bytes, hidden, rows, hidden, scaling, x_scale[r].get<float>(),
                         x8.as<char>(r) + r * rows * pitch, s);
      TL_CUDA_CHECK(cudaStreamSynchronize(s));
      fp8.x_scale.push_back(x_scale[r].get<float>());
    }
    world.synchronize();
    check_implementable<Mlp>(world, heap, fp8, where);
  }

  static int checked_world(int world_size, const char* where) {
    TL_REQUIRE(world_size >= 1, where, "world", world_size, ">= 1");
    return world_size;
  }
};

}  // namespace tilelink::bench
