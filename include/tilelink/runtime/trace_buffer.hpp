// Host side of the device timeline (tilelink trace): one record buffer per rank on the rank's
// device. An op given a TraceBuffer (set_trace) has its kernels append per-tile spans to it on
// every call until set_trace(nullptr).
#pragma once

#include <cstdint>
#include <vector>

#include "tilelink/primitives/trace.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

class TraceBuffer {
 public:
  // Room for `capacity` records per rank (32 bytes each). Throws InvalidArgument for 0.
  TraceBuffer(const World& world, uint32_t capacity);

  // What rank r's kernels record through.
  TraceView view(int rank) const;
  // Forgets every record (synchronous: call between runs, not during one).
  void clear();
  // Every rank's records, in no particular order (synchronizes the devices first).
  std::vector<TraceRecord> records() const;
  // Records that did not fit in `capacity` since the last clear().
  uint64_t dropped() const;

 private:
  const World* world_;
  uint32_t capacity_;
  std::vector<DeviceBuffer> records_, cursors_;
  std::vector<uint32_t> cursor_values() const;
};

}  // namespace tilelink
