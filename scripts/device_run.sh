#!/usr/bin/env bash
# One call on the GPU machine: build, GPU + CPU tests, benchmarks. Logs go to $OUT (the device
# tool brings back at most 8 files). Usage: scripts/device_run.sh [tests|bench|ops|ops_rs|moe|layer|attn|trace|swizzle|tune|tune_rs|tune_more|models|sweep|sweep_rs|sanitize|all, or several joined by commas] [extra gtest args]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-$root/device-out}
mode=${1:-all}
mkdir -p "$out"
export TILELINK_JOBS=${TILELINK_JOBS:-16}
build=$root/build-device

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv; git -C "$root" rev-parse --short HEAD; date -u; } >"$out/env.txt" 2>&1
"$root/scripts/install_deps.sh" >"$out/build.log" 2>&1
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >>"$out/build.log" 2>&1 &&
  cmake --build "$build" -j "$TILELINK_JOBS" >>"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build ok"

status=0
if [[ $mode == *tests* || $mode == all ]]; then
  "$build/tests/tilelink_cpu_tests" --gtest_brief=1 >"$out/cpu_tests.log" 2>&1 || status=1
  tail -3 "$out/cpu_tests.log"
  timeout 420 "$build/tests/tilelink_gpu_tests" "${@:2}" >"$out/gpu_tests.log" 2>&1 || { rc=$?; status=1; echo "gpu tests: exit $rc"; }
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests? from .* ran|device (still busy|error)" "$out/gpu_tests.log" | tail -30
  # Every tilelink command once, small problems (the command line itself; ops are the suite's).
  "$root/tests/cli/gpu_smoke.sh" "$build/tilelink" "$out/cli_smoke.log" || status=1
  echo "cli smoke: $(grep -c . "$out/cli_smoke.log") lines of output, status $status"
fi
if [[ $mode == *bench* || $mode == all ]]; then
  { timeout 120 "$build/tilelink" bench primitives --json "$out/bench_primitives.json" &&
    "$build/tilelink" bench all_gather --world 8 &&
    "$build/tilelink" bench reduce_scatter --world 8 --json "$out/bench_collectives.json"; } >"$out/bench.log" 2>&1 || status=1
  tail -80 "$out/bench.log"
fi
if [[ $mode == *ops* || $mode == all ]]; then
  # The overlapped ops on the issues' shapes: world 1 (kernel vs cuBLAS) and world 8 (virtual ranks).
  # ops_rs: GEMM+RS and the MLP only.
  tl="$build/tilelink"
  {
    if [[ $mode != *ops_rs* ]]; then
      timeout 200 "$tl" bench ag_gemm --world 1 --shapes paper --json "$out/bench_ag_gemm_w1.json" &&
        timeout 200 "$tl" bench ag_gemm --world 8 --shapes paper --json "$out/bench_ag_gemm_w8.json"
    fi &&
      timeout 200 "$tl" bench gemm_rs --world 1 --shapes paper --json "$out/bench_gemm_rs_w1.json" &&
      timeout 200 "$tl" bench gemm_rs --world 8 --shapes paper --json "$out/bench_gemm_rs_w8.json" &&
      timeout 200 "$tl" bench gemm_rs --world 8 --shapes paper --scatter push --json "$out/bench_gemm_rs_w8_push.json" &&
      timeout 200 "$tl" bench gemm_rs --world 8 --shapes paper --scatter ce --granularity row --json "$out/bench_gemm_rs_w8_ce.json" &&
      timeout 200 "$tl" bench mlp --world 1 --model llama3-70b --json "$out/bench_mlp_w1.json" &&
      timeout 200 "$tl" bench mlp --world 8 --model llama3-70b --json "$out/bench_mlp_w8.json" &&
      timeout 200 "$tl" bench mlp --world 8 --model llama3-70b --activation gelu --json "$out/bench_mlp_w8_gelu.json"
  } >"$out/bench_ops.log" 2>&1 || status=1
  grep -E "^(==|tilelink|non-over|cuBLAS|ideal|fused|note: config|tilelink bench)" "$out/bench_ops.log" | tail -90
fi
if [[ $mode == *moe* || $mode == all ]]; then
  # MoE part 1 on the DESIGN.md section 8 models, 8192 tokens: world 1 (grouped GEMM vs cuBLAS) and world 8.
  # MOE_MODELS narrows the list.
  {
    for model in ${MOE_MODELS:-mixtral-8x7b mixtral-8x22b qwen1.5-moe deepseek-moe}; do
      for world in 1 8; do
        timeout 200 "$build/tilelink" bench moe_ag --world $world --model $model --json "$out/bench_moe_ag_${model}_w$world.json" || exit 1
      done
    done
  } >"$out/bench_moe.log" 2>&1 || status=1
  grep -E "^(==|tilelink|non-over|cuBLAS|ideal|gather|all-gather|note: config|error)" "$out/bench_moe.log" | tail -90
fi
if [[ $mode == *layer* || $mode == all ]]; then
  # The whole MoE layer (bench moe) on the DESIGN.md section 8 models, 8192 tokens, world 8 then 1.
  # MOE_MODELS narrows the list, LAYER_WORLDS the worlds.
  {
    for model in ${MOE_MODELS:-mixtral-8x7b mixtral-8x22b qwen1.5-moe deepseek-moe}; do
      for world in ${LAYER_WORLDS:-8 1}; do
        timeout 200 "$build/tilelink" bench moe --world $world --model $model || exit 1
      done
    done
  } >"$out/bench_layer.log" 2>&1 || status=1
  grep -E "^(==|tilelink fused|non-over|  part|part 1 cuBLAS|part 2 cuBLAS|ideal|error)" "$out/bench_layer.log" | cut -c1-110 | tail -80
fi
if [[ $mode == *trace* ]]; then
  # tilelink trace ag_gemm at world 8 (copy-engine and SM all-gather), gemm_rs (pull, push, ce),
  # mlp and moe: timelines, recording overhead, the ordering checks; then bench ag_gemm at world 1
  # (tracing compiled in, off).
  tl="$build/tilelink"
  { timeout 120 "$tl" trace ag_gemm --world 8 --trace "$out/trace_ag_gemm_w8.json" --svg "$out/trace_ag_gemm_w8.svg" &&
      timeout 120 "$tl" trace ag_gemm --world 8 --resource sm --m 4096 --trace "$out/trace_ag_gemm_w8_sm.json" &&
      timeout 120 "$tl" trace gemm_rs --world 8 --trace "$out/trace_gemm_rs_w8.json" --svg "$out/trace_gemm_rs_w8.svg" &&
      timeout 120 "$tl" trace gemm_rs --world 8 --scatter push &&
      timeout 120 "$tl" trace gemm_rs --world 8 --scatter ce --granularity row &&
      timeout 120 "$tl" trace mlp --world 8 --model llama3-70b --trace "$out/trace_mlp_w8.json" &&
      timeout 120 "$tl" trace moe --world 8 --model mixtral-8x7b --trace "$out/trace_moe_w8.json" &&
      timeout 120 "$tl" bench ag_gemm --world 1 --shapes paper; } >"$out/trace.log" 2>&1 || status=1
  grep -E "^(tilelink|\(m, n|m [0-9]|tokens|part 1|records|call time|GEMM tiles|fc1|\(reduced|wrote|cuBLAS GEMM|tilelink fused|==|error)" "$out/trace.log" | cut -c1-150 | tail -60
fi
if [[ $mode == *swizzle* ]]; then
  # The grouped GEMM's rasterization at world 8 virtual: swizzle 1 (default) against bands of tile
  # rows that reuse each expert's B in L2 (MoE part 1 alone, Mixtral-8x7B and Qwen1.5-MoE).
  {
    for model in mixtral-8x7b qwen1.5-moe; do
      for swz in 1 2 4 8; do
        timeout 100 "$build/tilelink" bench moe_ag --world 8 --model $model --swizzle $swz --warmup 2 --iters 5 || exit 1
      done
    done
  } >"$out/swizzle.log" 2>&1 || status=1
  grep -E "^(==|tilelink fused|tilelink grouped|cuBLAS per-expert|non-over|error)" "$out/swizzle.log" | cut -c1-100 | tail -60
fi
if [[ $mode == *tune_more* ]]; then
  # tune moe (Mixtral-8x7B, Qwen1.5-MoE) and tune sp_attention (32k tokens, zig-zag causal) at world
  # 8 into a fresh cache, then bench moe and bench sp_attention, which pick the tuned
  # configurations up from it. TUNE_MOE_MODELS narrows the models.
  export TILELINK_TUNE_CACHE="$out/tune_more.json"
  rm -f "$TILELINK_TUNE_CACHE"
  (
    for model in ${TUNE_MOE_MODELS:-mixtral-8x7b qwen1.5-moe}; do
      timeout 200 "$build/tilelink" tune moe --world 8 --model $model || exit 1
      timeout 120 "$build/tilelink" bench moe --world 8 --model $model --warmup 2 --iters 5 || exit 1
    done
    timeout 200 "$build/tilelink" tune sp_attention --world 8 --seq 32768 --layout zigzag || exit 1
    timeout 120 "$build/tilelink" bench sp_attention --world 8 --seq 32768 --layout zigzag --iters 5 || exit 1
  ) >"$out/tune_more.log" 2>&1 || status=1
  grep -E "^(\[|==|automatic|tuned|tilelink fused|non-over|note: config|note: stored|tilelink|error)" "$out/tune_more.log" | cut -c1-260 | tail -120
  unset TILELINK_TUNE_CACHE
elif [[ $mode == *tune* ]]; then
  # tune AG+GEMM and GEMM+RS (tune_rs: GEMM+RS only) on the paper's shapes and the LLaMA-3-70B MLP
  # at world 8 into a fresh cache, then bench ag_gemm, gemm_rs and mlp, which pick the tuned
  # configurations up from it.
  export TILELINK_TUNE_CACHE="$out/tune.json"
  rm -f "$TILELINK_TUNE_CACHE"
  { if [[ $mode != *tune_rs* ]]; then
      timeout 300 "$build/tilelink" tune ag_gemm --world 8 --shapes paper &&
        timeout 200 "$build/tilelink" bench ag_gemm --world 8 --shapes paper
    fi &&
      timeout 300 "$build/tilelink" tune gemm_rs --world 8 --shapes paper &&
      timeout 200 "$build/tilelink" bench gemm_rs --world 8 --shapes paper &&
      timeout 300 "$build/tilelink" tune mlp --world 8 --model llama3-70b &&
      timeout 200 "$build/tilelink" bench mlp --world 8 --model llama3-70b; } >"$out/tune.log" 2>&1 || status=1
  grep -E "^(\[|==|automatic|tuned|tilelink fused|cuBLAS|non-over|note: config|note: stored|tilelink)" "$out/tune.log" | tail -120
  unset TILELINK_TUNE_CACHE
fi
if [[ $mode == *models* ]]; then
  # bench --sweep: DESIGN.md section 8's model shapes at world 8, charts in $OUT.
  { timeout 280 "$build/tilelink" bench ag_gemm --world 8 --sweep --warmup 2 --iters 5 --svg "$out/sweep_ag_gemm_w8.svg" &&
      timeout 280 "$build/tilelink" bench gemm_rs --world 8 --sweep --warmup 2 --iters 5 --svg "$out/sweep_gemm_rs_w8.svg"; } >"$out/models.log" 2>&1 || status=1
  grep -E "^(==|tilelink fused|cuBLAS GEMM|non-over|ideal|wrote|error|tilelink)" "$out/models.log" | tail -80
fi
if [[ $mode == *sweep_rs* ]]; then
  "$root/scripts/gemm_rs_sweep.sh" "$build" "$out"
  grep -E "^(###|tilelink fused|fused GEMM|non-over|cuBLAS|note: config)" "$out/sweep_gemm_rs.log" | tail -200
elif [[ $mode == *sweep* ]]; then
  "$root/scripts/ag_gemm_sweep.sh" "$build" "$out"
  grep -E "^(###|==|tilelink|non-over|cuBLAS|ideal)" "$out/sweep_ag_gemm.log" | tail -150
fi
if [[ $mode == *attn* || $mode == all ]]; then
  # SP attention (issue 7): world 1 against SDPA's shapes, world 8 fused vs non-overlapped vs ring,
  # the dumped outputs against SDPA on the device, SDPA's own times. ATTN_SEQS narrows world 1.
  tl="$build/tilelink"
  {
    for seq in ${ATTN_SEQS:-8192 32768 131072}; do
      for causal in "" --non-causal; do
        timeout 120 "$tl" bench sp_attention --world 1 --seq $seq $causal --iters 5 || exit 1
      done
    done
    for causal in "" --non-causal; do
      timeout 120 "$tl" bench sp_attention --world 8 --seq 32768 $causal --iters 5 || exit 1
    done
    timeout 120 "$tl" bench sp_attention --world 8 --seq 32768 --layout zigzag --iters 5 || exit 1
    timeout 120 "$tl" bench sp_attention --world 8 --seq 32768 --resource sm --iters 5 || exit 1
    # The local pass first against one pass, zig-zag causal at 8k and 32k tokens.
    for seq in 8192 32768; do
      timeout 120 "$tl" bench sp_attention --world 8 --seq $seq --layout zigzag --local-first --iters 5 || exit 1
    done
  } >"$out/bench_attn.log" 2>&1 || status=1
  grep -E "^(==|SP attention|attention alone|all-gather|ideal|non-over|ring|tilelink fused|note: config|error|tilelink:)" \
    "$out/bench_attn.log" | cut -c1-120 | tail -70
  dump=$(mktemp -d)
  { timeout 60 "$tl" bench sp_attention --world 4 --seq 4000 --q-heads 8 --kv-heads 2 --layout zigzag --iters 1 --warmup 0 --dump "$dump" &&
      timeout 120 python3 "$root/bench/sdpa_check.py" check "$dump" &&
      timeout 200 python3 "$root/bench/sdpa_check.py" time; } >"$out/sdpa.log" 2>&1 || status=1
  grep -vE "^(==|\|)" "$out/sdpa.log" | tail -40
fi
if [[ $mode == *sanitize* || $mode == all ]]; then
  # compute-sanitizer on small cases: memcheck, racecheck (shared memory), synccheck.
  small='Primitives/DataTest.*world2*:Primitives/SignalTest.*world2*:Collectives/AllGatherTest.*world2*'
  for tool in memcheck racecheck synccheck; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/tilelink_gpu_tests" \
      --gtest_filter="$small" --gtest_brief=1 >>"$out/sanitizer.log" 2>&1
    echo "compute-sanitizer $tool: exit $?" | tee -a "$out/sanitizer.log"
  done
fi
# The test verdict again at the end (the device tool returns only the output's tail).
if [[ -f "$out/gpu_tests.log" ]]; then grep -E "^\[  (FAILED|PASSED) |tests? from .* ran" "$out/gpu_tests.log" | tail -12; fi
exit $status
