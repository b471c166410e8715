#include "runtime/nvshmem_backend.hpp"

#include <cuda_runtime_api.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tilelink/core/error.hpp"

namespace tilelink {

static_assert(sizeof(nvshmemx_uniqueid_t) == sizeof(UniqueId::bytes), "UniqueId holds an nvshmemx_uniqueid_t");

namespace detail::nvshmem {
namespace {

std::mutex g_mutex;
bool g_initialized = false;
int g_rank = -1, g_size = 0;

void check_status(int status, const char* call) {
  if (status != 0) throw Error(std::string("NVSHMEM: ") + call + " failed with status " + std::to_string(status));
}

}  // namespace

void init(int rank, int size, const UniqueId& id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_initialized) {
    TL_REQUIRE(rank == g_rank && size == g_size, "World::process", "rank/size",
               std::to_string(rank) + "/" + std::to_string(size),
               "the rank and size NVSHMEM was initialised with in this process (" + std::to_string(g_rank) + "/" +
                   std::to_string(g_size) + ")");
    return;
  }
  // Never NVLink multicast (the project's rule; also what torch 2.11 sets for its own NVSHMEM).
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  nvshmemx_uniqueid_t uid;
  std::memcpy(&uid, id.bytes.data(), sizeof(uid));
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  check_status(nvshmemx_set_attr_uniqueid_args(rank, size, &uid, &attr), "nvshmemx_set_attr_uniqueid_args");
  check_status(nvshmemx_hostlib_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr), "nvshmemx_hostlib_init_attr");
  if (nvshmem_my_pe() != rank || nvshmem_n_pes() != size) {
    throw Error("NVSHMEM: initialised as PE " + std::to_string(nvshmem_my_pe()) + " of " +
                std::to_string(nvshmem_n_pes()) + ", expected " + std::to_string(rank) + " of " + std::to_string(size));
  }
  g_initialized = true;
  g_rank = rank;
  g_size = size;
  // Never finalised: a unique id serves one initialisation, so later Worlds of this process reuse
  // this one, and at exit nvshmem_finalize fails (and exits the process with status 255) once the
  // CUDA runtime is shutting down. The process's exit releases what NVSHMEM holds.
}

void* malloc(size_t bytes, const std::string& what) {
  void* p = nvshmem_malloc(bytes);
  if (p == nullptr) {
    throw ResourceError(what + ": nvshmem_malloc of " + std::to_string(bytes) + " bytes failed on PE " +
                        std::to_string(g_rank) + " (NVSHMEM_SYMMETRIC_SIZE / NVSHMEM_MAX_MEMORY_PER_GPU bound the " +
                        "symmetric heap)");
  }
  return p;
}

void free(void* p) {
  if (p == nullptr) return;
  // nvshmem_free is collective and synchronizes the device. After a kernel fault (a sticky error:
  // a wait's timeout trap, which under MPS tears down every client) NVSHMEM's own check would
  // exit the process with status 255 while a heap is destroyed during unwinding, before the
  // caller's TimeoutError is reported. The context is lost then: the memory goes with the process.
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  nvshmem_free(p);
}

void* peer_pointer(void* local, int pe) { return nvshmem_ptr(local, pe); }

void barrier_all() { nvshmem_barrier_all(); }

std::vector<uint64_t> all_gather_word(uint64_t mine, const std::string& what) {
  const size_t n = static_cast<size_t>(g_size);
  auto* slots = static_cast<uint64_t*>(malloc(sizeof(uint64_t) * n, what));  // collective, with a barrier
  TL_CUDA_CHECK(cudaMemcpy(slots + g_rank, &mine, sizeof(mine), cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  TL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // NVSHMEM's stream operations return nothing: a failure to enqueue shows as the CUDA runtime's
  // last error, checked after each.
  for (int pe = 0; pe < g_size; ++pe) {
    if (pe == g_rank) continue;
    nvshmemx_putmem_on_stream(slots + g_rank, slots + g_rank, sizeof(uint64_t), pe, stream);
    TL_CUDA_CHECK(cudaPeekAtLastError());
  }
  nvshmemx_quiet_on_stream(stream);
  TL_CUDA_CHECK(cudaPeekAtLastError());
  const cudaError_t done = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  TL_CUDA_CHECK(done);
  nvshmem_barrier_all();  // every PE's puts delivered
  std::vector<uint64_t> all(n);
  TL_CUDA_CHECK(cudaMemcpy(all.data(), slots, sizeof(uint64_t) * n, cudaMemcpyDeviceToHost));
  free(slots);  // collective: every PE, before any of them acts on the answer
  return all;
}

}  // namespace detail::nvshmem

UniqueId make_unique_id() {
  nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
  if (const int status = nvshmemx_get_uniqueid(&uid); status != 0) {
    throw Error("NVSHMEM: nvshmemx_get_uniqueid failed with status " + std::to_string(status));
  }
  UniqueId id;
  std::memcpy(id.bytes.data(), &uid, sizeof(uid));
  return id;
}

}  // namespace tilelink
