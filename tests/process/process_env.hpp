// What the process suite's files share (tests/process): the launch's world, this process's rank and
// the random numbers every process draws alike. Defined in test_process.cu, set up by its main().
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "tilelink/core/error.hpp"

#include "tilelink/runtime/world.hpp"

namespace tilelink::test::process {

extern World* g_world;
extern uint64_t g_seed;  // the same in every process of a launch, fresh per launch (TILELINK_TEST_SEED replays one)

const World& world();
int me();  // this process's rank
// Every process draws the same values for (what, call).
std::mt19937_64 shared_rng(uint64_t what, uint64_t call);

// Whether `call` throws InvalidArgument whose message contains `needle`.
template <class F>
bool throws_invalid_argument(F&& call, const std::string& needle) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

}  // namespace tilelink::test::process
