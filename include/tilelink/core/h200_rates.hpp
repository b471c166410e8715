// Rates of one NVIDIA H200 that both the ops' automatic rules and the plan's cost model start
// from, measured in this repository (docs/PERF.md, 2026-12-02) or given in DESIGN.md section 7.
// One place, so that a rule and the model that checks it cannot drift apart.
#pragma once

namespace tilelink::h200 {

inline constexpr int kSms = 132;
inline constexpr double kBf16GemmFlops = 790e12;  // dense bf16 GEMM, cuBLAS (DESIGN.md section 7)
// Dense e4m3 GEMM with fp32 promotion: the H200's dense FP8 peak (1979 TFLOP/s, twice bf16's) at
// the fraction cuBLAS reaches in bf16 (790 / 989). Assumed, not yet measured (no GPU was lent when
// it was written, 2026-12-05); `tilelink bench ag_gemm --dtype e4m3 --world 1` checks it.
inline constexpr double kE4m3GemmFlops = 2 * kBf16GemmFlops;
inline constexpr double kCtaCopyBandwidth = 48e9;  // one CTA's ld/st or bulk copy, bytes/s (docs/PERF.md)
// GEMM+RS's epilogue sum (GemmRsReducer::kEpilogue): 256 threads with 16 loads of 16 bytes in
// flight each, twice the measured reduction CTA's 512 x 4, and both latency-bound: 2 x
// kCtaCopyBandwidth. Derived, not yet measured (no GPU was lent when it was written, 2026-12-04);
// `tilelink bench gemm_rs --reducer epilogue` next to `plan gemm_rs --reducer epilogue` checks it.
inline constexpr double kEpilogueSumBandwidth = 2 * kCtaCopyBandwidth;
inline constexpr double kHbmBandwidth = 4.3e12;    // bytes read + written per second (KINDS.md D2D copy)
inline constexpr double kNvlinkBandwidth = 390e9;  // bytes/s into one GPU (DESIGN.md section 7: 370-415 GB/s)
inline constexpr double kCeChunkOverhead = 5e-6;  // fixed cost of one copy-engine copy (docs/PERF.md: ~5 us)
inline constexpr double kCeBandwidth = 2.0e12;     // copy engine, large chunks (docs/PERF.md: 2041 GB/s)
inline constexpr double kNotifyLatency = 0.86e-6;  // one-way notify -> wait (docs/PERF.md: 0.74-0.88 us)

}  // namespace tilelink::h200
