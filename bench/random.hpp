// Deterministic random test data. The device fills buffers from (seed, index) alone, so the host
// recomputes any expected element without copying inputs back.
#pragma once

#include <cstdint>

#include "tilelink/core/macros.hpp"

namespace tilelink::bench {

// splitmix64's finaliser: a bijection on 64-bit values with full avalanche.
TL_HOST_DEVICE uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

TL_HOST_DEVICE uint32_t random_word(uint64_t seed, uint64_t index) {
  return static_cast<uint32_t>(mix64(seed ^ mix64(index)) >> 32);
}

// Uniform in [-1, 1) on a grid of 2^-10. Sums of up to 2^13 such values are exact in fp32, so a
// reduction's result does not depend on its summation order and checks can demand equality.
TL_HOST_DEVICE float random_float(uint64_t seed, uint64_t index) {
  return static_cast<float>(static_cast<int32_t>(random_word(seed, index) >> 21) - 1024) *
         (1.0f / 1024.0f);
}

TL_HOST_DEVICE uint64_t rank_seed(uint64_t base, int rank) {
  return mix64(base + 0x632BE59BD9B4E019ull * static_cast<uint64_t>(rank + 1));
}

}  // namespace tilelink::bench
