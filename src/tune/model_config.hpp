// What the tune searches hand their plan models, derived from an op's configuration as the op
// derives it. Internal to src/tune (and the tool's plan commands, above it). (An all-gather's automatic choices: all_gather_policy::resolved.)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/core/error.hpp"

namespace tilelink::detail {

// The CTA tile of a GEMM kernel configuration named "<bm>x<bn>x<bk>_c<cm>x<cn>" (the names of
// AgGemm::kernel_names(), GemmRs::kernel_name() and MoeAgGroupGemm::kernel_names()).
inline void kernel_tile(const std::string& name, const char* where, uint32_t* bm, uint32_t* bn) {
  unsigned m = 0, n = 0;
  // FP8 configurations start with the data type and scaling ("e4m3_row_128x128x128_c2x1").
  const size_t tile = name.find_first_of("0123456789", name.rfind('_', name.find('x')) + 1);
  if (tile == std::string::npos || std::sscanf(name.c_str() + tile, "%ux%u", &m, &n) != 2 || m == 0 || n == 0) {
    throw InvalidArgument(std::string(where) + ": kernel name '" + name +
                          "': expected '[<dtype>_<scaling>_]<bm>x<bn>x<bk>_c<cm>x<cn>'");
  }
  *bm = m;
  *bn = n;
}

}  // namespace tilelink::detail
