#!/usr/bin/env bash
# The AG+GEMM design space on one GPU (virtual ranks): each knob of AgGemmConfig varied alone,
# on the paper's shapes: the runs behind docs/ag_gemm.md. The world-8 runs give the GEMM every SM
# the all-gather leaves (--gemm-sms 16 - blocks), as when the table was measured; the "slack"
# runs compare that with the 2 SMs of slack the op keeps by default now.
# Usage: scripts/ag_gemm_sweep.sh BUILD_DIR OUT_DIR
set -uo pipefail
tool=$1/tilelink
out=$2
t="--warmup 3 --iters 10"
run() { echo "### $*"; timeout 120 "$tool" bench ag_gemm $t "$@" | grep -E "^(==|cuBLAS|all-gather|ideal|non-over|decomposed|tilelink|fused|note: config)"; }
{
  for kernel in 128x256x64_c2x1 256x128x64_c1x2; do
    for swizzle in 0 1; do run --world 1 --shapes paper --kernel $kernel --swizzle $swizzle; done
  done
  for shape in "--m 8192 --n 14336 --k 4096" "--m 8192 --n 28672 --k 8192"; do
    for rows in 128 256 1024; do run --world 8 $shape --resource ce --comm-rows $rows --gemm-sms 16 --swizzle 4; done
    for blocks in 1 2 4; do run --world 8 $shape --resource sm --blocks $blocks --gemm-sms $((16 - blocks)) --swizzle 4; done
    sm2="--world 8 $shape --resource sm --blocks 2 --gemm-sms 14"
    run $sm2 --swizzle 4 --path bulk
    run $sm2 --swizzle 4 --order ring
    run $sm2 --swizzle 4 --method push
    run $sm2 --swizzle 4 --comm-rows 512
    run $sm2 --swizzle 1
    run $sm2 --swizzle 4 --kernel 256x128x64_c1x2
  done
  # SM slack and clusters (shape 8192 x 14336 x 4096).
  s="--world 8 --m 8192 --n 14336 --k 4096"
  run $s --resource sm --blocks 2 --gemm-sms 14 --swizzle 4
  run $s --resource sm --blocks 2 --gemm-sms 12 --swizzle 4
  run $s --resource sm --blocks 2 --gemm-sms 14 --swizzle 8 --kernel 128x256x64_c1x1
  run $s --resource ce --comm-rows 1024 --gemm-sms 16 --swizzle 8 --kernel 128x256x64_c1x1
  run $s --resource ce --comm-rows 1024 --gemm-sms 12 --swizzle 4
} >"$out/sweep_ag_gemm.log" 2>&1
