// The unique id of a process world started by torchrun (World::from_launcher without
// TILELINK_UNIQUE_ID): rank 0 makes it and publishes it on torchrun's store (c10d::TCPStore at
// MASTER_ADDR:MASTER_PORT), the others read it there. The store client is torch's, in the plugin
// libtilelink_torchrun.so (src/torchrun), loaded with dlopen only here.
#pragma once

#include "tilelink/runtime/world.hpp"

namespace tilelink::detail {

// Whether the environment is torchrun's (MASTER_ADDR and MASTER_PORT set).
bool under_torchrun();

// Collective over the job's `size` processes. Throws InvalidArgument naming a bad variable, and
// Error when the plugin is missing (saying where it looked) or the store fails.
UniqueId unique_id_from_torch_store(int rank, int size);

}  // namespace tilelink::detail
