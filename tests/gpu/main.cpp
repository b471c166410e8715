// Entry point of the GPU suite. Death tests (timeouts trap the device, which poisons the CUDA
// context) run in a freshly started copy of this binary: the "threadsafe" style re-executes it
// instead of forking a process that already holds a CUDA context.
//
// Test kernels are loaded eagerly: with lazy loading a test kernel's first launch can wait for a
// peer kernel that spins on it (see tilelink::preload_kernel). Set before any CUDA call.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
