// Device timeline records (tilelink trace): per-tile spans of waits, copies, notifies and
// compute, timestamped on the GPU with %globaltimer (nanoseconds, one clock for every SM of a
// GPU).
//
// A TraceView is a plain struct passed to kernels by value. Off (records == nullptr, the default)
// a recording site costs one predicated branch; on, the recording thread appends one 32-byte
// record per span with an atomic cursor (records past `capacity` are counted, not written).
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink {

enum class TraceKind : uint32_t {
  kWait = 0,      // a consumer's wait for its tile's data (consumer_tile_wait / peer_tile_wait)
  kLoad = 1,      // a GEMM producer's TMA loads of one tile (paced by the MMAs: the tile's compute)
  kEpilogue = 2,  // a GEMM tile's epilogue (accumulators to memory)
  kCopy = 3,      // a communication tile's copy (tile_pull_data / tile_push_data)
  kNotify = 4,    // a notify (producer_tile_notify / peer_tile_notify)
  kReduce = 5,    // a reduction of one tile's parts from every rank (GEMM+RS's owner)
};

// Who recorded a span: a GEMM's (or the attention's) producer, its consumers, or a
// communication block.
enum class TraceRole : uint16_t {
  kProducer = 0,
  kConsumer = 1,
  kComm = 2,
};

inline const char* to_string(TraceKind k) {
  switch (k) {
    case TraceKind::kWait: return "wait";
    case TraceKind::kLoad: return "load";
    case TraceKind::kEpilogue: return "epilogue";
    case TraceKind::kCopy: return "copy";
    case TraceKind::kNotify: return "notify";
    case TraceKind::kReduce: return "reduce";
  }
  return "?";
}

struct TraceRecord {
  uint64_t start_ns = 0, end_ns = 0;  // %globaltimer
  uint32_t kind = 0;                  // TraceKind
  uint32_t tile = 0;                  // the op's tile (GEMM: m_tile * n_tiles + n_tile) or channel
  uint16_t rank = 0;
  uint16_t role = 0;                  // TraceRole
  uint32_t block = 0;                 // the CTA (blockIdx.x)
};
static_assert(sizeof(TraceRecord) == 32, "one record is 32 bytes");

struct TraceView {
  TraceRecord* records = nullptr;  // nullptr: tracing off
  uint32_t* cursor = nullptr;      // records appended so far (may exceed capacity)
  uint32_t capacity = 0;
  uint32_t rank = 0;

  TL_HOST_DEVICE bool on() const { return records != nullptr; }
};

}  // namespace tilelink
