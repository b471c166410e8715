// NCCL collectives for the non-overlapped baselines when the ranks are on separate GPUs: the
// paper's "cuBLAS + NCCL" chains. Virtual ranks keep the copy engine (NCCL needs one GPU per rank).
//
// The build links NCCL where CMake finds it (TILELINK_HAVE_NCCL=1); without it everything here
// still compiles, and the first multi-GPU baseline that asks for NCCL throws Error saying so.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

// One NCCL communicator per rank, all in this process and driven by one thread
// (ncclCommInitAll over the ranks' devices). Each collective enqueues every rank's part on the
// rank's comm stream inside one ncclGroupStart/End (one thread may drive several ranks only
// that way), ordered after the rank's compute stream and joined back into it, as the
// copy-engine baselines are. NCCL synchronises the ranks itself: no cross-rank events are needed.
class NcclComms {
 public:
  // Sets NCCL_NVLS_ENABLE=0 unless the environment already sets it: NVLink SHARP makes NCCL
  // create multicast objects, and on shared hosts a program that does so can take the GPUs out of
  // service; no baseline here needs it. Likewise NCCL_RUNTIME_CONNECT=0: every connection is made
  // here, none in a (timed) collective call.
  explicit NcclComms(const std::vector<int>& devices);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;

  const std::vector<int>& devices() const { return devices_; }

  // Every rank r: recv[r] = send[0] | send[1] | ... | send[P-1], `bytes` each (out of place;
  // recv[r]'s own block is rewritten with the same data).
  void all_gather(const World& world, const std::vector<const void*>& send, const std::vector<void*>& recv,
                  size_t bytes) const;
  // Every rank r: recv[r] (`elems` bf16) = the sum over s of block r of send[s] (`elems` at
  // r * elems), as NCCL reduces bf16: in its algorithm's order, rounded to bf16 at each step.
  void reduce_scatter_bf16(const World& world, const std::vector<const void*>& send,
                           const std::vector<void*>& recv, size_t elems) const;
  // Every rank r: block s of recv[r] (`bytes` at s * bytes) = block r of send[s]. The own block
  // is a local copy on the comm stream.
  void all_to_all(const World& world, const std::vector<const void*>& send, const std::vector<void*>& recv,
                  size_t bytes) const;

 private:
  struct Impl;
  std::vector<int> devices_;
  std::unique_ptr<Impl> impl_;
};

// The communicators of `world`'s devices, made on first use and kept for the rest of the process:
// setting NCCL up takes about a second per call, and all benchmarks of a run share them. Throws
// InvalidArgument unless `world` is multi-GPU, and Error when the build has no NCCL.
const NcclComms& nccl_comms(const World& world);

}  // namespace tilelink::bench
