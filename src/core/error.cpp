#include "tilelink/core/error.hpp"

#include <atomic>
#include <cstdio>

namespace tilelink {

const char* to_string(WaitKind kind) {
  switch (kind) {
    case WaitKind::kConsumerTile: return "consumer_tile_wait";
    case WaitKind::kPeerTile: return "peer_tile_wait";
    case WaitKind::kRankWait: return "rank_wait";
    case WaitKind::kCallBarrier: return "call_barrier";
    case WaitKind::kWorldBarrier: return "world_barrier";
    case WaitKind::kNone: break;
  }
  return "wait";
}

std::string describe_timeout(const ErrorRecord& r, const std::string& op_name, const std::string& kernel) {
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.3f", static_cast<double>(r.elapsed_ns) * 1e-9);
  std::string msg = "tilelink: timeout in op '" + op_name + "' (id " + std::to_string(r.op_id) + ")" +
                    (kernel.empty() ? std::string() : ", kernel " + kernel) + ": rank " + std::to_string(r.rank);
  msg += r.block >= 0 ? ", block " + std::to_string(r.block) : std::string(", stream");
  if (r.tile >= 0) msg += ", tile " + std::to_string(r.tile);
  msg += " waited (" + std::string(to_string(r.kind)) + ") on channel " + std::to_string(r.channel) +
         " in rank " + std::to_string(r.peer) + "'s memory for value >= " +
         std::to_string(r.expected) + ", observed " + std::to_string(r.observed) + " after " +
         elapsed + " s";
  return msg;
}

namespace {

std::atomic<StickyErrorExplainer> g_explainer{nullptr};

// Throws the error as the caller should see it: a sticky error with a device record becomes the
// record's TimeoutError, one without a record says that a kernel faulted; others are plain.
[[noreturn]] void throw_call_error(int status, const std::string& call) {
  if (is_sticky_cuda_error(status)) {
    RecordedDeviceError recorded;
    const StickyErrorExplainer explain = g_explainer.load();
    if (explain != nullptr && explain(&recorded)) {
      throw TimeoutError(recorded.description + "; the waiter then trapped, which CUDA reported at a later call (" +
                             call + "): this process's CUDA context is lost",
                         recorded.record, recorded.op_name);
    }
    throw CudaError("a kernel trapped or faulted, and nothing recorded why (not one of TileLink's bounded waits: "
                    "run the failing call under compute-sanitizer); CUDA reported it at a later call (" + call +
                        "): this process's CUDA context is lost",
                    status);
  }
  throw CudaError(call, status);
}

}  // namespace

void set_sticky_error_explainer(StickyErrorExplainer explainer) { g_explainer.store(explainer); }

bool is_sticky_cuda_error(int status) {
  // cudaError_t and CUresult share these codes: 700 illegal address, 702 launch timeout, 710
  // device assert, 714 hardware stack error, 715 illegal instruction, 716 misaligned address, 717
  // invalid address space, 718 invalid pc, 719 launch failure (a trap).
  return status == cudaErrorIllegalAddress || status == cudaErrorLaunchTimeout ||
         status == cudaErrorHardwareStackError || status == cudaErrorIllegalInstruction ||
         status == cudaErrorMisalignedAddress || status == cudaErrorInvalidAddressSpace ||
         status == cudaErrorInvalidPc || status == cudaErrorLaunchFailure || status == cudaErrorAssert;
}

namespace detail {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw_call_error(static_cast<int>(status), std::string("CUDA call failed: ") + expr + " -> " +
                                                 cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                                                 ") at " + file + ":" + std::to_string(line));
}

void throw_driver_error(int status, const char* expr, const char* file, int line) {
  throw_call_error(status, std::string("CUDA driver call failed: ") + expr + " -> CUresult " +
                               std::to_string(status) + " at " + file + ":" + std::to_string(line));
}

}  // namespace detail
}  // namespace tilelink
