// Helpers of the GEMM-op benchmarks (ag_gemm.cu, gemm_rs.cu): bf16 random fills, a bf16
// closeness count, cuBLAS as the reference and baseline GEMM, per-rank cuBLAS handles and events.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "bench/report.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

// `count` bf16 values scale * random_float(seed, i) (uniform in [-1, 1) on a 2^-10 grid; a
// power-of-two scale keeps them exact).
void fill_bf16(void* dst, size_t count, uint64_t seed, cudaStream_t stream, float scale = 1.0f);

// Elements where |got - want| > 2^-6 |want| + 2^-6 (two bf16 results of fp32 accumulations in
// different orders differ by an ulp or two). Synchronises `stream`.
uint64_t count_far(const void* got, const void* want, size_t count, cudaStream_t stream);

// Runs `fused` and then `reference` once on every rank and throws Error("<what>: N output
// elements differ ...") unless each rank's `got` matches its `want` (count_far) over `elems`.
void check_against(const World& world, const std::string& what, const std::function<void()>& fused,
                   const std::function<void()>& reference, const std::vector<DeviceBuffer>& got,
                   const std::vector<DeviceBuffer>& want, size_t elems);

// C (m x n, row-major bf16) = A (m x k, row-major; row pitch lda) * B^T (B: n x k row-major).
void cublas_gemm(cublasHandle_t h, const void* a, const void* b, void* c, uint32_t m, uint32_t n, uint32_t k,
                 uint32_t lda = 0);

// out (elems bf16) = sum over s = 0..world-1 of slots[s] (elems bf16 each, consecutive), in fp32
// in rank order: the reduction of the reduce-scatter baselines.
void sum_slots(const void* slots, void* out, size_t elems, int world, cudaStream_t stream);

// The baselines' all-gather on the copy engine: every rank's `dst` (the whole gathered tensor,
// shard s at s * shard_bytes) receives each peer's own shard of `src` on the rank's comm stream,
// ordered after its compute stream and joined back into it. The rank's own shard must already
// be in `dst`.
void copy_engine_all_gather(const World& world, const SymmetricBuffer& src, const std::vector<DeviceBuffer>& dst,
                            size_t shard_bytes);

struct Events;

// The baselines' reduce-scatter on the copy engine: every owner q, on its comm stream after every
// rank's compute stream (events: one per rank), copies block q (block_elems bf16 at q *
// block_elems) of each rank's partials[s] into slot s of its `slots`, sums the slots in rank
// order into out[q] (sum_slots) and is joined back into q's compute stream.
void copy_engine_reduce_scatter(const World& world, const std::vector<const void*>& partials,
                                const SymmetricBuffer& slots, const std::vector<DeviceBuffer>& out, size_t block_elems,
                                const Events& events);

// The table of a GEMM op's benchmark: time, TFLOP/s and ratios to cuBLAS (T_gemm), to the
// non-overlapped chain and to the ideal max(T_gemm, T_comm), one row per variant.
struct GemmOpTable {
  Table table;
  double flop, t_gemm, t_non, ideal;
  GemmOpTable(const std::string& name, const std::string& title, double flop, const Stats& gemm, const Stats& non,
              const Stats& comm);
  void row(const std::string& variant, const Stats& s);
  void ideal_row(const std::string& label = "ideal max(T_gemm, T_comm)");
  // The notes every GEMM op's table carries (timing method, units, virtual ranks, gating).
  void common_notes(int world, size_t samples, int warmup, bool gated);
};

// One cuBLAS handle per rank, bound to the rank's compute stream.
struct Cublas {
  std::vector<cublasHandle_t> handles;
  explicit Cublas(const World& world);
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
};

// `per_rank` timing-free events on each rank's device; event i of rank r is events[r * per_rank + i].
struct Events {
  std::vector<cudaEvent_t> events;
  Events(const World& world, int per_rank);
  ~Events();
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

}  // namespace tilelink::bench
