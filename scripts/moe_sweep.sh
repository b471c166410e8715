#!/usr/bin/env bash
# MoE part 1 knobs on the H200: kernel configuration, swizzle and gather CTAs, per model and
# world. Usage: scripts/moe_sweep.sh BUILD_DIR OUT_DIR. Writes OUT_DIR/sweep_moe.log.
set -uo pipefail
tl="$1/tilelink"
log="$2/sweep_moe.log"
: >"$log"
run() {
  echo "### $*" >>"$log"
  timeout 120 "$tl" bench moe_ag --warmup 2 --iters 5 "$@" >>"$log" 2>&1 || echo "exit $?" >>"$log"
}
for model in qwen1.5-moe deepseek-moe mixtral-8x7b; do
  run --world 1 --model "$model" --kernel 128x128x64_c1x2
  run --world 1 --model "$model" --swizzle 1
done
run --world 1 --model qwen1.5-moe --kernel 128x128x64_c1x2 --gather-blocks 8
run --world 8 --model mixtral-8x7b --gather-blocks 1
run --world 8 --model mixtral-8x7b --gather-blocks 4
run --world 8 --model mixtral-8x7b --kernel 128x128x64_c1x2
run --world 8 --model qwen1.5-moe --kernel 128x128x64_c1x2
