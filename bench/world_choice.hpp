// Where a benchmark's ranks run: N virtual ranks on device 0 (the default: one GPU is enough),
// one rank per GPU when the environment says TILELINK_RANKS=gpus (the multi-GPU runs), or one rank
// per process with TILELINK_RANKS=processes, under a launcher (`tilelink launch`; World::
// from_launcher) -- for the benchmarks that support it (bench primitives' signal round trip).
#pragma once

#include <string>

#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

// The environment variable and its values: unset, "" or "virtual" for virtual ranks on device 0;
// "gpus" for one rank per GPU (devices 0..world-1, as CUDA_VISIBLE_DEVICES numbers them);
// "processes" for one rank per process.
inline constexpr const char* kRanksVariable = "TILELINK_RANKS";

// Whether TILELINK_RANKS asks for one rank per GPU / one rank per process. Throw InvalidArgument
// naming the variable for any other value than the ones above.
bool ranks_on_gpus();
bool ranks_in_processes();

// The world of every benchmark: World::multi_gpu({0, ..., world - 1}) when ranks_on_gpus(),
// World::from_launcher() when ranks_in_processes(), else World::virtual_ranks(world). Throws
// InvalidArgument, naming TILELINK_RANKS and the device count, when one rank per GPU is asked for
// and fewer GPUs than ranks are visible, or the launcher's WORLD_SIZE is not `world`.
// A benchmark that runs on process worlds says so (`processes`); the others refuse
// TILELINK_RANKS=processes by name.
World make_bench_world(int world, bool processes = false);

// "8 virtual ranks", "1 virtual rank", "8 ranks on 8 GPUs", "1 rank on 1 GPU": the phrase of the
// tables' titles, for a world of `world` ranks as make_bench_world builds it.
std::string ranks_phrase(int world);

// The tool's header line: "8 virtual ranks on device 0" or "8 ranks on GPUs 0-7 (TILELINK_RANKS=gpus)".
std::string ranks_placement(int world);

// Help text of the tool's --world options.
inline constexpr const char* kWorldOptionHelp =
    "ranks: virtual ranks on device 0, or one per GPU with TILELINK_RANKS=gpus";

}  // namespace tilelink::bench
