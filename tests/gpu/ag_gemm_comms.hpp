// The all-gather variants the AG+GEMM GPU tests run: the copy engine and the SM paths.
#pragma once

#include "tilelink/tilelink.hpp"

namespace tilelink::test {

struct AgComm {
  const char* name;
  CommResource resource;
  AgMethod method;
  DataPath path;
  CommOrder order;
};
inline constexpr AgComm kAgComms[] = {
    {"ce_pull_mesh", CommResource::kCopyEngine, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh},
    {"ce_push_mesh", CommResource::kCopyEngine, AgMethod::kPush, DataPath::kLdSt, CommOrder::kFullMesh},
    {"sm_pull_mesh_ldst", CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh},
    {"sm_pull_ring_bulk", CommResource::kSm, AgMethod::kPull, DataPath::kBulk, CommOrder::kRing},
    {"sm_push_mesh_bulk", CommResource::kSm, AgMethod::kPush, DataPath::kBulk, CommOrder::kFullMesh},
    {"sm_push_ring_ldst", CommResource::kSm, AgMethod::kPush, DataPath::kLdSt, CommOrder::kRing},
};

}  // namespace tilelink::test
