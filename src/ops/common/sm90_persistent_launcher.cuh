// Sm90PersistentLauncher<Kernel>: the host half shared by TileLink's CUTLASS sm90 persistent
// kernels. Sizes the grid to a given number of SMs in whole clusters (no more than can be
// resident, so a kernel that spins on peers never waits for its own CTAs), builds the kernel's
// Params once, and launches with the cluster shape. The op patches per-call fields (the signals'
// epoch) in params() before launch().
#pragma once

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tilelink/core/error.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink::detail {

template <class Kernel>
class Sm90PersistentLauncher {
 public:
  static constexpr int kClusterM = cute::size<0>(typename Kernel::DispatchPolicy::ClusterShape{});
  static constexpr int kClusterN = cute::size<1>(typename Kernel::DispatchPolicy::ClusterShape{});

  // Loads the kernel's module on the current device and allows its shared memory.
  static void preload() {
    TL_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Kernel::SharedStorageSize)));
  }

  // Fills args.hw_info for `sm_count` CTAs on `device`, checks the problem with CUTLASS and builds
  // the Params. `what` names the op in errors. Called again whenever an op's operands move (every
  // call of a PyTorch operator): the module load and the occupancy query run once per device.
  // A scheduler that needs a workspace (the split tail's partial sums and flags,
  // sm90_split_tail_scheduler.cuh) takes the last of `workspaces`: the op's, per rank, which
  // outlive the kernel objects that a new operand rebuilds. When it is too small a larger one is
  // appended, zeroed -- at the op's first builds, since later builds of the same problems need no
  // more -- and the smaller ones stay alive for the kernels that point at them. So a rebuild
  // neither allocates nor synchronises, a CUDA graph keeps pointing at live memory, and kernels
  // that run one after another on the rank's stream may share one (each leaves its flags at 0).
  // Without `workspaces`, the launcher keeps its own.
  void init(typename Kernel::Arguments& args, int device, int sm_count, const std::string& what,
            std::vector<DeviceBuffer>* workspaces = nullptr) {
    TL_CUDA_CHECK(cudaSetDevice(device));
    const int max_clusters = max_active_clusters(device);
    const int clusters = std::min(sm_count / (kClusterM * kClusterN), max_clusters);
    if (clusters < 1) {
      throw InvalidArgument(what + ": no " + std::to_string(kClusterM) + "x" + std::to_string(kClusterN) +
                            " cluster of this kernel fits in " + std::to_string(sm_count) + " SMs of device " +
                            std::to_string(device));
    }
    args.hw_info.device_id = device;
    args.hw_info.sm_count = clusters * kClusterM * kClusterN;
    args.hw_info.max_active_clusters = clusters;
    if (!Kernel::can_implement(args)) throw InvalidArgument(what + ": CUTLASS refused the problem");
    const size_t workspace_bytes = Kernel::get_workspace_size(args);
    void* workspace = nullptr;
    if (workspace_bytes != 0) {
      std::vector<DeviceBuffer>& list = workspaces != nullptr ? *workspaces : own_workspaces_;
      if (list.empty() || list.back().bytes() < workspace_bytes) {
        list.emplace_back(workspace_bytes, device);
        TL_CUDA_CHECK(cudaMemsetAsync(list.back().get(), 0, workspace_bytes, nullptr));
        TL_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // zeroed before any stream's launch reads it
      }
      workspace = list.back().get();
    }
    params_ = Kernel::to_underlying_arguments(args, workspace);
    grid_ = Kernel::get_grid_shape(params_);
  }

  typename Kernel::Params& params() { return params_; }

  // The most clusters of this kernel resident at once on `device` (the current device), after
  // preload(); queried once per device.
  static int max_active_clusters(int device) {
    static std::mutex mutex;
    static std::map<int, int> known;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(device); it != known.end()) return it->second;
    preload();
    int max_clusters = 0;
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t one = config(dim3(kClusterM, kClusterN, 1), nullptr, attr);
    TL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, cutlass::device_kernel<Kernel>, &one));
    known.emplace(device, max_clusters);
    return max_clusters;
  }
  dim3 grid() const { return grid_; }
  int ctas() const { return static_cast<int>(grid_.x * grid_.y * grid_.z); }

  void launch(cudaStream_t stream) const {
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = config(grid_, stream, attr);
    TL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cutlass::device_kernel<Kernel>, params_));
  }

 private:
  // A cluster launch of `grid` CTAs; `attr` (the cluster shape) must outlive the config.
  static cudaLaunchConfig_t config(dim3 grid, cudaStream_t stream, cudaLaunchAttribute& attr) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = kClusterM;
    attr.val.clusterDim.y = kClusterN;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = Kernel::get_block_shape();
    cfg.dynamicSmemBytes = Kernel::SharedStorageSize;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cfg;
  }

  typename Kernel::Params params_{};
  dim3 grid_{};
  std::vector<DeviceBuffer> own_workspaces_;
};

// What every op's sm90 GEMM kernel configuration shares (CRTP: Impl derives from it): the kernel
// type's tiles and cluster (Types: Sm90Bf16TnGemm), the persistent launcher, make() and the row of
// the op's configuration table (Info: name, tile_m/n/k, cluster_m/n, can_implement, make).
// Impl supplies `static std::string can_implement(const Problem&)` and a constructor from Problem
// that fills the kernel's Arguments and calls init().
template <class Impl, class Interface, class Types, class Problem, class Info>
class Sm90GemmKernelImpl : public Interface {
 public:
  using Kernel = typename Types::Kernel;
  static constexpr uint32_t kTileM = Types::kTileM, kTileN = Types::kTileN;
  static constexpr uint32_t kClusterM = Types::kClusterM, kClusterN = Types::kClusterN;

  static std::unique_ptr<Interface> make(const Problem& p) { return std::make_unique<Impl>(p); }
  static Info info(const char* name) {
    return {name, kTileM, kTileN, Types::kTileK, kClusterM, kClusterN, &Impl::can_implement, &make};
  }
  int ctas() const override { return launcher_.ctas(); }

 protected:
  // Throws InvalidArgument "<what>: <why>" unless Impl can run `p`.
  static void require(const Problem& p, const char* what) {
    if (const std::string why = Impl::can_implement(p); !why.empty()) throw InvalidArgument(std::string(what) + ": " + why);
  }

  Sm90PersistentLauncher<Kernel> launcher_;
};

}  // namespace tilelink::detail
