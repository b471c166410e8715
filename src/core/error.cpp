#include "tilelink/core/error.hpp"

#include <cstdio>

namespace tilelink {

const char* to_string(WaitKind kind) {
  switch (kind) {
    case WaitKind::kConsumerTile: return "consumer_tile_wait";
    case WaitKind::kPeerTile: return "peer_tile_wait";
    case WaitKind::kRankWait: return "rank_wait";
    case WaitKind::kNone: break;
  }
  return "wait";
}

std::string describe_timeout(const ErrorRecord& r, const std::string& op_name) {
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.3f", static_cast<double>(r.elapsed_ns) * 1e-9);
  std::string msg = "tilelink: timeout in op '" + op_name + "' (id " + std::to_string(r.op_id) +
                    "): rank " + std::to_string(r.rank);
  msg += r.block >= 0 ? ", block " + std::to_string(r.block) : std::string(", stream");
  if (r.tile >= 0) msg += ", tile " + std::to_string(r.tile);
  msg += " waited (" + std::string(to_string(r.kind)) + ") on channel " + std::to_string(r.channel) +
         " in rank " + std::to_string(r.peer) + "'s memory for value >= " +
         std::to_string(r.expected) + ", observed " + std::to_string(r.observed) + " after " +
         elapsed + " s";
  return msg;
}

namespace detail {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  throw CudaError(std::string("CUDA call failed: ") + expr + " -> " + cudaGetErrorName(status) +
                      " (" + cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line),
                  static_cast<int>(status));
}

void throw_driver_error(int status, const char* expr, const char* file, int line) {
  throw CudaError(std::string("CUDA driver call failed: ") + expr + " -> CUresult " +
                      std::to_string(status) + " at " + file + ":" + std::to_string(line),
                  status);
}

}  // namespace detail
}  // namespace tilelink
