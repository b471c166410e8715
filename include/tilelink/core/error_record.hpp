// The record a bounded wait leaves behind when it expires. It lives in host-visible memory
// (pinned, mapped) so the host can read it after the kernel trapped; TimeoutError carries it.
#pragma once

#include <cstdint>

namespace tilelink {

enum class WaitKind : uint32_t {
  kNone = 0,
  kConsumerTile = 1,  // consumer_tile_wait: channels in this rank's memory
  kPeerTile = 2,      // peer_tile_wait: a channel in the peer's memory
  kRankWait = 3,      // rank_wait: a stream memop wait (watched by the host)
  kCallBarrier = 4,   // the entry barrier of a replayable slice's call (SignalSlice::begin_call)
  kWorldBarrier = 5,  // World::barrier in a process world: channel p is rank p's arrival
};

const char* to_string(WaitKind kind);

// Layout shared by device and host. `state` is claimed with a CAS so that only the first waiter
// to time out writes the record.
struct ErrorRecord {
  uint32_t state;  // kEmpty, kWriting, kValid
  WaitKind kind;
  uint32_t op_id;
  int32_t rank;
  int32_t block;    // blockIdx.x on the GPU, block index in the CPU executor, -1 for a stream
  int32_t tile;     // op-defined tile id, -1 if the waiter named none
  uint32_t channel;
  int32_t peer;     // rank whose memory holds the channel
  uint32_t kernel;  // the waiting kernel's id in its error channel (0: unnamed, a stream)
  uint64_t expected;
  uint64_t observed;
  uint64_t elapsed_ns;
  // The waiter's slice as it was when the wait gave up: the call's epoch and the first
  // snapshot_count channels of the slice in the waiter's memory (device waits; 0 elsewhere). An
  // op's state describer reads it (ErrorChannel::set_state_describer): which ranks had entered the
  // call, say, when a tile never came because its mover was held at a barrier.
  uint64_t epoch;
  uint32_t snapshot_count;
  static constexpr uint32_t kSnapshotChannels = 32;
  uint64_t snapshot[kSnapshotChannels];

  static constexpr uint32_t kEmpty = 0;
  static constexpr uint32_t kWriting = 1;
  static constexpr uint32_t kValid = 2;
};

}  // namespace tilelink
