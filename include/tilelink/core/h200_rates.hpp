// Rates of one NVIDIA H200 that both the ops' automatic rules and the plan's cost model start
// from, measured in this repository (docs/PERF.md, 2026-12-02) or given in DESIGN.md section 7.
// One place, so that a rule and the model that checks it cannot drift apart.
#pragma once

namespace tilelink::h200 {

inline constexpr int kSms = 132;
inline constexpr double kBf16GemmFlops = 790e12;  // dense bf16 GEMM, cuBLAS (DESIGN.md section 7)
// Dense e4m3 GEMM with fp32 promotion, tensor-scaled: 2x the bf16 rate. Measured on an H100 (same
// SMs and clocks as the H200), docs/PERF.md 2026-12-05 eleventh session: cuBLASLt 1506 TFLOP/s
// (`tilelink bench ag_gemm --dtype e4m3 --scaling tensor --world 1 --m 8192 --n 8192 --k 8192`)
// against cuBLAS bf16 749 (`bench ag_gemm --world 1` on the same shape); its row-scaled mode ran
// 1001 and its block-scaled 1362. Not yet measured on the H200 itself.
inline constexpr double kE4m3GemmFlops = 2 * kBf16GemmFlops;
inline constexpr double kCtaCopyBandwidth = 48e9;  // one CTA's ld/st or bulk copy, bytes/s (docs/PERF.md)
// GEMM+RS's epilogue sum (GemmRsReducer::kEpilogue): 256 threads with 16 loads of 16 bytes in
// flight each, twice the measured reduction CTA's 512 x 4, and both latency-bound: 2 x
// kCtaCopyBandwidth. Derived, not yet measured (no GPU was lent when it was written, 2026-12-04);
// `tilelink bench gemm_rs --reducer epilogue` next to `plan gemm_rs --reducer epilogue` checks it.
inline constexpr double kEpilogueSumBandwidth = 2 * kCtaCopyBandwidth;
// A GEMM epilogue's TMA store of a finished tile into a peer (GemmRsScatter::kEpiloguePush), per
// CTA, before the link: assumed to be one CTA's copy rate until measured (`tilelink trace gemm_rs
// --scatter push --reducer epilogue` reads it back from the epilogues' spans).
inline constexpr double kEpilogueStoreBandwidth = kCtaCopyBandwidth;
inline constexpr double kHbmBandwidth = 4.3e12;    // bytes read + written per second (KINDS.md D2D copy)
inline constexpr double kNvlinkBandwidth = 390e9;  // bytes/s into one GPU (DESIGN.md section 7: 370-415 GB/s)
inline constexpr double kCeChunkOverhead = 5e-6;  // fixed cost of one copy-engine copy (docs/PERF.md: ~5 us)
inline constexpr double kCeBandwidth = 2.0e12;     // copy engine, large chunks (docs/PERF.md: 2041 GB/s)
inline constexpr double kNotifyLatency = 0.86e-6;  // one-way notify -> wait (docs/PERF.md: 0.74-0.88 us)

}  // namespace tilelink::h200
