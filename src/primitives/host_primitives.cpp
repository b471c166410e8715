// Host primitives: stream memops (driver entry points) and copy-engine transfers.
#include "core/driver.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/host.hpp"

namespace tilelink {
namespace {

using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using WaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

WriteValue64 write_value64() {
  static const WriteValue64 fn = detail::driver_entry_point<WriteValue64>("cuStreamWriteValue64");
  return fn;
}
WaitValue64 wait_value64() {
  static const WaitValue64 fn = detail::driver_entry_point<WaitValue64>("cuStreamWaitValue64");
  return fn;
}

void check_channel(const char* where, const SignalView& sig, uint32_t channel) {
  TL_REQUIRE(sig.peer_channels != nullptr && sig.local_channels != nullptr, where, "sig", "empty view",
             "a view from SignalSlice::host_view");
  TL_REQUIRE(sig.epoch >= 1, where, "sig.epoch", sig.epoch, "an epoch >= 1 (call SignalSlice::begin_call)");
  TL_REQUIRE(channel < sig.num_channels, where, "channel", channel,
             "a channel below the slice's " + std::to_string(sig.num_channels));
}

}  // namespace

void rank_notify(cudaStream_t stream, const SignalView& sig, uint32_t channel, int peer) {
  check_channel("rank_notify", sig, channel);
  TL_REQUIRE(peer >= 0 && peer < sig.world, "rank_notify", "peer", peer,
             "a rank in [0, " + std::to_string(sig.world) + ")");
  const auto addr = reinterpret_cast<CUdeviceptr>(sig.on(peer, channel));
  TL_CU_CHECK(write_value64()(stream, addr, sig.set_value(), CU_STREAM_WRITE_VALUE_DEFAULT));
}

void rank_wait(cudaStream_t stream, const SignalView& sig, uint32_t channel, uint32_t arrivals) {
  check_channel("rank_wait", sig, channel);
  const uint64_t* addr = sig.local(channel);
  const uint64_t expected = sig.expected(arrivals);
  TL_CU_CHECK(wait_value64()(stream, reinterpret_cast<CUdeviceptr>(addr), expected,
                             CU_STREAM_WAIT_VALUE_GEQ));
  // A replayable slice's channel takes the same value in every call: the host could not tell a
  // wait of an earlier call from a stalled one (and a captured wait is replayed without the host).
  if (sig.errors.stream_waits != nullptr && sig.replayable == 0) {
    sig.errors.stream_waits->note_stream_wait({stream, addr, expected, sig.op_id, sig.rank, channel});
  }
}

void rank_copy_data(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  TL_REQUIRE(dst != nullptr, "rank_copy_data", "dst", dst, "a device pointer");
  TL_REQUIRE(src != nullptr, "rank_copy_data", "src", src, "a device pointer");
  TL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

}  // namespace tilelink
