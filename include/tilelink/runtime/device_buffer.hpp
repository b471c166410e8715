// DeviceBuffer: cudaMalloc'd memory on one device, not symmetric (per-rank inputs and outputs,
// schedule tables, scratch). Move-only; freed on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tilelink {

// cudaMalloc of `bytes` on `device`, leaving `device` current. When the memory is not there it
// throws ResourceError "<what> needs <bytes> on device <d>: <free> free of <total>" (`what` says
// whose allocation it is, e.g. "SymmetricHeap (rank 3's segment)"), not the raw CUDA error.
void* device_malloc(size_t bytes, int device, const std::string& what);

// "1.5 GiB", "512.0 MiB", "4.0 KiB", "12 B".
std::string format_bytes(uint64_t bytes);
// Free and total bytes of `device`'s memory now (cudaMemGetInfo); the current device is kept.
struct DeviceMemory {
  size_t free = 0, total = 0;
};
DeviceMemory device_memory(int device);

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` (> 0) on `device`; leaves `device` current. ResourceError when it does not
  // fit (device_malloc).
  DeviceBuffer(size_t bytes, int device);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  // char* by default: byte arithmetic works, and it converts to void* for the CUDA APIs.
  template <class T = char>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace tilelink
