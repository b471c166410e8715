// DeviceBuffer: cudaMalloc'd memory on one device, not symmetric (per-rank inputs and outputs,
// schedule tables, scratch). Move-only; freed on destruction.
#pragma once

#include <cstddef>

namespace tilelink {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` (> 0) on `device`; leaves `device` current.
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
