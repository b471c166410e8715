// AG+GEMM configuration: 128x256x64_c2x1 with the last, partial wave of tiles split along K over the
// CTAs it would leave idle (sm90_split_tail_scheduler.cuh); the whole tiles run as 128x256x64_c2x1's.
#include "ops/ag_gemm/sm90_ag_gemm.cuh"

namespace tilelink::detail {
namespace {

using Types = Sm90AgGemmSplitTailTypes<cute::Shape<cute::_128, cute::_256, cute::_64>, cute::Shape<cute::_2, cute::_1, cute::_1>>;

// The scheduler's own decomposition on the grid the launcher would size for p.sm_count (whole
// clusters; Sm90PersistentLauncher::init).
uint32_t tail_splits(const Sm90AgGemmProblem& p) {
  using Scheduler = typename Types::Kernel::TileScheduler;
  constexpr int kCluster = static_cast<int>(Types::kClusterM * Types::kClusterN);
  cutlass::KernelHardwareInfo hw;
  hw.device_id = p.device;
  hw.sm_count = p.sm_count / kCluster * kCluster;
  if (hw.sm_count <= 0) return 1;
  const typename Types::Kernel::ProblemShape shape{static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  return Scheduler::decompose(shape, hw, typename Scheduler::Arguments{}).splits;
}

}  // namespace

Sm90AgGemmConfigInfo sm90_ag_gemm_128x256x64_c2x1_splittail() {
  Sm90AgGemmConfigInfo info = Sm90AgGemmKernelImpl<Types>::info("128x256x64_c2x1_splittail");
  info.tail_splits = &tail_splits;
  return info;
}

}  // namespace tilelink::detail
