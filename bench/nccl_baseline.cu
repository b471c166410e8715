#include "bench/nccl_baseline.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "tilelink/core/error.hpp"

#if TILELINK_HAVE_NCCL
#include <nccl.h>
#endif

namespace tilelink::bench {

#if TILELINK_HAVE_NCCL

// Every NCCL call: CudaError naming the call, NCCL's error string and its last message.
#define TL_NCCL_CHECK(expr)                                                                              \
  do {                                                                                                   \
    const ncclResult_t tl_nccl_ = (expr);                                                                \
    if (tl_nccl_ != ncclSuccess) {                                                                       \
      throw ::tilelink::CudaError(std::string(#expr) + ": " + ncclGetErrorString(tl_nccl_) + " (" +     \
                                      ncclGetLastError(nullptr) + ")",                                   \
                                  static_cast<int>(tl_nccl_));                                           \
    }                                                                                                    \
  } while (0)

struct NcclComms::Impl {
  std::vector<ncclComm_t> comms;

  // Orders each rank's comm stream after its compute stream, enqueues `call(rank, comm, stream)`
  // for every rank inside one group, and joins the comm streams back into the compute streams.
  template <class Call>
  void grouped(const World& world, const std::vector<int>& devices, Call&& call) const {
    const int w = world.size();
    TL_REQUIRE(w == static_cast<int>(devices.size()), "NcclComms", "world.size()", w,
               "the communicators' rank count " + std::to_string(devices.size()));
    for (int r = 0; r < w; ++r) {
      TL_REQUIRE(world.device(r) == devices[size_t(r)], "NcclComms", "world.device(rank)", world.device(r),
                 "device " + std::to_string(devices[size_t(r)]) + " of rank " + std::to_string(r));
      world.comm_after_compute(r);
    }
    TL_NCCL_CHECK(ncclGroupStart());
    try {
      for (int r = 0; r < w; ++r) call(r, comms[size_t(r)], world.comm_stream(r));
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    TL_NCCL_CHECK(ncclGroupEnd());
    for (int r = 0; r < w; ++r) world.compute_after_comm(r);
  }
};

NcclComms::NcclComms(const std::vector<int>& devices) : devices_(devices), impl_(std::make_unique<Impl>()) {
  TL_REQUIRE(!devices.empty(), "NcclComms", "devices.size()", devices.size(), "at least one device");
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Connections at init rather than at a collective's first call: a first call that sets them up
  // blocks the host, and must not fall into a timed, gated step (RankTimer).
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  impl_->comms.resize(devices.size());
  TL_NCCL_CHECK(ncclCommInitAll(impl_->comms.data(), static_cast<int>(devices.size()), devices.data()));
}

NcclComms::~NcclComms() {
  for (ncclComm_t c : impl_->comms) (void)ncclCommDestroy(c);
}

void NcclComms::all_gather(const World& world, const std::vector<const void*>& send, const std::vector<void*>& recv,
                           size_t bytes) const {
  impl_->grouped(world, devices_, [&](int r, ncclComm_t comm, cudaStream_t stream) {
    TL_NCCL_CHECK(ncclAllGather(send[size_t(r)], recv[size_t(r)], bytes, ncclUint8, comm, stream));
  });
}

void NcclComms::reduce_scatter_bf16(const World& world, const std::vector<const void*>& send,
                                    const std::vector<void*>& recv, size_t elems) const {
  impl_->grouped(world, devices_, [&](int r, ncclComm_t comm, cudaStream_t stream) {
    TL_NCCL_CHECK(ncclReduceScatter(send[size_t(r)], recv[size_t(r)], elems, ncclBfloat16, ncclSum, comm, stream));
  });
}

void NcclComms::all_to_all(const World& world, const std::vector<const void*>& send, const std::vector<void*>& recv,
                           size_t bytes) const {
  const int w = world.size();
  impl_->grouped(world, devices_, [&](int r, ncclComm_t comm, cudaStream_t stream) {
    const char* from = static_cast<const char*>(send[size_t(r)]);
    char* to = static_cast<char*>(recv[size_t(r)]);
    TL_CUDA_CHECK(cudaMemcpyAsync(to + size_t(r) * bytes, from + size_t(r) * bytes, bytes, cudaMemcpyDeviceToDevice,
                                  stream));
    for (int peer = 0; peer < w; ++peer) {
      if (peer == r) continue;
      TL_NCCL_CHECK(ncclSend(from + size_t(peer) * bytes, bytes, ncclUint8, peer, comm, stream));
      TL_NCCL_CHECK(ncclRecv(to + size_t(peer) * bytes, bytes, ncclUint8, peer, comm, stream));
    }
  });
}

#else  // no NCCL in this build

struct NcclComms::Impl {};

NcclComms::NcclComms(const std::vector<int>& devices) : devices_(devices) {
  throw Error("the non-overlapped baselines across GPUs need NCCL, and this build has none (TILELINK_HAVE_NCCL=0): "
              "install NCCL (libnccl-dev, or the nvidia-nccl-cu13 wheel in the python3 that CMake runs) and "
              "reconfigure, or run on virtual ranks (unset TILELINK_RANKS)");
}

NcclComms::~NcclComms() = default;

void NcclComms::all_gather(const World&, const std::vector<const void*>&, const std::vector<void*>&, size_t) const {}
void NcclComms::reduce_scatter_bf16(const World&, const std::vector<const void*>&, const std::vector<void*>&,
                                    size_t) const {}
void NcclComms::all_to_all(const World&, const std::vector<const void*>&, const std::vector<void*>&, size_t) const {}

#endif

const NcclComms& nccl_comms(const World& world) {
  TL_REQUIRE(world.mode() == WorldMode::kMultiGpu, "nccl_comms", "world.mode()", std::string("virtual ranks"),
             "a multi-GPU world (NCCL needs one GPU per rank)");
  std::vector<int> devices;
  for (int r = 0; r < world.size(); ++r) devices.push_back(world.device(r));
  // Function-local: destroyed at exit before the CUDA runtime tears down, which it initialised first.
  static std::vector<std::unique_ptr<NcclComms>> cache;
  const auto hit = std::find_if(cache.begin(), cache.end(), [&](const auto& c) { return c->devices() == devices; });
  if (hit != cache.end()) return **hit;
  cache.push_back(std::make_unique<NcclComms>(devices));
  return *cache.back();
}

}  // namespace tilelink::bench
