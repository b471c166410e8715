// Where a benchmark's ranks run: N virtual ranks on device 0 (the default: one GPU is enough), or
// one rank per GPU when the environment says TILELINK_RANKS=gpus (the multi-GPU runs).
#pragma once

#include <string>

#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {

// The environment variable and its values: unset, "" or "virtual" for virtual ranks on device 0;
// "gpus" for one rank per GPU (devices 0..world-1, as CUDA_VISIBLE_DEVICES numbers them).
inline constexpr const char* kRanksVariable = "TILELINK_RANKS";

// Whether TILELINK_RANKS asks for one rank per GPU. Throws InvalidArgument naming the variable
// for any other value than the ones above.
bool ranks_on_gpus();

// The world of every benchmark: World::multi_gpu({0, ..., world - 1}) when ranks_on_gpus(), else
// World::virtual_ranks(world). Throws InvalidArgument, naming TILELINK_RANKS and the device
// count, when one rank per GPU is asked for and fewer GPUs than ranks are visible.
World make_bench_world(int world);

// "8 virtual ranks", "1 virtual rank", "8 ranks on 8 GPUs", "1 rank on 1 GPU": the phrase of the
// tables' titles, for a world of `world` ranks as make_bench_world builds it.
std::string ranks_phrase(int world);

// The tool's header line: "8 virtual ranks on device 0" or "8 ranks on GPUs 0-7 (TILELINK_RANKS=gpus)".
std::string ranks_placement(int world);

// Help text of the tool's --world options.
inline constexpr const char* kWorldOptionHelp =
    "ranks: virtual ranks on device 0, or one per GPU with TILELINK_RANKS=gpus";

}  // namespace tilelink::bench
