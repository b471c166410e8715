#!/usr/bin/env bash
# Issue 8 in one device call, on a machine with 2 or more GPUs: build; the GPU test suite with one
# rank per GPU; tilelink bench at world = the GPU count, one rank per GPU (ag_gemm and gemm_rs
# --sweep, with the plan model's prediction for every swept shape beside the measurement
# (bench/predicted_vs_measured.py), both places of gemm_rs's sums (--reducer) on the paper shapes
# beside plan gemm_rs, mlp llama3-70b, moe_ag and moe mixtral-8x7b with both of part 2's combines
# beside plan moe), whose
# non-overlapped baselines use NCCL;
# and beside them PyTorch's side on the same shapes (bench/torch_baselines.py: NCCL all-gather /
# reduce-scatter bus bandwidth, cuBLAS, async-TP's fused ops); bench all_reduce; the process-world
# suite with one process per GPU (tilelink launch, and torchrun --no-python); and TileLink's PyTorch
# operators under torchrun, one process per GPU (python/tests/mp_worker.py against torch,
# bench/torch_ops.py, and the LLaMA MLP example against NCCL + matmul and async-TP). Key lines go
# to stdout and
# $OUT/summary.txt; every log, JSON and chart into $OUT/multi_gpu_results.tar.gz (the device
# tool brings back at most 8 files).
#
# Usage: scripts/multi_gpu_run.sh [all | tests,bench,torch,python (any of them, joined by commas)]
#   GPUS=N        ranks = the first N GPUs (default: every GPU visible)
#   BUDGET_S=S    seconds for the whole run (default 570: the device tool stops a command at 600);
#                 each step's timeout is cut to what is left, and a step with no time left is
#                 skipped and counted as a failure (rerun that step alone on the warm machine:
#                 build-device is kept, so the build is then a no-op)
#   GTEST_FILTER  narrows the GPU tests
# Exit status: 0 every step passed, 1 a step failed or was skipped, 2 fewer than 2 GPUs.
set -uo pipefail

# NVLink multicast stays off in NCCL, PyTorch and NVSHMEM: a program that creates multicast
# objects can take a shared host's GPUs out of service. Nothing here calls cuMulticastCreate.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-all}
out=${OUT:-$root/device-out}
build=$root/build-device
start=$SECONDS
deadline=$((start + ${BUDGET_S:-570}))

gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then gpus=$(awk -F, '{print NF}' <<<"$CUDA_VISIBLE_DEVICES"); fi
world=${GPUS:-$gpus}
if ((gpus < 2)); then
  echo "multi_gpu_run: needs at least 2 GPUs (one rank per GPU); this machine shows $gpus." \
    "On one GPU use scripts/device_run.sh (virtual ranks)." >&2
  exit 2
fi
if ((world < 2 || world > gpus)); then
  echo "multi_gpu_run: GPUS=$world: expected 2 to $gpus" >&2
  exit 2
fi
for step in ${mode//,/ }; do
  [[ $step =~ ^(all|tests|bench|torch|python)$ ]] || { echo "multi_gpu_run: unknown step '$step' (all, tests, bench, torch, python)" >&2; exit 64; }
done
wants() { [[ $mode == all || ,$mode, == *,$1,* ]]; }

mkdir -p "$out"
logs=$(mktemp -d "${TMPDIR:-/tmp}/tilelink-multi-gpu.XXXXXX")/multi_gpu_results
mkdir -p "$logs"
summary=$out/summary.txt
: >"$summary"
say() { echo "$@" | tee -a "$summary"; }
# Key lines of a log, on stdout and in the summary.
show() { grep -E "$2" "$1" | cut -c1-160 | tail -"${3:-60}" | tee -a "$summary"; }

status=0
verdicts=()
# run_step NAME CAP LOG COMMAND...: COMMAND with its output in LOG, stopped after CAP seconds or
# at the budget's end (20 s kept for packing up), whichever is first.
run_step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local left=$((deadline - SECONDS - 20))
  if ((left < 30)); then
    verdicts+=("$name: SKIPPED (no time left in BUDGET_S)")
    status=1
    return 1
  fi
  local limit=$((cap < left ? cap : left)) t0=$SECONDS rc
  timeout --kill-after=15 "$limit" "$@" >"$log" 2>&1
  rc=$?
  if ((rc == 0)); then
    verdicts+=("$name: ok ($((SECONDS - t0)) s)")
  elif ((rc == 124 || rc == 137)); then
    verdicts+=("$name: TIMED OUT after $limit s")
    status=1
  else
    verdicts+=("$name: FAILED (exit $rc, $((SECONDS - t0)) s)")
    status=1
  fi
  return "$rc"
}

finish() {
  say ""
  say "== multi_gpu_run: $world ranks on $world GPUs, $((SECONDS - start)) s =="
  for v in "${verdicts[@]}"; do say "  $v"; done
  tar -czf "$out/multi_gpu_results.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" &&
    say "logs, JSON and charts: $out/multi_gpu_results.tar.gz"
  exit "$status"
}

{
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  nvidia-smi topo -m
  git -C "$root" rev-parse --short HEAD
  date -u
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
  env | grep -E "^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|CUDA_VISIBLE_DEVICES)="
} >"$logs/env.txt" 2>&1
say "== multi_gpu_run $mode: $world ranks on $world of $gpus GPUs, commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null), $(date -u +%FT%TZ) =="
show "$logs/env.txt" "^(GPU|[0-9]+, |torch)" 30

if wants tests || wants bench || wants python; then
  # The PyTorch operators too, where python3 has torch.
  python3 -c "import torch" >/dev/null 2>&1 && py=ON || py=OFF
  targets="tilelink_cli tilelink_gpu_tests tilelink_process_tests"
  [[ $py == ON ]] && targets+=" tilelink_torch tilelink_torchrun"
  # shellcheck disable=SC2016  # the inner script expands its own arguments
  run_step build 420 "$logs/build.log" bash -c \
    '"$0/scripts/install_deps.sh" && cmake -S "$0" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILELINK_BUILD_PYTHON=$3 &&
     cmake --build "$1" -j "$2" --target $4' \
    "$root" "$build" "${TILELINK_JOBS:-$(nproc)}" "$py" "$targets"
  show "$logs/build.log" "NCCL [0-9.]+:|NCCL not found" 2
  if [[ ${verdicts[-1]} != "build: ok"* ]]; then
    tail -40 "$logs/build.log"
    finish
  fi
fi

export TILELINK_RANKS=gpus
tl=$build/tilelink
if wants tests; then
  run_step gpu_tests 180 "$logs/gpu_tests.log" "$build/tests/tilelink_gpu_tests" --gtest_brief=1 \
    ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"}
  show "$logs/gpu_tests.log" "^\[  (FAILED|PASSED|SKIPPED) |tests? from .* ran|TILELINK_RANKS|device (still busy|error)" 40
  # The process-world suite, one process per GPU.
  run_step process_tests 120 "$logs/process_tests.log" "$tl" launch --nproc "$world" --grace 20 -- \
    "$build/tests/tilelink_process_tests" --gtest_brief=1
  show "$logs/process_tests.log" "^\[  (FAILED|PASSED|SKIPPED) |tilelink launch:" 40
  # The same suite started by torchrun itself: the unique id over torchrun's store (needs the plugin).
  if [[ $py == ON ]]; then
    run_step process_tests_torchrun 150 "$logs/process_tests_torchrun.log" python3 -m torch.distributed.run \
      --standalone --nproc-per-node "$world" --no-python "$build/tests/tilelink_process_tests" --gtest_brief=1
    show "$logs/process_tests_torchrun.log" "^\[  (FAILED|PASSED|SKIPPED) " 40
  fi
  # The notify -> wait round trip between two processes on two GPUs, next to one process driving both.
  run_step signal_processes 90 "$logs/signal_processes.log" "$tl" launch --nproc 2 --grace 20 -- \
    env TILELINK_RANKS=processes "$tl" bench primitives --world 2 --quick
  show "$logs/signal_processes.log" "^(peer_tile|producer_tile|tilelink)" 10
  run_step signal_one_process 90 "$logs/signal_one_process.log" "$tl" bench primitives --world 2 --quick
  show "$logs/signal_one_process.log" "^(peer_tile|producer_tile)" 10
fi

bench_lines="^(==|cuBLAS GEMM|all-gather alone|reduce-scatter alone|ideal|non-overlapped|decomposed|tilelink fused|note: (config|communication)|tilelink:|wrote)"
if wants bench; then
  run_step bench_ag_gemm 150 "$logs/bench_ag_gemm.log" "$tl" bench ag_gemm --world "$world" --sweep \
    --svg "$logs/sweep_ag_gemm.svg" --json "$logs/bench_ag_gemm_sweep.json"
  show "$logs/bench_ag_gemm.log" "$bench_lines" 80
  run_step bench_gemm_rs 150 "$logs/bench_gemm_rs.log" "$tl" bench gemm_rs --world "$world" --sweep \
    --svg "$logs/sweep_gemm_rs.svg" --json "$logs/bench_gemm_rs_sweep.json"
  show "$logs/bench_gemm_rs.log" "$bench_lines" 80
  # The plan model's prediction for each measured shape, beside the measurement (issue 25).
  run_step predicted_vs_measured 60 "$logs/predicted_vs_measured.log" python3 "$root/bench/predicted_vs_measured.py" \
    --tilelink "$tl" "$logs/bench_ag_gemm_sweep.json" "$logs/bench_gemm_rs_sweep.json"
  show "$logs/predicted_vs_measured.log" "." 80
  # Where GEMM+RS's sums run (issue 25): reduction CTAs beside the GEMM, or the GEMM's own CTAs
  # after each own tile (--reducer epilogue), measured on the paper's shapes, each beside the plan
  # model's prediction of both (plan: predicted, not measured). One process driving every GPU has
  # no affine heap, so both pull here; the automatic path of one process per GPU (push + epilogue,
  # gemm_rs_policy::path) is what torch_ops_bench below times through torch.ops.tilelink.gemm_rs.
  # shellcheck disable=SC2016  # the inner script expands its own arguments
  run_step gemm_rs_reducers 200 "$logs/gemm_rs_reducers.log" bash -c \
    'tl=$0 world=$1 logs=$2 root=$3
     for s in "8192 8192 28672" "8192 4096 14336" "8192 12288 49152"; do
       read -r m n k <<<"$s"
       "$tl" plan gemm_rs --world "$world" --m "$m" --n "$n" --k "$k" || exit 1
     done
     for r in blocks epilogue; do
       "$tl" bench gemm_rs --world "$world" --shapes paper --reducer "$r" --json "$logs/bench_gemm_rs_$r.json" || exit 1
     done
     python3 "$root/bench/predicted_vs_measured.py" --tilelink "$tl" \
       "$logs/bench_gemm_rs_blocks.json" "$logs/bench_gemm_rs_epilogue.json"' "$tl" "$world" "$logs" "$root"
  show "$logs/gemm_rs_reducers.log" "$bench_lines|^fused|^world=|^gemm_rs " 90
  # The all-reduce at decode sizes over NVLink (issue 21): one-shot and two-shot, 8 and 512 tokens.
  # shellcheck disable=SC2016  # the inner script expands its own arguments
  run_step bench_all_reduce 60 "$logs/bench_all_reduce.log" bash -c \
    '"$0" bench all_reduce --world "$1" --rows 8 --cols 8192 && "$0" bench all_reduce --world "$1" --rows 512 --cols 8192' \
    "$tl" "$world"
  show "$logs/bench_all_reduce.log" "^(==|tilelink|cudaMemcpy)" 20
  # GEMM + all-reduce at decode's token counts (issue 21): the op against cuBLAS + its all-reduce,
  # with the estimate the op chose by beside it (plan gemm_ar: predicted, not measured).
  # shellcheck disable=SC2016  # the inner script expands its own arguments
  run_step bench_gemm_ar 120 "$logs/bench_gemm_ar.log" bash -c \
    '"$0" plan gemm_ar --world "$1" --model llama3-70b --proj down --m 1,8,32,128,512 &&
     "$0" bench gemm_ar --world "$1" --model llama3-70b --proj down --m 1,8,32,128,512 --iters 200 --warmup 20 \
       --json "$2/bench_gemm_ar.json"' "$tl" "$world" "$logs"
  show "$logs/bench_gemm_ar.log" "^( *[0-9]+ |==|cuBLAS|all-reduce|chain|tilelink|the auto|note: auto)" 80
fi
if wants torch; then
  run_step torch_baselines 200 "$logs/torch_baselines.log" python3 -m torch.distributed.run --standalone \
    --nproc-per-node "$world" "$root/bench/torch_baselines.py" --json "$logs/torch_baselines.json"
  sed -n '/^PyTorch baselines/,$p' "$logs/torch_baselines.log" | cut -c1-200 | tee -a "$summary"
  show "$logs/torch_baselines.log" "torch_baselines:|Error|error" 10
fi
if wants python; then
  export TILELINK_TORCH_LIBRARY=$build/python/_tilelink_torch.so PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
  torchrun=(python3 -m torch.distributed.run --standalone --nproc-per-node "$world")
  run_step torch_ops_check 120 "$logs/torch_ops_check.log" "${torchrun[@]}" "$root/python/tests/mp_worker.py"
  show "$logs/torch_ops_check.log" "match torch|Error" 20
  # shellcheck disable=SC2016  # the inner script expands its own arguments
  run_step cpp_ops_paper 150 "$logs/cpp_ops_paper.log" bash -c \
    '"$0" bench ag_gemm --world "$1" --shapes paper --json "$2/cpp_ag_gemm_paper.json" &&
     "$0" bench gemm_rs --world "$1" --shapes paper --json "$2/cpp_gemm_rs_paper.json"' "$tl" "$world" "$logs"
  run_step torch_ops_bench 150 "$logs/torch_ops_bench.log" "${torchrun[@]}" "$root/bench/torch_ops.py" \
    --cpp-json "$logs/cpp_ag_gemm_paper.json" "$logs/cpp_gemm_rs_paper.json"
  show "$logs/torch_ops_bench.log" "^(world|op |ag_gemm|gemm_rs)|Error" 20
  run_step example_mlp 120 "$logs/example_mlp.log" "${torchrun[@]}" "$root/examples/llama_mlp_tp.py" --model llama3-70b
  show "$logs/example_mlp.log" "MLP|  (tilelink|nccl|async-tp)|Error" 20
fi
if wants bench; then
  run_step bench_mlp 90 "$logs/bench_mlp.log" "$tl" bench mlp --world "$world" --model llama3-70b \
    --json "$logs/bench_mlp_llama3-70b.json"
  show "$logs/bench_mlp.log" "$bench_lines|^(fc1|fc2|cuBLAS chain|reduce-scatter)" 30
  run_step bench_moe_ag 90 "$logs/bench_moe_ag.log" "$tl" bench moe_ag --world "$world" --model mixtral-8x7b \
    --json "$logs/bench_moe_ag_mixtral-8x7b.json"
  show "$logs/bench_moe_ag.log" "$bench_lines|^cuBLAS per-expert" 30
  # The MoE layer (issue 25): bench moe times part 2's combine both ways (blocks beside the GEMM,
  # in its epilogue); plan moe's prediction of both beside it (predicted, not measured).
  run_step bench_moe 90 "$logs/bench_moe.log" "$tl" bench moe --world "$world" --model mixtral-8x7b \
    --json "$logs/bench_moe_mixtral-8x7b.json"
  show "$logs/bench_moe.log" "$bench_lines|^  part" 30
  run_step plan_moe 30 "$logs/plan_moe.log" "$tl" plan moe --world "$world" --model mixtral-8x7b
  show "$logs/plan_moe.log" "^(world=|non-overlapped|fused|ideal)" 10
fi
finish
