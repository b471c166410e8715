// The device words of the ranks' work queues (comm/work_queue.hpp): a kernel's blocks draw units
// from a counter that is zero when the kernel starts, and the kernel's last draw puts it back to
// zero, so the counters are zeroed once, here, and never again by the host.
#pragma once

#include <cstddef>
#include <vector>

#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink {

// Per rank of `world` (indexed by rank), `bytes` of zeroed device memory on the rank's device,
// zero before any kernel on the ranks' streams may read it; the entries of other processes' ranks
// stay empty. For state that kernels leave as they found it (counters, flags).
std::vector<DeviceBuffer> zeroed_buffers(const World& world, size_t bytes);
// zeroed_buffers of `words` uint32 counters.
std::vector<DeviceBuffer> zeroed_work_counters(const World& world, size_t words = 1);

}  // namespace tilelink
