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
// (a stream wait nobody satisfies) fails the suite by name instead of hanging it at exit. And no
// test may run longer than TILELINK_TEST_TIMEOUT_S seconds (default 180; the whole suite takes
// about 3 minutes of GPU time): a test that hangs -- a host wait outside the library's bounded
// ones, a death test's child that never exits -- stops the process naming the test, where
// otherwise only ctest's timeout would end it, without saying which test it was.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "tilelink/runtime/world.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
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

// One thread that watches the running test's age; OnTestStart arms it, OnTestEnd disarms it.
class TestWatchdog : public testing::EmptyTestEventListener {
 public:
  explicit TestWatchdog(int limit_s) : limit_s_(limit_s) {
    std::thread([this] { watch(); }).detach();  // lives as long as the process
  }
  void OnTestStart(const testing::TestInfo& info) override {
    std::lock_guard<std::mutex> lock(mutex_);
    name_ = std::string(info.test_suite_name()) + "." + info.name();
    started_ = Clock::now();
    armed_ = true;
  }
  void OnTestEnd(const testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::lock_guard<std::mutex> lock(mutex_);
      if (!armed_ || Clock::now() - started_ < std::chrono::seconds(limit_s_)) continue;
      std::fprintf(stderr, "watchdog: %s has run for %d s (TILELINK_TEST_TIMEOUT_S): stopping the suite\n",
                   name_.c_str(), limit_s_);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(124);
    }
  }

  const int limit_s_;
  std::mutex mutex_;
  std::string name_;
  Clock::time_point started_{};
  bool armed_ = false;
};

int test_timeout_s() {
  const char* v = std::getenv("TILELINK_TEST_TIMEOUT_S");
  const int s = v != nullptr ? std::atoi(v) : 0;
  return s > 0 ? s : 180;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("TILELINK_TUNE_CACHE", "off", 1);  // ops run the configurations the tests give, not a tuned one
  tilelink::configure_cuda_environment();
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing::UnitTest::GetInstance()->listeners().Append(new DeviceIdleCheck);
  testing::UnitTest::GetInstance()->listeners().Append(new TestWatchdog(test_timeout_s()));
  const int result = RUN_ALL_TESTS();
  std::fflush(stdout);
  return result;
}
