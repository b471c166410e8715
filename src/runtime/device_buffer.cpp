#include "tilelink/runtime/device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <utility>

#include "tilelink/core/error.hpp"

namespace tilelink {

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 3) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

DeviceMemory device_memory(int device) {
  int current = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  DeviceMemory m;
  TL_CUDA_CHECK(cudaSetDevice(device));
  TL_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  TL_CUDA_CHECK(cudaSetDevice(current));
  return m;
}

void* device_malloc(size_t bytes, int device, const std::string& what) {
  TL_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t st = cudaMalloc(&p, bytes);
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the caller's next CUDA call is unaffected
    const DeviceMemory m = device_memory(device);
    throw ResourceError(what + " needs " + format_bytes(bytes) + " on device " + std::to_string(device) + ": " +
                        format_bytes(m.free) + " free of " + format_bytes(m.total));
  }
  TL_CUDA_CHECK(st);
  return p;
}

DeviceBuffer::DeviceBuffer(size_t bytes, int device) : bytes_(bytes), device_(device) {
  TL_REQUIRE(bytes > 0, "DeviceBuffer", "bytes", bytes, "> 0");
  ptr_ = device_malloc(bytes, device, "DeviceBuffer");
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
