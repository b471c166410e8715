// What the tune searches hand their plan models, derived from an op's configuration as the op
// derives it. Internal to src/tune.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "tilelink/comm/all_gather_policy.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/sim/ag_gemm_sim.hpp"

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

// A model configuration's all-gather fields (comm_rows, resource, comm_ctas: sim::AgGemmConfig,
// sim::MoeConfig, sim::SpAttentionConfig) from the op's all-gather `config`, its automatic choices
// resolved as the op resolves them (all_gather_policy::resolved) for rows of k bf16.
template <class ModelConfig>
void set_model_comm(ModelConfig& q, const AllGatherConfig& config, uint32_t rows_per_rank, uint32_t k,
                    int sm_budget) {
  const AllGatherConfig c = all_gather_policy::resolved(config, rows_per_rank, k, sm_budget);
  q.comm_rows = c.comm_rows;
  q.resource = c.resource == CommResource::kSm ? sim::Resource::kSm : sim::Resource::kCopyEngine;
  q.comm_ctas = c.resource == CommResource::kSm ? c.num_blocks : 0;
}

}  // namespace tilelink::detail
