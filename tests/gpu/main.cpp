// Entry point of the GPU suite. Death tests (timeouts trap the device, which poisons the CUDA
// context) run in a freshly started copy of this binary: the "threadsafe" style re-executes it
// instead of forking a process that already holds a CUDA context.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
