#include "bench/gemm_helpers.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/harness.hpp"
#include "bench/nccl_baseline.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/cublas_check.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::bench {
namespace {

__global__ void fill_bf16_kernel(__nv_bfloat16* dst, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16(scale * random_float(seed, i));
  }
}

// Elements where |got - want| > 2^-6 |want| + 2^-6 (two bf16 outputs of fp32 accumulations in
// different orders differ by an ulp or two).
__global__ void count_far_kernel(const __nv_bfloat16* got, const __nv_bfloat16* want, size_t count,
                                 unsigned long long* far) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float g = __bfloat162float(got[i]), w = __bfloat162float(want[i]);
    if (!(fabsf(g - w) <= 0.015625f * fabsf(w) + 0.015625f)) ++local;
  }
  if (local != 0) atomicAdd(far, local);
}

// Set while check_against runs its reference chain: nccl_reduce_scatter then reduces exactly as
// the fused ops do.
bool g_reference_reduction = false;

struct ReferenceReduction {
  ReferenceReduction() { g_reference_reduction = true; }
  ~ReferenceReduction() { g_reference_reduction = false; }
  ReferenceReduction(const ReferenceReduction&) = delete;
  ReferenceReduction& operator=(const ReferenceReduction&) = delete;
};

}  // namespace

void fill_bf16(void* dst, size_t count, uint64_t seed, cudaStream_t stream, float scale) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), count, seed, scale);
  TL_CUDA_CHECK(cudaGetLastError());
}

uint64_t count_far(const void* got, const void* want, size_t count, cudaStream_t stream) {
  return count_on_device(stream, [&](unsigned long long* far) {
    count_far_kernel<<<1024, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(got),
                                               static_cast<const __nv_bfloat16*>(want), count, far);
  });
}

uint64_t count_far_partials(const void* got, const void* want, size_t count, double partials) {
  std::vector<__nv_bfloat16> g(count), w(count);
  TL_CUDA_CHECK(cudaMemcpy(g.data(), got, count * 2, cudaMemcpyDeviceToHost));
  TL_CUDA_CHECK(cudaMemcpy(w.data(), want, count * 2, cudaMemcpyDeviceToHost));
  double ss = 0;
  for (size_t i = 0; i < count; ++i) ss += double(__bfloat162float(w[i])) * __bfloat162float(w[i]);
  const double rms = count != 0 ? std::sqrt(ss / double(count)) : 0.0;
  uint64_t far = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want_i = __bfloat162float(w[i]);
    const double tol = std::ldexp(std::fabs(want_i), -6) + std::ldexp(rms * partials, -6) + 1e-6;
    if (!(std::fabs(double(__bfloat162float(g[i])) - want_i) <= tol)) ++far;
  }
  return far;
}

void check_against(const World& world, const std::string& what, const std::function<void()>& fused,
                   const std::function<void()>& reference, const std::vector<DeviceBuffer>& got,
                   const std::vector<DeviceBuffer>& want, size_t elems, double partials) {
  fused();
  world.synchronize();
  {
    const ReferenceReduction exact;
    reference();
    world.synchronize();
  }
  uint64_t far = 0;
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    far += partials > 0 ? count_far_partials(got[size_t(r)].get(), want[size_t(r)].get(), elems, partials)
                        : count_far(got[size_t(r)].get(), want[size_t(r)].get(), elems, world.compute_stream(r));
  }
  if (far != 0) {
    throw Error(what + ": " + std::to_string(far) + " output elements differ from the non-overlapped chain's beyond "
                "bf16 tolerance");
  }
}

// C (m x n, row-major bf16) = A (m x k, row-major) * B^T (B: n x k row-major), fp32 accumulate.
void cublas_gemm(cublasHandle_t h, const void* a, const void* b, void* c, uint32_t m, uint32_t n, uint32_t k,
                 uint32_t lda) {
  const float alpha = 1.0f, beta = 0.0f;
  TL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                               static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(k), a, CUDA_R_16BF,
                               static_cast<int>(lda == 0 ? k : lda), &beta, c, CUDA_R_16BF, static_cast<int>(n),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

GemmOpTable::GemmOpTable(const std::string& name, const std::string& title, double flop_, const Stats& gemm,
                         const Stats& non, const Stats& comm)
    : flop(flop_), t_gemm(gemm.median), t_non(non.median), ideal(std::max(gemm.median, comm.median)) {
  table.name = name;
  table.title = title;
  table.columns = {{"variant", "variant", 0},   {"time_us", "time µs", 1},      {"min_us", "min µs", 1},
                   {"max_us", "max µs", 1},     {"tflops", "TFLOP/s", 1},       {"vs_cublas", "vs cuBLAS", 3},
                   {"vs_non_overlapped", "speedup vs non-overlapped", 3}, {"vs_ideal", "ideal / time", 3}};
}

void GemmOpTable::row(const std::string& variant, const Stats& s) {
  table.add_row({variant, s.median, s.min, s.max, flop / (s.median * 1e-6) / 1e12, t_gemm / s.median, t_non / s.median,
                 ideal / s.median});
}

void GemmOpTable::ideal_row(const std::string& label) { row(label, Stats{ideal, ideal, ideal, 1}); }

void GemmOpTable::common_notes(int world, size_t samples, int warmup, bool gated) {
  table.notes.push_back("time = slowest rank's CUDA-event time per call; median (min, max) of " + std::to_string(samples) +
                        " calls after " + std::to_string(warmup) + " warm-up calls, the variants interleaved call by call");
  table.notes.push_back("TFLOP/s = 2 m n k / time over all ranks; vs cuBLAS = T_gemm / time");
  if (ranks_on_gpus()) {
    table.notes.push_back("one rank per GPU: peer traffic crosses NVLink; the non-overlapped chain's all-gather and "
                          "reduce-scatter are NCCL's (bf16 sums in NCCL's order; the check reduces in fp32 in rank "
                          "order, as the fused ops do)");
  } else if (world > 1) {
    table.notes.push_back("virtual ranks share one GPU: peer copies are HBM -> HBM, not NVLink");
  }
  if (!gated) table.notes.push_back("host enqueue time is included for some rows (a call blocked the host)");
}

Cublas::Cublas(const World& world) {
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    cublasHandle_t h = nullptr;
    TL_CUBLAS_CHECK(cublasCreate(&h));
    handles.push_back(h);
    TL_CUBLAS_CHECK(cublasSetStream(h, world.compute_stream(r)));
  }
}

Cublas::~Cublas() {
  for (cublasHandle_t h : handles) (void)cublasDestroy(h);
}

Events::Events(const World& world, int per_rank) {
  for (int r = 0; r < world.size(); ++r) {
    world.set_device(r);
    for (int i = 0; i < per_rank; ++i) {
      cudaEvent_t e = nullptr;
      TL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events.push_back(e);
    }
  }
}

Events::~Events() {
  for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
}

namespace {
__global__ void sum_slots_kernel(const __nv_bfloat16* slots, __nv_bfloat16* out, size_t elems, int world) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < elems; i += size_t(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < world; ++s) acc += __bfloat162float(slots[size_t(s) * elems + i]);
    out[i] = __float2bfloat16(acc);
  }
}
}  // namespace

void sum_slots(const void* slots, void* out, size_t elems, int world, cudaStream_t stream) {
  sum_slots_kernel<<<1024, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(slots),
                                             static_cast<__nv_bfloat16*>(out), elems, world);
  TL_CUDA_CHECK(cudaGetLastError());
}

bool baseline_uses_nccl(const World& world) { return world.mode() == WorldMode::kMultiGpu; }

const char* baseline_transport(const World& world) { return baseline_uses_nccl(world) ? "NCCL" : "copy engine"; }

void baseline_all_gather(const World& world, const SymmetricBuffer& src, const std::vector<DeviceBuffer>& dst,
                         size_t shard_bytes) {
  const int w = world.size();
  if (baseline_uses_nccl(world)) {
    std::vector<const void*> send;
    std::vector<void*> recv;
    for (int r = 0; r < w; ++r) {
      send.push_back(src.as<char>(r) + size_t(r) * shard_bytes);
      recv.push_back(dst[size_t(r)].get());
    }
    nccl_comms(world).all_gather(world, send, recv, shard_bytes);
    return;
  }
  for (int r = 0; r < w; ++r) {
    world.set_device(r);
    world.comm_after_compute(r);
    for (int s = 1; s < w; ++s) {
      const int from = (r + s) % w;
      TL_CUDA_CHECK(cudaMemcpyAsync(dst[size_t(r)].get<char>() + from * shard_bytes,
                                    static_cast<const char*>(src.data(from)) + from * shard_bytes, shard_bytes,
                                    cudaMemcpyDeviceToDevice, world.comm_stream(r)));
    }
    world.compute_after_comm(r);
  }
}

void nccl_reduce_scatter(const World& world, const std::vector<const void*>& partials, const SymmetricBuffer& slots,
                         const std::vector<DeviceBuffer>& out, size_t block_elems) {
  const int w = world.size();
  const NcclComms& nccl = nccl_comms(world);
  if (!g_reference_reduction) {
    std::vector<void*> recv;
    for (int r = 0; r < w; ++r) recv.push_back(out[size_t(r)].get());
    nccl.reduce_scatter_bf16(world, partials, recv, block_elems);
    return;
  }
  std::vector<void*> recv;
  for (int r = 0; r < w; ++r) recv.push_back(slots.data(r));
  nccl.all_to_all(world, partials, recv, block_elems * 2);
  for (int q = 0; q < w; ++q) {  // after the join into the compute stream
    world.set_device(q);
    sum_slots(slots.data(q), out[size_t(q)].get(), block_elems, w, world.compute_stream(q));
  }
}

void baseline_reduce_scatter(const World& world, const std::vector<const void*>& partials,
                             const SymmetricBuffer& slots, const std::vector<DeviceBuffer>& out, size_t block_elems,
                             const Events& events) {
  if (baseline_uses_nccl(world)) {
    nccl_reduce_scatter(world, partials, slots, out, block_elems);
    return;
  }
  const int w = world.size();
  const size_t block_bytes = block_elems * 2;
  for (int r = 0; r < w; ++r) TL_CUDA_CHECK(cudaEventRecord(events.events[size_t(r)], world.compute_stream(r)));
  for (int q = 0; q < w; ++q) {
    world.set_device(q);
    for (int r = 0; r < w; ++r) TL_CUDA_CHECK(cudaStreamWaitEvent(world.comm_stream(q), events.events[size_t(r)], 0));
    for (int s = 0; s < w; ++s) {
      TL_CUDA_CHECK(cudaMemcpyAsync(slots.as<char>(q) + s * block_bytes,
                                    static_cast<const char*>(partials[size_t(s)]) + q * block_bytes, block_bytes,
                                    cudaMemcpyDeviceToDevice, world.comm_stream(q)));
    }
    sum_slots(slots.data(q), out[size_t(q)].get(), block_elems, w, world.comm_stream(q));
    world.compute_after_comm(q);
  }
}

}  // namespace tilelink::bench
