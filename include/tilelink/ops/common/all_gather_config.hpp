// What the ops that consume gathered rows (AG+GEMM, MoE part 1, SP attention) share about their
// all-gather's configuration (AllGatherConfig, comm/collectives.hpp).
#pragma once

#include "tilelink/comm/collectives.hpp"

namespace tilelink {

// The all-gather such an op runs when its configuration says nothing else: the copy engine, each
// rank pulling from every peer, communication tiles sized by the op (comm_rows 0), and on SMs
// blocks chosen by the op (num_blocks 0).
inline constexpr AllGatherConfig kAutomaticAllGather{CommResource::kCopyEngine, AgMethod::kPull, DataPath::kLdSt,
                                                     CommOrder::kFullMesh, 0, 0, 512};

// True when two all-gather configurations are the same, field by field.
bool same_comm(const AllGatherConfig& a, const AllGatherConfig& b);

}  // namespace tilelink
