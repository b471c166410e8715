#!/usr/bin/env bash
# GEMM+RS knob sweep on the GPU machine (the measurements behind docs/gemm_rs.md).
# Usage: scripts/gemm_rs_sweep.sh BUILD_DIR OUT_DIR
set -uo pipefail
build=$1
out=$2
log=$out/sweep_gemm_rs.log
: >"$log"
run() {
  echo "### $*" >>"$log"
  timeout 120 "$build/tilelink" bench gemm_rs --warmup 3 --iters 10 "$@" >>"$log" 2>&1 || echo "exit $?" >>"$log"
}
shape="--m 8192 --n 8192 --k 28672"
# Reduction CTAs (whole 2-CTA clusters) at world 1 and 8, pull form, automatic swizzle.
for rb in 2 4 8; do run --world 1 $shape --reduce-blocks $rb; done
for rb in 2 4; do run --world 8 $shape --reduce-blocks $rb; done
# GEMM SMs per rank at world 8 (the default leaves 2 of the 16 free).
for sms in 13 14; do run --world 8 $shape --gemm-sms $sms; done
# Swizzle at world 8 (automatic: 1, four bands per owner block).
run --world 8 $shape --swizzle 4
# Scatter variant x granularity at world 8.
for g in tile row rank; do run --world 8 $shape --scatter push --granularity $g; done
for g in row rank; do run --world 8 $shape --scatter ce --granularity $g; done
for g in row rank; do run --world 8 $shape --scatter pull --granularity $g; done
