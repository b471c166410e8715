// The shared part of TileLink's PyTorch operators (torch_common.hpp).
#include "torch_common.hpp"

namespace tilelink::torch_ops {

std::mutex g_mutex;

std::map<std::string, std::unique_ptr<Group>>& groups() {
  static auto* g = new std::map<std::string, std::unique_ptr<Group>>;  // never destroyed: see nvshmem_backend
  return *g;
}

Group& group_of(const char* op, const std::string& name) {
  auto it = groups().find(name);
  TORCH_CHECK_VALUE(it != groups().end(), op, ": argument 'group_name' = '", name,
                    "': expected a group this process initialised with tilelink.init(group)");
  TORCH_CHECK(it->second->broken.empty(), op, ": group '", name, "' is unusable: ", it->second->broken);
  return *it->second;
}

void check_bf16(const char* op, const char* name, const at::Tensor& t, int64_t dims, const char* dims_what) {
  TORCH_CHECK_VALUE(t.defined(), op, ": argument '", name, "' is undefined");
  TORCH_CHECK_VALUE(t.is_cuda(), op, ": argument '", name, "' is on ", t.device().str(),
                    ": expected a CUDA tensor on this rank's device");
  TORCH_CHECK_VALUE(t.scalar_type() == at::kBFloat16, op, ": argument '", name, "' has dtype ", t.scalar_type(),
                    ": expected torch.bfloat16");
  TORCH_CHECK_VALUE(t.dim() == dims, op, ": argument '", name, "' has ", t.dim(), " dimensions: expected ", dims,
                    dims_what);
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": argument '", name, "' is not contiguous: expected a row-major (C-contiguous) tensor");
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, op, ": argument '", name,
                    "' starts at a pointer not 16-byte aligned: expected 16-byte alignment (TMA)");
}

void check_matrix(const char* op, const char* name, const at::Tensor& t) { check_bf16(op, name, t, 2, ""); }

void check_device(const char* op, const char* name, const at::Tensor& t, const Group& g) {
  TORCH_CHECK_VALUE(t.get_device() == g.device, op, ": argument '", name, "' is on ", t.device().str(),
                    ": expected cuda:", g.device, " (this rank's device in the group)");
}

Group& checked_operands(const char* op, const char* x_name, const at::Tensor& x, const at::Tensor& weight,
                        const std::string& group_name, const char* w_name) {
  check_matrix(op, x_name, x);
  check_matrix(op, w_name, weight);
  Group& g = group_of(op, group_name);
  check_device(op, x_name, x, g);
  check_device(op, w_name, weight, g);
  TORCH_CHECK_VALUE(weight.size(1) == x.size(1), op, ": argument '", w_name, "' has ", weight.size(1), " columns: expected ",
                    x_name, "'s ", x.size(1), " (", w_name, " is N x K, nn.Linear's layout)");
  TORCH_CHECK_VALUE(x.size(0) > 0 && x.size(1) > 0 && weight.size(0) > 0, op, ": arguments '", x_name,
                    "' and '", w_name, "' have shapes ", x.sizes(), " and ", weight.sizes(), ": expected no empty dimension");
  TORCH_CHECK_VALUE(x.size(1) % 8 == 0, op, ": argument '", x_name, "' has ", x.size(1),
                    " columns (K): expected a multiple of 8 (TMA needs 16-byte rows)");
  TORCH_CHECK_VALUE(weight.size(0) % 8 == 0, op, ": argument '", w_name, "' has ", weight.size(0),
                    " rows (N): expected a multiple of 8 (TMA needs 16-byte rows of the output)");
  constexpr int64_t kMax = int64_t(1) << 31;
  TORCH_CHECK_VALUE(x.size(0) * g.size < kMax && x.size(1) < kMax && weight.size(0) < kMax, op, ": arguments '",
                    x_name, "' and '", w_name, "' have shapes ", x.sizes(), " and ", weight.sizes(),
                    ": expected every extent of the whole problem below 2^31");
  return g;
}

void refuse_build_under_capture(const char* op, const Group& g, const std::string& shape) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TL_CUDA_CHECK(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(g.device).stream(), &status));
  TORCH_CHECK(status == cudaStreamCaptureStatusNone, op, ": the first call for shape ", shape,
              " is under CUDA-graph capture: it builds the op (symmetric allocations, collective steps), "
              "which a graph cannot hold; call it once before capturing (a warm-up step)");
}

[[noreturn]] void build_failed(Group& g, const char* op, const std::string& shape, size_t cached,
                               const std::exception& e) {
  const bool timeout = dynamic_cast<const TimeoutError*>(&e) != nullptr;  // a rank that never arrived
  const std::string why = std::string(op) + ": building the op for shape " + shape + " failed: " +
                          (timeout ? "TimeoutError: " : "") + e.what();
  if (dynamic_cast<const InvalidArgument*>(&e) != nullptr) {
    TORCH_CHECK_VALUE(false, why, " (", cached, " shapes already built in this group keep their own symmetric "
                      "buffers; a full heap needs a larger tilelink.init(heap_bytes=...))");
  }
  g.broken = why;
  TORCH_CHECK(false, why, ". The group is unusable now: its ranks' collective state may differ.");
}

at::Tensor aligned_rows(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone(at::MemoryFormat::Contiguous);
}

bool process_scatter(const Group& g, GemmRsConfig& config) {
  if (g.world->transport() == Transport::kPutSignal) {
    config.scatter = GemmRsScatter::kCopyEngine;
    config.granularity = SignalGranularity::kTileRow;
    return true;
  }
  config.scatter = GemmRsScatter::kAuto;  // the op's rule: the epilogue push where the heap allows
  return false;
}

}  // namespace tilelink::torch_ops
