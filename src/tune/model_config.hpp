// What the tune searches hand their plan models, derived from an op's configuration as the op
// derives it. Internal to src/tune. (An all-gather's automatic choices: all_gather_policy::resolved.)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {

// The CTA tile of a GEMM kernel configuration named "<bm>x<bn>x<bk>_c<cm>x<cn>" (the names of
// AgGemm::kernel_names() and MoeAgGroupGemm::kernel_names()).
inline void kernel_tile(const std::string& name, const char* where, uint32_t* bm, uint32_t* bn) {
  unsigned m = 0, n = 0;
  if (std::sscanf(name.c_str(), "%ux%u", &m, &n) != 2 || m == 0 || n == 0) {
    throw InvalidArgument(std::string(where) + ": kernel name '" + name + "': expected '<bm>x<bn>x<bk>_c<cm>x<cn>'");
  }
  *bm = m;
  *bn = n;
}

}  // namespace tilelink::detail
