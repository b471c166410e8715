#!/usr/bin/env bash
# The AG+GEMM design space on one GPU (virtual ranks): each knob of AgGemmConfig varied alone
# from the default, on the paper's shapes. Used for docs/ag_gemm-knobs.md.
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
    for rows in 128 256 1024; do run --world 8 $shape --resource ce --comm-rows $rows; done
    for blocks in 1 2 4; do run --world 8 $shape --resource sm --blocks $blocks; done
    run --world 8 $shape --resource sm --blocks 2 --path bulk
    run --world 8 $shape --resource sm --blocks 2 --order ring
    run --world 8 $shape --resource sm --blocks 2 --method push
    run --world 8 $shape --resource sm --blocks 2 --comm-rows 512
    run --world 8 $shape --resource sm --blocks 2 --swizzle 1
    run --world 8 $shape --resource sm --blocks 2 --kernel 256x128x64_c1x2
  done
} >"$out/sweep_ag_gemm.log" 2>&1
