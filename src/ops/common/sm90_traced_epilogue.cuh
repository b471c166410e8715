// An sm90 epilogue that records each tile's epilogue as a span of the device timeline (tilelink
// trace): Base::store's duration in consumer thread 0, tile m_tile * n_tiles + n_tile. Off (a
// default TraceView), one predicated branch per tile.
#pragma once

#include "ops/common/sm90_hooked_epilogue.cuh"
#include "tilelink/primitives/trace.cuh"

namespace tilelink::detail {

struct EpilogueTrace : PlainEpilogueView {
  TraceView view;
  uint32_t n_tiles = 0;  // names a tile (m_tile * n_tiles + n_tile)

  CUTLASS_DEVICE uint64_t before() const { return trace_start(view); }
  template <class TileCoord>
  CUTLASS_DEVICE void after(TileCoord const& coord, int thread_idx, uint64_t start) const {
    if (!view.on() || thread_idx != 0) return;
    if (static_cast<uint32_t>(cute::get<1>(coord)) >= n_tiles) return;  // a cluster's padding tile along N
    const uint32_t tile =
        static_cast<uint32_t>(cute::get<0>(coord)) * n_tiles + static_cast<uint32_t>(cute::get<1>(coord));
    trace_span(view, TraceKind::kEpilogue, tile, TraceRole::kConsumer, start, global_time_ns());
  }
};

template <class Base>
using Sm90TracedEpilogue = Sm90HookedEpilogue<Base, EpilogueTrace>;

}  // namespace tilelink::detail
