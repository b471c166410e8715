// The CPU suite's protocol runners, shared by the protocol tests (test_all_gather.cpp,
// test_reduce_scatter.cpp, test_ag_gemm_protocol.cpp, test_gemm_rs_protocol.cpp,
// test_moe_protocol.cpp, test_sp_attention_protocol.cpp) and the protocol fuzzer
// (test_fuzz_protocols.cpp). Each run_* runs one case of a protocol on the CPU executor for a
// number of consecutive calls, with fresh random inputs and poisoned outputs every call, and
// returns "" or the first mismatch against an independent reference. The fields the fuzzer sets
// beyond the protocol tests' (the roles' block counts, the reduce-scatter's slice rows, MoE part
// 1's all-gather variant) default to the values those tests always ran with.
#pragma once

#include "collective_runners.hpp"
#include "gemm_runners.hpp"
#include "moe_runners.hpp"
#include "sp_attention_runner.hpp"
