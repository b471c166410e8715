#include "tilelink/runtime/device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "tilelink/core/error.hpp"

namespace tilelink {

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  TL_REQUIRE(bytes > 0, "DeviceBuffer", "bytes", bytes, "> 0");
  TL_CUDA_CHECK(cudaSetDevice(device));
  TL_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  // Destructors do not throw; cudaFree is device-independent for a pointer from cudaMalloc.
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

}  // namespace tilelink
