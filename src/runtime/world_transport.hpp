// The world's transport (WorldOptions::transport): how it is read and checked. Internal to the
// runtime (world.cpp).
#pragma once

#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// A one-process world's ranks reach each other by load/store only (NVSHMEM's PEs are processes):
// InvalidArgument from `where` otherwise.
void require_load_store(const char* where, const WorldOptions& options);

// TILELINK_TRANSPORT (load_store | put_signal), else `fallback`; InvalidArgument for another value.
Transport transport_from_env(Transport fallback);

// The transport decides collective steps (a push or a pull, what an op refuses): every process of
// a process world must run the same. Collective (NVSHMEM allocation and barrier); InvalidArgument
// in every process when any differs.
void check_same_transport(int rank, int size, Transport mine);

}  // namespace tilelink::detail
