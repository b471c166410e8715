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
#include "bench/world_choice.hpp"
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

// The same for a result summed from `partials` bf16-rounded partials (ranks x K slices, as GEMM+AR's
// engine sums them): |got - want| > 2^-6 |want| + 2^-6 rms(want) partials, each partial's rounding
// being up to 2^-9 of its own magnitude, which the result's rms bounds. On the host.
uint64_t count_far_partials(const void* got, const void* want, size_t count, double partials);

// Runs `fused` and then `reference` once on every rank and throws Error("<what>: N output
// elements differ ...") unless each rank's `got` matches its `want` (count_far, or with
// `partials` > 0 count_far_partials) over `elems`. The reference runs with the baselines'
// reduce-scatter in its exact form (nccl_reduce_scatter).
void check_against(const World& world, const std::string& what, const std::function<void()>& fused,
                   const std::function<void()>& reference, const std::vector<DeviceBuffer>& got,
                   const std::vector<DeviceBuffer>& want, size_t elems, double partials = 0);

// C (m x n, row-major bf16) = A (m x k, row-major; row pitch lda) * B^T (B: n x k row-major).
void cublas_gemm(cublasHandle_t h, const void* a, const void* b, void* c, uint32_t m, uint32_t n, uint32_t k,
                 uint32_t lda = 0);

// out (elems bf16) = sum over s = 0..world-1 of slots[s] (elems bf16 each, consecutive), in fp32
// in rank order: the reduction of the reduce-scatter baselines.
void sum_slots(const void* slots, void* out, size_t elems, int world, cudaStream_t stream);

// The non-overlapped chains' collectives go through NCCL when the ranks are on separate GPUs (the
// paper's "cuBLAS + NCCL" baselines) and through the copy engine on virtual ranks (NCCL needs a
// GPU per rank). baseline_transport: "NCCL" or "copy engine", for the tables.
bool baseline_uses_nccl(const World& world);
const char* baseline_transport(const World& world);

// The baselines' all-gather: every rank's `dst` (the whole gathered tensor, shard s at s *
// shard_bytes) receives each peer's own shard of `src` (at the same offset) on the rank's comm
// stream, ordered after its compute stream and joined back into it. The rank's own shard must
// already be in `dst`.
void baseline_all_gather(const World& world, const SymmetricBuffer& src, const std::vector<DeviceBuffer>& dst,
                         size_t shard_bytes);

struct Events;

// The baselines' reduce-scatter: out[q] = the sum over s of block q (block_elems bf16 at q *
// block_elems) of partials[s], joined back into q's compute stream.
//  - copy engine: every owner q, on its comm stream after every rank's compute stream (events:
//    one per rank), copies block q of each partials[s] into slot s of its `slots` and sums the
//    slots in fp32 in rank order (sum_slots), as the fused ops reduce;
//  - NCCL: nccl_reduce_scatter.
void baseline_reduce_scatter(const World& world, const std::vector<const void*>& partials,
                             const SymmetricBuffer& slots, const std::vector<DeviceBuffer>& out, size_t block_elems,
                             const Events& events);

// The NCCL reduce-scatter of the baselines (bench gemm_rs calls it for its own chain): NCCL's
// bf16 reduce-scatter, which rounds to bf16 at every step of its algorithm. Inside
// check_against's reference call NCCL instead moves the blocks into `slots` and sum_slots adds
// them in fp32 in rank order: the check then compares the fused ops with the same reduction,
// while the timed calls measure what a "cuBLAS + NCCL" chain runs.
void nccl_reduce_scatter(const World& world, const std::vector<const void*>& partials, const SymmetricBuffer& slots,
                         const std::vector<DeviceBuffer>& out, size_t block_elems);

// The table of a GEMM op's benchmark: time, TFLOP/s and ratios to cuBLAS (T_gemm), to the
// non-overlapped chain and to the ideal max(T_gemm, T_comm), one row per variant.
struct GemmOpTable {
  Table table;
  double flop, t_gemm, t_non, ideal;
  GemmOpTable(const std::string& name, const std::string& title, double flop, const Stats& gemm, const Stats& non,
              const Stats& comm);
  void row(const std::string& variant, const Stats& s);
  void ideal_row(const std::string& label = "ideal max(T_gemm, T_comm)");
  // The notes every GEMM op's table carries (timing method, units, where the ranks run and the
  // baselines' transport, gating).
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
