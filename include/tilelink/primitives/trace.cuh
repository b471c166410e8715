// Device side of the timeline records (trace.hpp).
#pragma once

#include "tilelink/primitives/trace.hpp"

namespace tilelink {

TL_DEVICE uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread appends one span (a no-op when tracing is off).
TL_DEVICE void trace_span(const TraceView& trace, TraceKind kind, uint32_t tile, TraceRole role, uint64_t start_ns,
                          uint64_t end_ns) {
  if (!trace.on()) return;
  const uint32_t slot = atomicAdd(trace.cursor, 1u);
  if (slot >= trace.capacity) return;
  TraceRecord r;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.kind = static_cast<uint32_t>(kind);
  r.tile = tile;
  r.rank = static_cast<uint16_t>(trace.rank);
  r.role = static_cast<uint16_t>(role);
  r.block = blockIdx.x;
  trace.records[slot] = r;
}

// The start of a span: the time when tracing is on, else 0 (no timer read).
TL_DEVICE uint64_t trace_start(const TraceView& trace) { return trace.on() ? global_time_ns() : 0; }

}  // namespace tilelink
