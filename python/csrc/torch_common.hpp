// What TileLink's PyTorch operators share: a torch.distributed group's world, heap, signals and
// built ops, and the checks and stream plumbing every operator makes (torch_ops.cpp defines them
// and the operators of the first ops; an op with a file of its own includes this).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tilelink/tilelink.hpp"

namespace tilelink::torch_ops {

// One torch.distributed group's world: this process's rank, its heap and signals, and the ops built
// so far, one per shape.
struct Group {
  std::unique_ptr<World> world;
  std::unique_ptr<SymmetricHeap> heap;
  std::unique_ptr<SignalSet> signals;
  int rank = 0;
  int size = 1;
  int device = 0;
  // Why the group can no longer be used, or "": an op's collective construction failed after its
  // first collective step, so the ranks' heaps and signal slices may no longer match.
  std::string broken;
  cudaEvent_t caller_ready = nullptr;  // recorded on the caller's stream, waited by the op's
  cudaEvent_t op_done = nullptr;       // recorded on the op's compute stream, waited by the caller's
  using Shape = std::tuple<int64_t, int64_t, int64_t>;
  struct Ag {
    SymmetricBuffer gathered;
    std::unique_ptr<AgGemm> op;
  };
  struct Rs {
    SymmetricBuffer partial, recv;
    std::unique_ptr<GemmRs> op;
  };
  std::map<Shape, Ag> ag;
  std::map<Shape, Rs> rs;
  using ArShape = std::tuple<int64_t, int64_t, int64_t, bool>;  // m, n, k, with the RMSNorm boundary
  std::map<ArShape, std::unique_ptr<GemmAr>> ar;
  using MlpShape = std::tuple<int64_t, int64_t, int64_t, int>;  // rows per rank, H, I / P, activation
  struct MlpOp {
    SymmetricBuffer x, partial, recv;
    std::unique_ptr<Mlp> op;
  };
  std::map<MlpShape, MlpOp> mlp;
  // rows per rank, q heads, kv heads, head dim, causal, zig-zag
  using SpShape = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>;
  struct Sp {
    SymmetricBuffer kv;
    std::unique_ptr<SpAttention> op;
  };
  std::map<SpShape, Sp> sp;
  // Ops whose operators live in files of their own (torch_moe.cpp), by operator and shape; each
  // file keeps its own type behind the pointer.
  std::map<std::string, std::shared_ptr<void>> more;
  size_t built() const { return ag.size() + rs.size() + ar.size() + mlp.size() + sp.size() + more.size(); }
};

extern std::mutex g_mutex;  // guards groups() and every operator call

std::map<std::string, std::unique_ptr<Group>>& groups();

// TileLink's exceptions as PyTorch's: bad input -> ValueError, everything else -> RuntimeError
// (a timed-out wait keeps its text: op, rank, tile, channel).
template <class F>
auto translated(const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    TORCH_CHECK_VALUE(false, op, ": ", e.what());
  } catch (const TimeoutError& e) {
    TORCH_CHECK(false, op, ": TimeoutError: ", e.what());
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, op, ": ", e.what());
  }
}

Group& group_of(const char* op, const std::string& name);

// A contiguous bf16 CUDA tensor of `dims` dimensions (`dims_what` names them in the error), 16-byte
// aligned (then check_device: on the group's device).
void check_bf16(const char* op, const char* name, const at::Tensor& t, int64_t dims, const char* dims_what);
void check_matrix(const char* op, const char* name, const at::Tensor& t);  // check_bf16, 2-D
// On the group's device.
void check_device(const char* op, const char* name, const at::Tensor& t, const Group& g);

// The checks both operators make on (x, weight, group): 2-D contiguous bf16 CUDA tensors on the
// group's device, the weight N x K with x's K. Returns the group.
Group& checked_operands(const char* op, const char* x_name, const at::Tensor& x, const at::Tensor& weight,
                        const std::string& group_name, const char* w_name = "weight");

// The first call of a shape builds its op: symmetric allocations and collective steps, which a
// CUDA-graph capture cannot hold. Later calls capture and replay (the op's signal slices become
// replayable: SignalSlice::begin_call).
void refuse_build_under_capture(const char* op, const Group& g, const std::string& shape);

// A failure while building an op (collective). A refusal (InvalidArgument: the op's own checks or
// a full heap) comes before any collective step and alike on every rank, so the group stays usable
// and the error says how to make the heap larger; any other failure may have left the ranks' heaps
// and signal slices different, so the group is marked unusable.
[[noreturn]] void build_failed(Group& g, const char* op, const std::string& shape, size_t cached,
                               const std::exception& e);

// Runs `enqueue` on the op's streams, ordered after everything so far on the caller's stream and
// before anything the caller enqueues next (under capture, the op's streams join the caller's).
template <class F>
void on_callers_stream(Group& g, F&& enqueue) {
  const cudaStream_t caller = at::cuda::getCurrentCUDAStream(g.device).stream();
  const cudaStream_t compute = g.world->compute_stream(g.rank);
  TL_CUDA_CHECK(cudaEventRecord(g.caller_ready, caller));
  TL_CUDA_CHECK(cudaStreamWaitEvent(compute, g.caller_ready, 0));
  try {
    enqueue(compute);
  } catch (...) {
    // Whatever was enqueued still finishes before the caller's stream goes on (and before torch
    // reuses the call's tensors); the error is the enqueue's.
    if (cudaEventRecord(g.op_done, compute) == cudaSuccess) (void)cudaStreamWaitEvent(caller, g.op_done, 0);
    throw;
  }
  TL_CUDA_CHECK(cudaEventRecord(g.op_done, compute));
  TL_CUDA_CHECK(cudaStreamWaitEvent(caller, g.op_done, 0));
}

// A per-rank pointer argument of a process world: this rank's entry; the others are not read.
template <class T>
std::vector<T> own_entry(const Group& g, T mine) {
  std::vector<T> v(static_cast<size_t>(g.size), nullptr);
  v[static_cast<size_t>(g.rank)] = mine;
  return v;
}

// Sets `config` to the reduce-scatter a process world runs for GEMM+RS (and the MLP's fc2): the pull
// scatter (no affine heap for push), or under the put-with-signal transport the copy-engine scatter
// with a signal per tile row (no kernel reaches a peer there). Returns whether that scatter needs a
// `recv` buffer (symmetric, as large as the partials).
bool process_scatter(const Group& g, GemmRsConfig& config);

// `t` itself when its data starts 16-byte aligned (the ops' TMA and vector copies), else a contiguous
// copy, on the current stream (a view that starts mid-row).
at::Tensor aligned_rows(const at::Tensor& t);

}  // namespace tilelink::torch_ops
