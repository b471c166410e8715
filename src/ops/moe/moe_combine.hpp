// The top-k combine and the owners' reduction of MoE part 2 on the GPU, one kernel
// (moe_rs_protocol.hpp).
// Internal to the MoE ops.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/ops/moe/moe_policy.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/primitives/trace.hpp"

namespace tilelink::detail {

// Most (token, k) pairs of one combine block (plan.tokens.comm_rows * topk): its rows and
// weights are staged in shared memory.
constexpr uint32_t kMoeCombineMaxPairs = moe_policy::kCombineMaxPairs;

// moe_combine_reduce_block in `blocks` CTAs (launched in clusters of `cluster`): y = the rank's
// sorted rows (m.rows() x plan.n bf16, the grouped GEMM's output, tiles notified on `sig`),
// weights = tokens x topk fp32, recv = this rank's pointer to the symmetric slots (world x
// tokens_per_rank x n bf16; unused with no peers), send = with plan.staged this rank's staging
// (tokens x n bf16, global rows; else unused), out = tokens_per_rank x n bf16. Each token's
// weighted sum lands, rounded to bf16, in its owner's slot of this rank (the output with no
// peers; staged, for a peer, in `send`, which the stream puts: moe_staged_put); the owner sums
// the slots in rank order in fp32. m.num_tiles is not read. With `trace` on, thread 0 of each CTA
// records its waits and notifies.
void launch_moe_combine(const MoeRsPlan& plan, const MoeMappingView& m, const SignalView& sig,
                        const SymmetricView& heap, const void* y, const float* weights, void* recv, void* send,
                        void* out, uint32_t blocks, uint32_t cluster, cudaStream_t stream, const TraceView& trace = {});

// The combine in the GEMM's epilogue (MoeCombine::kEpilogue): before the call's GEMM, on its
// stream, expected[g] = the tiles reaching token block g (of the *num_tiles on the device;
// `expected` holds token blocks + 1 entries, the last a scratch one) and every item counter
// (arrived[g * n_tiles + c]) zeroed; after the GEMM, `blocks` CTAs sum
// the rank's own blocks over the P senders' slots (moe_reduce_own_blocks), then the exit barrier.
void launch_moe_epilogue_counts(const MoeRsPlan& plan, const MoeMappingView& m, const uint32_t* num_tiles,
                                uint32_t* expected, uint32_t* arrived, cudaStream_t stream);
void launch_moe_reduce(const MoeRsPlan& plan, const SignalView& sig, const void* recv, void* out, uint32_t blocks,
                       cudaStream_t stream, const TraceView& trace = {});

void preload_moe_combine();

}  // namespace tilelink::detail
