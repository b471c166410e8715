#include "tilelink/runtime/error_channel.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <vector>

namespace tilelink {
namespace {

// The live channels, for the sticky-error explainer.
std::mutex g_live_mutex;
std::vector<const ErrorChannel*> g_live;

bool explain_sticky_error(RecordedDeviceError* out) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  for (const ErrorChannel* ch : g_live) {
    if (ch->has_device_error()) {
      out->record = ch->device_record();
      out->op_name = ch->op_name(out->record.op_id);
      out->description = ch->describe(out->record);
      return true;
    }
  }
  return false;
}

}  // namespace

ErrorChannel::ErrorChannel(int device, uint64_t timeout_ns) : device_(device), timeout_ns_(timeout_ns) {
  TL_CUDA_CHECK(cudaSetDevice(device));
  TL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&claim_), sizeof(uint32_t)));
  TL_CUDA_CHECK(cudaMemset(claim_, 0, sizeof(uint32_t)));
  // Mapped pinned memory: still readable by the host after a kernel trapped.
  void* record = nullptr;
  TL_CUDA_CHECK(cudaHostAlloc(&record, sizeof(ErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
  record_ = static_cast<ErrorRecord*>(record);
  *record_ = ErrorRecord{};
  op_names_.push_back("unnamed");
  describers_.emplace_back();
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.push_back(this);
  set_sticky_error_explainer(&explain_sticky_error);
}

ErrorChannel::~ErrorChannel() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    std::erase(g_live, this);
  }
  // Errors are ignored here: after a trap the context is gone and frees report it again.
  cudaSetDevice(device_);
  cudaFree(claim_);
  cudaFreeHost(record_);
}

ErrorChannelView ErrorChannel::view() {
  ErrorChannelView v;
  v.claim = claim_;
  v.record = record_;
  v.timeout_ns = timeout_ns_;
  v.stream_waits = this;
  return v;
}

uint32_t ErrorChannel::register_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  op_names_.push_back(name);
  describers_.emplace_back();
  return static_cast<uint32_t>(op_names_.size() - 1);
}

uint32_t ErrorChannel::register_kernel(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (kernel_names_.empty()) kernel_names_.emplace_back();
  const auto it = std::find(kernel_names_.begin(), kernel_names_.end(), name);
  if (it != kernel_names_.end()) return static_cast<uint32_t>(it - kernel_names_.begin());
  kernel_names_.push_back(name);
  return static_cast<uint32_t>(kernel_names_.size() - 1);
}

void ErrorChannel::set_describer(uint32_t op_id, ChannelDescriber describer) {
  std::lock_guard<std::mutex> lock(mutex_);
  TL_REQUIRE(op_id < describers_.size(), "ErrorChannel::set_describer", "op_id", op_id, "a registered op");
  describers_[op_id] = std::move(describer);
}

void ErrorChannel::set_state_describer(uint32_t op_id, StateDescriber describer) {
  std::lock_guard<std::mutex> lock(mutex_);
  TL_REQUIRE(op_id < describers_.size(), "ErrorChannel::set_state_describer", "op_id", op_id, "a registered op");
  if (state_describers_.size() < describers_.size()) state_describers_.resize(describers_.size());
  state_describers_[op_id] = std::move(describer);
}

std::string ErrorChannel::op_name(uint32_t op_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return op_id < op_names_.size() ? op_names_[op_id] : "op#" + std::to_string(op_id);
}

bool ErrorChannel::has_device_error() const {
  return static_cast<volatile ErrorRecord*>(record_)->state == ErrorRecord::kValid;
}

ErrorRecord ErrorChannel::device_record() const {
  // Byte by byte through volatile reads (the host must not cache what the device writes; bytes,
  // because only a character type may read another type's object), then as the struct. The copy
  // is consistent only once the device has published state == kValid; the callers read it only
  // then.
  static_assert(std::is_trivially_copyable_v<ErrorRecord>);
  const volatile unsigned char* src = reinterpret_cast<const volatile unsigned char*>(record_);
  unsigned char bytes[sizeof(ErrorRecord)];
  for (size_t i = 0; i < sizeof(bytes); ++i) bytes[i] = src[i];
  ErrorRecord r;
  std::memcpy(&r, bytes, sizeof(r));
  return r;
}

std::string ErrorChannel::describe(const ErrorRecord& record) const {
  ChannelDescriber describer;
  StateDescriber state;
  std::string kernel;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (record.op_id < describers_.size()) describer = describers_[record.op_id];
    if (record.op_id < state_describers_.size()) state = state_describers_[record.op_id];
    if (record.kernel < kernel_names_.size()) kernel = kernel_names_[record.kernel];
  }
  std::string msg = describe_timeout(record, op_name(record.op_id), kernel);
  if (record.kind == WaitKind::kCallBarrier) {
    msg += "; it waited for every rank to enter the call (the entry barrier of a replayable slice, which "
           "zeroes the slice's channels between calls)";
  } else if (record.kind == WaitKind::kWorldBarrier) {
    // Every rank whose slot was still behind (the snapshot is this rank's slots), else the one waited on.
    std::string missing;
    int count = 0;
    for (uint32_t q = 0; q < record.snapshot_count; ++q) {
      if (static_cast<int64_t>(record.snapshot[q] - record.expected) < 0) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        ++count;
      }
    }
    if (count == 0) {
      missing = std::to_string(record.channel);
      count = 1;
    }
    msg += std::string(count == 1 ? "; rank " : "; ranks ") + missing +
           " never arrived at World::barrier (a collective step that every process takes: tilelink.init, "
           "building an op, claiming signals) -- exited, hung, or took another path";
  } else if (describer) {
    const std::string what = describer(record.channel, record.rank, record.peer);
    if (!what.empty()) msg += "; it waited for " + what;
  }
  // Only for the op's own tile waits: the barriers have their own wording, and the call barrier
  // zeroes the channels the snapshot reads.
  const bool tile_wait = record.kind == WaitKind::kConsumerTile || record.kind == WaitKind::kPeerTile;
  if (state && tile_wait && record.snapshot_count > 0) {
    const std::string upstream = state(record);
    if (!upstream.empty()) msg += "; " + upstream;
  }
  return msg;
}

void ErrorChannel::throw_timeout(const ErrorRecord& record) const {
  throw TimeoutError(describe(record), record, op_name(record.op_id));
}

void ErrorChannel::note_stream_wait(const StreamWaitRecord& wait) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Keep the log bounded between synchronizations: waits on streams that have drained are done.
  constexpr size_t kPruneAt = 4096;
  if (stream_waits_.size() >= kPruneAt) {
    std::vector<cudaStream_t> idle;
    for (const StreamWaitRecord& w : stream_waits_) {
      if (std::find(idle.begin(), idle.end(), w.stream) == idle.end() && cudaStreamQuery(w.stream) == cudaSuccess) {
        idle.push_back(w.stream);
      }
    }
    std::erase_if(stream_waits_, [&](const StreamWaitRecord& w) {
      return std::find(idle.begin(), idle.end(), w.stream) != idle.end();
    });
  }
  stream_waits_.push_back(wait);
}

std::vector<StreamWaitRecord> ErrorChannel::stream_waits(cudaStream_t stream) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<StreamWaitRecord> out;
  std::copy_if(stream_waits_.begin(), stream_waits_.end(), std::back_inserter(out),
               [&](const StreamWaitRecord& w) { return w.stream == stream; });
  return out;
}

void ErrorChannel::forget_stream_waits(uint32_t op_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(stream_waits_, [&](const StreamWaitRecord& w) { return w.op_id == op_id; });
}

void ErrorChannel::clear_stream_waits() {
  std::lock_guard<std::mutex> lock(mutex_);
  stream_waits_.clear();
}

}  // namespace tilelink
