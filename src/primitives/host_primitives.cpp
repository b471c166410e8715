// Host primitives: stream memops (driver entry points) and copy-engine transfers.
#include "core/driver.hpp"
#include "primitives/nvshmem_transport.hpp"
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

const char* to_string(Transport t) {
  switch (t) {
    case Transport::kLoadStore: return "load_store";
    case Transport::kPutSignal: return "put_signal";
    case Transport::kAuto: return "auto";
  }
  return "unknown";
}

void rank_notify(cudaStream_t stream, const SignalView& sig, uint32_t channel, int peer, Transport transport) {
  check_channel("rank_notify", sig, channel);
  TL_REQUIRE(peer >= 0 && peer < sig.world, "rank_notify", "peer", peer,
             "a rank in [0, " + std::to_string(sig.world) + ")");
  if (transport == Transport::kPutSignal && peer != sig.rank) {
    // The slice's channels are symmetric: this rank's address of the channel names peer's too.
    detail::nvshmem_signal_set(stream, sig.local(channel), sig.set_value(), peer);
    return;
  }
  const auto addr = reinterpret_cast<CUdeviceptr>(sig.on(peer, channel));
  TL_CU_CHECK(write_value64()(stream, addr, sig.set_value(), CU_STREAM_WRITE_VALUE_DEFAULT));
}

void rank_put_signal(cudaStream_t stream, const SymmetricView& heap, void* dst, const void* src, uint64_t pitch,
                     TileShape shape, const SignalView& sig, uint32_t channel, int peer, Transport transport) {
  constexpr const char* where = "rank_put_signal";
  check_channel(where, sig, channel);
  TL_REQUIRE(peer >= 0 && peer < sig.world, where, "peer", peer, "a rank in [0, " + std::to_string(sig.world) + ")");
  TL_REQUIRE(pitch >= shape.row_bytes, where, "pitch", pitch,
             "at least the row's " + std::to_string(shape.row_bytes) + " bytes");
  if (shape.rows != 0) {
    TL_REQUIRE(src != nullptr, where, "src", src, "a device pointer");
    const uint64_t extent = uint64_t(shape.rows - 1) * pitch + shape.row_bytes;
    TL_REQUIRE(heap.contains(dst, extent), where, "dst", dst,
               "rows inside this rank's symmetric heap segment (their counterpart on the peer is written)");
  }
  if (transport == Transport::kPutSignal && peer != sig.rank) {
    detail::nvshmem_put_rows_signal(stream, dst, src, pitch, shape, sig.local(channel), sig.set_value(), peer);
    return;
  }
  if (shape.rows != 0) {
    char* to = heap.translate(static_cast<char*>(dst), peer);
    if (pitch == shape.row_bytes) {
      rank_copy_data(stream, to, src, size_t(shape.bytes()));
    } else {
      TL_CUDA_CHECK(cudaMemcpy2DAsync(to, pitch, src, pitch, shape.row_bytes, shape.rows, cudaMemcpyDefault, stream));
    }
  }
  rank_notify(stream, sig, channel, peer);
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
