// Micro-benchmarks of the primitives (`tilelink bench primitives`).
#pragma once

#include <cstdint>
#include <string>

#include "bench/report.hpp"

namespace tilelink::bench {

struct PrimitiveOptions {
  int world = 2;       // ranks; the micro-benchmarks use ranks 0 and 1
  bool quick = false;  // fewer repetitions and smaller transfers: a smoke run
  uint64_t seed = 1;
};

// Notify -> wait round trip between two ranks, one CTA each, 10^4 round trips per launch, for
// push-style (peer_tile_notify -> consumer_tile_wait) and poll-style (producer_tile_notify ->
// peer_tile_wait) signalling in set and add mode. signal_latency.cu.
Table bench_signal_latency(const PrimitiveOptions& options);

// tile_push_data / tile_pull_data of one large buffer from rank 0 to rank 1 by k CTAs, ld/st and
// bulk (TMA) paths, against cudaMemcpyAsync D2D of the same bytes. sm_bandwidth.cu.
Table bench_sm_bandwidth(const PrimitiveOptions& options);

// Copy-engine bandwidth by chunk size: rank_copy_data of each chunk, then rank_notify, as in a
// chunked all-gather. ce_chunks.cu.
Table bench_ce_chunks(const PrimitiveOptions& options);

}  // namespace tilelink::bench
