// Exceptions and call checks. Every CUDA runtime, driver, cuBLAS and NCCL call in TileLink goes
// through one of the TL_*_CHECK macros; bad arguments throw InvalidArgument before anything is
// launched.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "tilelink/core/error_record.hpp"

namespace tilelink {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something the callee cannot work with. The message names the argument, the
// value it had and what was expected.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime / driver / library call failed.
class CudaError : public Error {
 public:
  CudaError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// A resource did not fit: device memory, streams. The message says what was asked for, where
// (rank, device), and what was available.
class ResourceError : public Error {
 public:
  using Error::Error;
};

// A bounded wait expired. Carries the device-side (or executor-side) record of who waited for what.
class TimeoutError : public Error {
 public:
  TimeoutError(const std::string& what, const ErrorRecord& record, std::string op_name)
      : Error(what), record_(record), op_name_(std::move(op_name)) {}
  const ErrorRecord& record() const { return record_; }
  const std::string& op_name() const { return op_name_; }

 private:
  ErrorRecord record_;
  std::string op_name_;
};

// "timeout in op 'x': rank 2, block 5, tile 7 waited on channel 3 in rank 1's memory for value
// >= 4, observed 3 after 5.000 s" -- the one wording for device, stream and executor waits.
// `kernel` (may be empty) names the kernel the waiter ran in.
std::string describe_timeout(const ErrorRecord& record, const std::string& op_name, const std::string& kernel = "");

// A kernel trapped or faulted, and CUDA reported it at a later, unrelated call: the sticky error
// ends the process's CUDA context. The runtime installs an explainer (runtime/error_channel.cpp)
// that returns what the device recorded before its trap, if anything (a bounded wait's record).
// A TL_*_CHECK that sees a sticky error then throws TimeoutError with that record -- op, rank,
// block, tile, channel, whose data -- and the call where CUDA reported it, instead of the bare
// error code; with nothing recorded, CudaError saying that a kernel faulted.
struct RecordedDeviceError {
  ErrorRecord record;
  std::string op_name;
  std::string description;
};
using StickyErrorExplainer = bool (*)(RecordedDeviceError* out);
void set_sticky_error_explainer(StickyErrorExplainer explainer);

// True for the errors that end a CUDA context (a kernel's trap, fault or illegal instruction).
bool is_sticky_cuda_error(int status);

namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line);
[[noreturn]] void throw_driver_error(int status, const char* expr, const char* file, int line);

template <class T>
std::string to_display(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}
inline std::string to_display(const void* p) {
  if (p == nullptr) return "nullptr";
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
  return os.str();
}
template <class T>
std::string to_display(T* p) {
  return to_display(static_cast<const void*>(p));
}
// Text (a string literal or const char*) shows as itself, not as its address.
inline std::string to_display(const char* s) { return s == nullptr ? "nullptr" : std::string(s); }

// "argument 'name' = value: expected <expectation>" -- the one format for every bad input.
template <class T>
[[noreturn]] void throw_invalid_argument(const char* where, const char* name, const T& value,
                                         const std::string& expected) {
  throw InvalidArgument(std::string(where) + ": argument '" + name + "' = " + to_display(value) +
                        ": expected " + expected);
}

}  // namespace detail

// Throws InvalidArgument unless `cond`. `where` names the API entry point.
#define TL_REQUIRE(cond, where, name, value, expected)                        \
  do {                                                                        \
    if (!(cond)) ::tilelink::detail::throw_invalid_argument(where, name, value, expected); \
  } while (0)

#define TL_CUDA_CHECK(expr)                                                                  \
  do {                                                                                       \
    cudaError_t tl_status_ = (expr);                                                         \
    if (tl_status_ != cudaSuccess) ::tilelink::detail::throw_cuda_error(tl_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// For driver entry points obtained through cudaGetDriverEntryPointByVersion (CUresult == int).
#define TL_CU_CHECK(expr)                                                                    \
  do {                                                                                       \
    int tl_status_ = static_cast<int>(expr);                                                 \
    if (tl_status_ != 0) ::tilelink::detail::throw_driver_error(tl_status_, #expr, __FILE__, __LINE__); \
  } while (0)

}  // namespace tilelink
