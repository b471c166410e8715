#!/usr/bin/env bash
# The `tilelink` command line, no GPU needed (ctest cli_commands): every GPU command with its knobs
# parses and reaches the GPU check, which (CUDA_VISIBLE_DEVICES hides the GPUs) exits 2 with a
# plain message; the commands that need no GPU (plan, tune --dry-run) exit 0; bad input exits 64
# naming it. Usage: tests/cli/commands.sh path/to/tilelink
set -u
tl=${1:?usage: commands.sh path/to/tilelink}
failed=0
expect() {  # expect RC "what the output must contain" args...
  local want=$1 text=$2
  shift 2
  local out rc
  out=$(CUDA_VISIBLE_DEVICES= "$tl" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want || $out != *"$text"* ]]; then
    echo "FAIL: tilelink $* -> exit $rc (expected $want, output containing '$text'):"
    echo "$out" | tail -5
    failed=1
  fi
}
no_gpu() { expect 2 "no CUDA GPU" "$@"; }

# Every GPU command, bare and with each knob the tune cache must respect.
no_gpu info
# launch needs no GPU itself: it starts the ranks and returns the first failing exit status.
expect 0 "rank=1/3 local=1" launch --nproc 3 -- /bin/bash -c 'echo rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK; [[ ${#TILELINK_UNIQUE_ID} == 256 ]]'
expect 3 "rank 2 exited with 3" launch --nproc 3 --grace 0 -- /bin/bash -c '[[ $RANK != 2 ]] || exit 3'
expect 64 "command" launch --nproc 2
# SIGTERM to the launcher (and, from `timeout`, to its process group) ends it with 128 + 15 and
# leaves no rank running.
out=$(timeout --preserve-status -s TERM 2 "$tl" launch --nproc 2 -- sleep 31 2>&1)
rc=$?
if [[ $rc -ne 143 ]] || pgrep -f "^sleep 31$" >/dev/null; then
  echo "FAIL: SIGTERM to 'tilelink launch' -> exit $rc (expected 143, ranks stopped): $out"
  failed=1
fi
# The ranks get the user's environment: the tool sets CUDA_DEVICE_MAX_CONNECTIONS only for its own
# GPU commands (it once set 32 first thing, and launch's MPS ranks inherited it and failed to make
# their contexts). With --mps: a private daemon (here a stand-in on PATH that makes the control
# socket and quits when asked), each rank 100/N % of the SMs and 3 queues unless the user set them,
# and the daemon's folder gone afterwards.
out=$(env -u CUDA_DEVICE_MAX_CONNECTIONS CUDA_VISIBLE_DEVICES= "$tl" launch --nproc 2 -- /bin/bash -c 'echo queues=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}' 2>&1)
if [[ $(grep -c '^queues=unset$' <<<"$out") != 2 ]]; then
  echo "FAIL: launch without --mps changed the ranks' CUDA_DEVICE_MAX_CONNECTIONS: $out"
  failed=1
fi
fake=$(mktemp -d)
cat >"$fake/nvidia-cuda-mps-control" <<'MPS'
#!/bin/bash
if [[ ${1:-} == -f ]]; then
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  while [[ -e $CUDA_MPS_PIPE_DIRECTORY/control ]]; do sleep 0.05; done
  exit 0
fi
read -r cmd && [[ $cmd == quit ]] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
MPS
chmod +x "$fake/nvidia-cuda-mps-control"
rank_env='echo "pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE queues=$CUDA_DEVICE_MAX_CONNECTIONS pipe=$CUDA_MPS_PIPE_DIRECTORY"'
out=$(env -u CUDA_DEVICE_MAX_CONNECTIONS -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE PATH="$fake:$PATH" CUDA_VISIBLE_DEVICES= \
      timeout 30 "$tl" launch --nproc 4 --mps -- /bin/bash -c "$rank_env" 2>&1)
rc=$?
pipe=$(sed -n 's/^pct=.* pipe=//p' <<<"$out" | head -1)
if [[ $rc -ne 0 || $(grep -c '^pct=25 queues=3 pipe=/' <<<"$out") != 4 || -z $pipe || -e $pipe ]]; then
  echo "FAIL: launch --mps -> exit $rc, expected 4 ranks with pct=25 queues=3 and the daemon's folder removed: $out"
  failed=1
fi
out=$(CUDA_DEVICE_MAX_CONNECTIONS=5 PATH="$fake:$PATH" CUDA_VISIBLE_DEVICES= timeout 30 "$tl" launch --nproc 2 --mps -- /bin/bash -c "$rank_env" 2>&1)
if [[ $(grep -c 'queues=5 ' <<<"$out") != 2 ]]; then
  echo "FAIL: launch --mps overrode the user's CUDA_DEVICE_MAX_CONNECTIONS=5: $out"
  failed=1
fi
rm -rf "$fake"
no_gpu bench primitives
no_gpu bench all_gather --world 2
no_gpu bench reduce_scatter --world 2
no_gpu bench all_reduce --world 3 --rows 7 --cols 96 --path bulk
no_gpu bench ag_gemm --world 2
no_gpu bench ag_gemm --shapes paper --explain
no_gpu bench ag_gemm --resource sm --method push --order ring --path bulk --comm-rows 256 --blocks 4 --gemm-sms 60 --swizzle 2 --kernel x
no_gpu bench gemm_rs --world 2
no_gpu bench gemm_rs --scatter ce --granularity row --reduce-blocks 4 --gemm-sms 60 --swizzle 2
no_gpu bench mlp --world 2 --model llama3-8b
no_gpu bench mlp --scatter push --granularity rank
no_gpu bench moe_ag --world 2 --model qwen1.5-moe --gather-blocks 2 --swizzle 2 --kernel 128x128x64_c1x2
no_gpu bench moe --world 2 --model deepseek-moe
no_gpu bench moe --gather-blocks 2 --gemm-sms 60 --swizzle 2 --kernel k --combine-rows 32 --weight-sweeps 2 --combine-blocks 4
no_gpu bench sp_attention --world 2
no_gpu bench sp_attention --resource sm --comm-rows 256 --blocks 4 --attention-sms 60 --local-first --section-heads 2
no_gpu tune ag_gemm --world 2
no_gpu tune gemm_rs --shapes paper
no_gpu tune mlp --model llama3-70b
no_gpu tune moe --model mixtral-8x7b
no_gpu tune sp_attention --layout zigzag
no_gpu trace ag_gemm --resource sm --comm-rows 256 --blocks 4 --kernel x
no_gpu trace gemm_rs --scatter push --granularity tile
no_gpu trace mlp --scatter ce --granularity row
no_gpu trace moe --combine-blocks 4 --combine-rows 32 --weight-sweeps 2
no_gpu trace sp_attention --local-first --section-heads 4

# No GPU needed.
expect 0 "predicted" plan ag_gemm --world 8
expect 0 "predicted" plan gemm_rs --world 8
# The engine auto takes (GemmRsConfig::engine): GEMM+AR's at decode's M, the owner-tile GEMM at prefill's.
expect 0 "op engine auto: small_m" plan gemm_rs --world 8 --m 64 --n 8192 --k 28672
expect 0 "op engine auto: owner_tiles" plan gemm_rs --world 8 --m 8192 --n 8192 --k 28672
expect 0 "fc2 engine auto: small_m" plan mlp --world 8 --model llama3-70b --m 64
expect 0 "predicted" plan mlp --world 8 --model llama3-70b
expect 0 "predicted" plan mlp --world 8 --model llama3-70b --reduce-blocks 8 --blocks 16 --resource sm
expect 0 "predicted" plan moe_ag --world 8 --model mixtral-8x7b
expect 0 "predicted" plan moe --world 8 --model qwen1.5-moe
# which row the op's automatic method runs: non-overlapped parts at world 1, fused with peers
expect 0 "part 2 runs non_overlapped" plan moe --world 1 --model mixtral-8x7b
expect 0 "part 1 runs fused" plan moe --world 8 --model qwen1.5-moe
expect 0 "micro-batches=2 (a design, not built)" plan moe --world 8 --model qwen1.5-moe --micro-batches 2
expect 1 "'micro_batches' = 2" plan moe --world 1 --model qwen1.5-moe --micro-batches 2
expect 0 "part 2 runs fused" plan moe --world 1 --model mixtral-8x7b --combine epilogue
expect 0 "the op runs non_overlapped" plan moe_ag --world 1 --model mixtral-8x7b
expect 0 "predicted" plan sp_attention --world 8 --layout zigzag
# Across nodes the world's transport is put_signal (auto): the plans take the paths that run there and
# refuse the others by name.
expect 0 "scatter=ce" plan gemm_rs --world 16 --nodes 2
expect 0 "signal per row" plan mlp --world 16 --nodes 2 --model llama3-70b
expect 1 "'scatter' = pull" plan gemm_rs --world 16 --nodes 2 --scatter pull
expect 1 "'resource' = sm" plan ag_gemm --world 16 --nodes 2 --resource sm --blocks 16
expect 1 "'combine' = epilogue" plan moe --world 16 --nodes 2 --combine epilogue
expect 0 "stage the peers' rows" plan moe --world 16 --nodes 2
expect 0 "copy-engine path" plan gemm_ar --world 16 --nodes 2 --m 8
expect 1 "'path' = sm" plan gemm_ar --world 16 --nodes 2 --m 8 --path sm
expect 0 "5.00 us a put" plan gemm_ar --world 8 --m 8 --path copy_engine
expect 0 "communication" tune ag_gemm --dry-run --world 8
expect 0 "communication" tune gemm_rs --dry-run --world 8
expect 0 "communication" tune mlp --dry-run --world 8
expect 0 "communication" tune moe --dry-run --world 8 --model deepseek-moe
expect 0 "communication" tune sp_attention --dry-run --world 8 --seq 16384
# FP8 (issue 22): the GEMM commands take --dtype and --scaling; the plan models them, and so does the
# tune's dry run (the FP8 kernels as candidates, at the FP8 rate).
expect 0 "e4m3 block scaling" plan ag_gemm --world 8 --dtype e4m3 --scaling block
expect 0 "TFLOP/s e4m3" plan gemm_rs --world 8 --dtype e4m3
expect 0 "e4m3 row scaling" plan mlp --world 8 --model llama3-70b --dtype e4m3 --scaling row
expect 0 "e4m3_block_128x128x128_c1x1" tune ag_gemm --dry-run --world 8 --dtype e4m3 --scaling block
expect 0 "e4m3 (row scaling)" tune gemm_rs --dry-run --world 8 --dtype e4m3 --scaling row
no_gpu bench gemm_rs --dtype e4m3 --scaling row
no_gpu tune ag_gemm --dtype e4m3 --scaling block
no_gpu trace gemm_rs --dtype e4m3
no_gpu bench mlp --dtype e4m3 --scaling block

# Bad input: exit 64 naming the argument.
expect 64 "--world" bench ag_gemm --world 0
expect 64 "--model" tune moe --model gpt-5
expect 64 "--layout" tune sp_attention --layout diagonal
expect 64 "not expected" bench moe --dry-run
expect 64 "a command is required" tune

exit $failed
