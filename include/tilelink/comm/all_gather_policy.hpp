// The all-gather's automatic choices, as pure functions, for the ops whose kernels consume
// gathered rows of bf16 (AG+GEMM's A, MoE's tokens, SP attention's K/V): they resolve their
// all-gather with these, and the tune searches model it the same way. The measurements behind
// each rule are in docs/ag_gemm.md and docs/DESIGN-NOTES.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "tilelink/comm/collectives.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::all_gather_policy {

constexpr uint32_t kElementBytes = 2;                 // bf16
constexpr uint64_t kCopyEngineTileBytes = 8u << 20;  // a copy-engine tile costs ~5 µs fixed
// SMs left free per rank, when world > 1, next to a kernel that spins on the all-gather: with
// none, AG+GEMM's GEMM and all-gather ran nearly back to back (docs/DESIGN-NOTES.md).
constexpr int kSlackSms = 2;

// The copy engine on virtual ranks copies device-local memory, and such copies run on SMs: the
// CTAs that spin waiting for the all-gather's tiles -- of all ranks of the GPU together -- must
// leave kCopyEngineFreeSms SMs free, or the copies never start and the waits expire (found by the
// fuzzer: MoE part 1 with its grouped GEMM and gather filling all 132 SMs).
constexpr int kCopyEngineFreeSms = 2;

// "" when `waiting` CTAs in all (summed over the ranks) leave the copy engine its SMs, or the rule
// does not apply (SM all-gather, one rank, ranks on separate GPUs); else the reason, for the
// caller to prefix with the argument that set the count.
inline std::string check_copy_engine_room(const World& world, const AllGatherConfig& config, int waiting) {
  if (config.resource != CommResource::kCopyEngine || world.size() == 1 || world.mode() != WorldMode::kVirtual) {
    return "";
  }
  const int sms = world.num_sms(0);
  if (waiting <= sms - kCopyEngineFreeSms) return "";
  return std::to_string(world.size()) + " virtual ranks would keep " + std::to_string(waiting) + " of the GPU's " +
         std::to_string(sms) + " SMs waiting for the copy-engine all-gather; expected at most " +
         std::to_string(sms - kCopyEngineFreeSms) + " in all (its device-local copies run on SMs: " +
         std::to_string(kCopyEngineFreeSms) + " must stay free)";
}

// With own_rows on the copy engine beyond one rank, every rank copies its own rows within its
// device, and such copies run on SMs: the rank's `waiting` CTAs must leave kCopyEngineFreeSms of its
// `sm_budget` free (else the copy never starts and the GEMM waits for it forever). "" when they do
// or the rule does not apply; else the reason.
inline std::string check_own_rows_room(const World& world, const AllGatherConfig& config, bool own_rows, int rank,
                                       int waiting) {
  if (!own_rows || config.resource != CommResource::kCopyEngine || world.size() == 1) return "";
  const int budget = world.sm_budget(rank);
  if (waiting <= budget - kCopyEngineFreeSms) return "";
  return "rank " + std::to_string(rank) + " would keep " + std::to_string(waiting) + " of its " + std::to_string(budget) +
         " SMs waiting for its own rows, which the copy engine copies within the device on SMs; expected at most " +
         std::to_string(budget - kCopyEngineFreeSms) + " (" + std::to_string(kCopyEngineFreeSms) + " must stay free)";
}

// Rows per communication tile when the config says 0: 128 on SMs; on the copy engine the fewest
// rows (a multiple of 128) making a tile of at least 8 MiB; never more than a shard.
// The rows are of `row_bytes` (auto_comm_rows: of k bf16).
inline uint32_t auto_comm_rows_bytes(CommResource resource, uint32_t m_per_rank, uint64_t row_bytes) {
  uint32_t rows = 128;
  if (resource == CommResource::kCopyEngine) {
    while (rows < m_per_rank && rows * row_bytes < kCopyEngineTileBytes) rows += 128;
  }
  return std::min(rows, std::max(m_per_rank, 1u));
}
inline uint32_t auto_comm_rows(CommResource resource, uint32_t m_per_rank, uint32_t k) {
  return auto_comm_rows_bytes(resource, m_per_rank, uint64_t(k) * kElementBytes);
}

// CTAs for the GEMM that consumes the gathered rows (AG+GEMM's, MoE part 1's grouped GEMM) on a
// rank with `sm_budget` SMs: the budget minus the SM all-gather's blocks, capped by the config
// (`configured` != 0), else less the slack when world > 1. May be < 1.
inline int gemm_sm_count(int sm_budget, int world_size, uint32_t comm_blocks, uint32_t configured) {
  const int left = sm_budget - static_cast<int>(comm_blocks);
  if (configured != 0) return std::min(left, static_cast<int>(configured));
  return world_size > 1 ? left - kSlackSms : left;
}

// CTAs of an SM all-gather when the config says 0: an eighth of the rank's SM budget, at least 1.
inline uint32_t auto_sm_blocks(int sm_budget) { return static_cast<uint32_t>(std::max(1, sm_budget / 8)); }

// `config` with its automatic choices filled in for rows of k bf16 on ranks of `sm_budget` SMs:
// comm_rows (auto_comm_rows) and, on SMs, the blocks (auto_sm_blocks). The ops run this; the tune
// searches model it.
// resolved_bytes: for rows of `row_bytes` (packed FP8 rows, fp8.hpp).
inline AllGatherConfig resolved_bytes(AllGatherConfig config, uint32_t rows_per_rank, uint64_t row_bytes,
                                      int sm_budget) {
  if (config.comm_rows == 0) config.comm_rows = auto_comm_rows_bytes(config.resource, rows_per_rank, row_bytes);
  if (config.resource == CommResource::kSm && config.num_blocks == 0) config.num_blocks = auto_sm_blocks(sm_budget);
  return config;
}
inline AllGatherConfig resolved(AllGatherConfig config, uint32_t rows_per_rank, uint32_t k, int sm_budget) {
  return resolved_bytes(config, rows_per_rank, uint64_t(k) * kElementBytes, sm_budget);
}

// The all-gather of an op whose kernel consumes gathered rows of `row_bytes` each, `config`
// resolved on rank 0's SM budget; all_gather_arguments: rows of k bf16.
inline AllGatherArguments all_gather_arguments_bytes(const World& world, const SymmetricBuffer* gathered,
                                                     size_t offset, uint32_t rows_per_rank, uint64_t row_bytes,
                                                     const AllGatherConfig& config) {
  AllGatherArguments ag;
  ag.gathered = gathered;
  ag.gathered_offset = offset;
  ag.rows_per_rank = rows_per_rank;
  ag.row_bytes = static_cast<uint32_t>(row_bytes);
  ag.config = resolved_bytes(config, rows_per_rank, row_bytes, world.sm_budget(0));
  return ag;
}
inline AllGatherArguments all_gather_arguments(const World& world, const SymmetricBuffer* gathered, size_t offset,
                                               uint32_t rows_per_rank, uint32_t k, const AllGatherConfig& config) {
  return all_gather_arguments_bytes(world, gathered, offset, rows_per_rank, uint64_t(k) * kElementBytes, config);
}

}  // namespace tilelink::all_gather_policy
