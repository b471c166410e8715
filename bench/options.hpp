// What every benchmark of tilelink_bench takes besides its problem and configuration. Each
// benchmark family declares its options and entry point in its own header (bench/<family>.hpp,
// defined in bench/<family>.cu): every benchmark runs on make_bench_world's ranks (virtual ranks
// of device 0, or one rank per GPU with TILELINK_RANKS=gpus: bench/world_choice.hpp), checks its
// result once against an independent reference (and throws Error if it differs), then times with
// CUDA events: median of repeated calls after warm-up, on fresh random data.
#pragma once

#include <cstdint>

namespace tilelink::bench {

struct TimingOptions {
  int warmup = 5;
  int iters = 20;
};

// What every benchmark's options hold besides its problem and configuration: the ranks (as
// make_bench_world places them), the timing, and the seed of the random inputs.
struct RunOptions {
  int world = 8;
  TimingOptions timing;
  uint64_t seed = 1;
};

}  // namespace tilelink::bench
