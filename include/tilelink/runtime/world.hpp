// World: the ranks of one job and the ones this process drives.
//
//  - multi_gpu(devices): one process, one rank per GPU, peer access enabled between every pair;
//    signals use .sys scope.
//  - virtual_ranks(n): one process, n ranks on one GPU, each with its own memory, streams and an SM
//    budget of floor(SMs / n), so that every rank's persistent kernel can be resident at once (a
//    rank that spins on a peer whose blocks cannot get an SM would deadlock). Signals use .gpu
//    scope.
//  - process(...): one process per rank (torchrun, `tilelink launch`), each on its own GPU or
//    several on one GPU under MPS. The symmetric heap comes from NVSHMEM, peers' memory is mapped by
//    nvshmem_ptr, signals use .sys scope. This process drives only its own rank: local_ranks() is
//    {rank()}, and an op's per-rank arguments need only that rank's entry.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilelink/primitives/host.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/runtime/error_channel.hpp"

namespace tilelink {

struct WorldOptions {
  // Bound of every device wait and of World::synchronize on stalled stream waits.
  // The environment variable TILELINK_WAIT_TIMEOUT_MS overrides it.
  uint64_t wait_timeout_ns = 5'000'000'000ull;
  // Bound of World::barrier in a process world (a collective step: building an op, claiming
  // signals, tilelink.init). Processes reach those at times their own work decides (loading data,
  // the first call of a shape), so it is as long as NCCL's default; a rank that has not arrived by
  // then is named in a TimeoutError. TILELINK_BARRIER_TIMEOUT_MS overrides it.
  uint64_t barrier_timeout_ns = 600'000'000'000ull;
  // How the host-driven (copy-engine) communication reaches peers (primitives/host.hpp). Process
  // worlds only may take kPutSignal: every stream transfer and signal to another rank then goes
  // through NVSHMEM's put-with-signal, as it must for a peer on another node, and no peer's memory
  // is mapped into this process (SymmetricHeap::base of a peer is null); on one node it tests that
  // path. kAuto (the default) is kLoadStore when every process maps every peer's memory
  // (nvshmem_ptr: one node), else kPutSignal (a job across nodes); kLoadStore with a peer that
  // cannot be mapped is refused. TILELINK_TRANSPORT=load_store|put_signal|auto overrides it in a
  // process world; one-process worlds are load/store. Kernels that load or store peers' memory
  // themselves (SM all-gathers, GEMM+RS's pull and epilogue scatters, the MoE epilogue combine,
  // GEMM+AR's sm path) are refused under kPutSignal by their ops.
  Transport transport = Transport::kAuto;
};

enum class WorldMode { kVirtual, kMultiGpu, kProcess };

// NVSHMEM's unique id (nvshmemx_uniqueid_t): made once by one process of a job (make_unique_id),
// handed to every other process (torch.distributed, `tilelink launch`), then World::process.
struct UniqueId {
  std::array<unsigned char, 128> bytes{};
  std::string to_hex() const;
  // Throws InvalidArgument unless `hex` is 256 hex digits.
  static UniqueId from_hex(const std::string& hex, const char* where);
};
UniqueId make_unique_id();

// This process's place in a process-per-rank job.
struct ProcessRank {
  int rank = 0;
  int size = 1;
  int device = 0;  // the CUDA device this process's rank runs on
};

constexpr int kMaxWorldSize = 64;

// CUDA maps a device's streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware work queues (default 8,
// at most 32), read when the device's context is created. A stream that waits on a stream memop
// (rank_wait) blocks its queue, and with it every stream mapped to the same queue: a kernel there
// that would satisfy the wait never starts. A World therefore needs a queue for each of its
// streams on a device. configure_cuda_environment() sets CUDA_DEVICE_MAX_CONNECTIONS=32 unless
// the process already set it; it only takes effect before the device's context exists, so call
// it first thing in main() (World's factories call it too, and refuse worlds that do not fit).
void configure_cuda_environment();

// Hardware queues a device needs for `ranks_on_device` ranks of one World, each with its two
// streams and `extra_streams_per_rank` more (an op's SideStreams), plus the world's watch stream.
// `tilelink launch --mps` gives each process hardware_queues_needed(1).
constexpr int hardware_queues_needed(int ranks_on_device, int extra_streams_per_rank = 0) {
  return (2 + extra_streams_per_rank) * ranks_on_device + 1;
}

// Loads `kernel`'s module on the current device now. CUDA loads modules lazily by default, and a
// kernel's first launch may then wait for the device to go idle: if a peer rank's kernel is
// spinning on this one at that moment, the launch stalls until that wait times out. Preload every
// kernel that runs next to a spinning one before its first launch (TileLink's ops do this for
// theirs), or run with CUDA_MODULE_LOADING=EAGER.
void preload_kernel(const void* kernel);
template <class... Args>
void preload_kernel(void (*kernel)(Args...)) {
  preload_kernel(reinterpret_cast<const void*>(kernel));
}

class World {
 public:
  static World virtual_ranks(int world_size, int device = 0, WorldOptions options = {});
  static World multi_gpu(const std::vector<int>& devices, WorldOptions options = {});
  // One rank of a process-per-rank job; collective (every process calls it). NVSHMEM is
  // initialised from `id` on the first call in a process and reused by later Worlds of the same
  // rank and size. All ranks are assumed to run on the same kind of GPU with the same SM share.
  static World process(const ProcessRank& me, const UniqueId& id, WorldOptions options = {});
  // process() from the environment a launcher sets: RANK, WORLD_SIZE, LOCAL_RANK (torchrun's names;
  // the device is LOCAL_RANK modulo the visible devices) and the unique id: TILELINK_UNIQUE_ID (hex,
  // set by `tilelink launch`), else -- under torchrun (MASTER_ADDR, MASTER_PORT) -- rank 0 makes it
  // and hands it over torchrun's store (torch's c10d::TCPStore, in the plugin
  // libtilelink_torchrun.so). Throws InvalidArgument naming the first variable that is missing or bad.
  static World from_launcher(WorldOptions options = {});

  World(World&&) noexcept;
  World& operator=(World&&) noexcept;
  ~World();

  int size() const;
  WorldMode mode() const;
  // How copy-engine communication reaches peers (WorldOptions::transport).
  Transport transport() const;
  // The ranks this process drives, ascending: every rank in one-process worlds, {rank} in a
  // process world. Ops launch, wait and synchronise for these only.
  const std::vector<int>& local_ranks() const;
  bool is_local(int rank) const;
  // Barrier over every process of the world (nothing to do in one-process worlds). It first waits
  // for this process's streams (synchronize(), so a timed-out wait is reported by name), so call it
  // with no work enqueued that needs a peer to pass the barrier first. Bounded: a rank that has not
  // arrived after WorldOptions::barrier_timeout_ns is named in a TimeoutError (and the waiting
  // kernel traps: this process's CUDA context is lost, as after any timed-out wait).
  void barrier() const;
  MemScope scope() const;
  int device(int rank) const;
  // SMs this rank's kernels may occupy (all of the GPU's for multi_gpu). A process world gathers
  // every process's count when it starts, so any rank's budget reads alike in every process.
  int sm_budget(int rank) const;
  // The rank with the smallest budget (the lowest such rank): the same in every process. Choices
  // every rank must make alike (an op's method or path, a count the protocol shares) read its
  // budget, not their own, which under MPS shares may differ between processes.
  int tightest_rank() const;
  // That rank's budget, sm_budget(tightest_rank()): the budget such choices read.
  int tightest_budget() const;
  // "" if an op may add `per_rank` streams of its own for each rank (SideStreams) and every
  // stream on each device still gets a hardware queue of its own, else why not (`what` names the
  // op's part).
  std::string check_extra_streams(int per_rank, const std::string& what) const;
  int num_sms(int rank) const;
  // L2 bytes this rank's kernels may count on: its device's L2 divided among the ranks sharing it.
  uint64_t l2_share(int rank) const;
  cudaStream_t compute_stream(int rank) const;
  // Higher-priority stream for communication (copy engine, stream memops).
  cudaStream_t comm_stream(int rank) const;
  ErrorChannel& errors() const;
  // A stream of the rank's device kept for the host's own small transfers (stall diagnostics);
  // never blocked by ops.
  cudaStream_t watch_stream(int rank) const;

  // Orders work enqueued next on comm_stream(rank) after all work enqueued so far on
  // compute_stream(rank) (an event; no host wait). Ops call it at the start of a call so that a
  // call never overwrites buffers the previous call's consumers are still reading.
  void comm_after_compute(int rank) const;
  // The converse: work enqueued next on compute_stream(rank) runs after all work enqueued so far
  // on comm_stream(rank). An overlapped op calls it at the end of a call, so that the call is
  // complete on the compute stream (including the communication's exit barrier, after which
  // peers no longer read this rank's inputs).
  void compute_after_comm(int rank) const;

  // preload_kernel on every rank's device.
  void preload_kernel(const void* kernel) const;
  template <class... Args>
  void preload_kernel(void (*kernel)(Args...)) const {
    preload_kernel(reinterpret_cast<const void*>(kernel));
  }

  // Throws InvalidArgument unless 0 <= rank < size().
  void check_rank(int rank, const char* where) const;
  // The same, and the rank must be one this process drives.
  void check_local_rank(int rank, const char* where) const;
  // Makes rank's device current for the calling thread.
  void set_device(int rank) const;

  // Waits for every rank's streams. A device wait that timed out becomes TimeoutError; a stream
  // wait (rank_wait) that is still its stream's first unsatisfied wait a whole timeout after it
  // was first seen so becomes TimeoutError, after the stream is released; any other failure
  // becomes CudaError.
  void synchronize() const;

 private:
  struct Impl;
  explicit World(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilelink
