// Entry point of the GPU suite. Death tests (timeouts trap the device, which poisons the CUDA
// context) run in a freshly started copy of this binary: the "threadsafe" style re-executes it
// instead of forking a process that already holds a CUDA context.
//
// Before any CUDA call: test kernels are loaded eagerly (with lazy loading a test kernel's first
// launch can wait for a peer kernel that spins on it, see tilelink::preload_kernel), and every
// stream gets a hardware queue of its own (tilelink::configure_cuda_environment).
//
// The tune cache is off: an op left on automatic must not pick up the machine's tuned config.
//
// After every test the device must go idle: a test that leaves work behind that never completes
// (a stream wait nobody satisfies) fails the suite by name instead of hanging it at exit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "tilelink/runtime/world.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

class DeviceIdleCheck : public testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const testing::TestInfo& info) override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return;
    std::atomic<bool> idle{false};
    std::thread watchdog([&] {
      for (int i = 0; i < 300 && !idle; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!idle) {
        std::fprintf(stderr, "device still busy 30 s after %s.%s: the test left work that never completes\n",
                     info.test_suite_name(), info.name());
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
    const cudaError_t status = cudaDeviceSynchronize();
    idle = true;
    watchdog.join();
    if (status != cudaSuccess) {
      std::fprintf(stderr, "device error after %s.%s: %s\n", info.test_suite_name(), info.name(),
                   cudaGetErrorString(status));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("TILELINK_TUNE_CACHE", "off", 1);  // ops run the configurations the tests give, not a tuned one
  tilelink::configure_cuda_environment();
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::UnitTest::GetInstance()->listeners().Append(new DeviceIdleCheck);
  const int result = RUN_ALL_TESTS();
  std::fflush(stdout);
  return result;
}
