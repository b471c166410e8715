// What the ops that consume gathered rows (AG+GEMM, MoE part 1, SP attention) share about their
// all-gather's configuration (AllGatherConfig, comm/collectives.hpp).
#pragma once

#include "tilelink/comm/collectives.hpp"

namespace tilelink {

// True when two all-gather configurations are the same, field by field.
bool same_comm(const AllGatherConfig& a, const AllGatherConfig& b);

}  // namespace tilelink
