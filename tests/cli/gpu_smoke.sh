#!/usr/bin/env bash
# Every `tilelink` GPU command once on small problems (2 virtual ranks): each must exit 0. The
# device run's `tests` mode calls it after the GPU suite; `commands.sh` covers the command line
# without a GPU. Usage: tests/cli/gpu_smoke.sh path/to/tilelink [log file]
set -u
tl=${1:?usage: gpu_smoke.sh path/to/tilelink [log]}
tmp=$(mktemp -d)
log=${2:-$tmp/smoke.log}  # kept only when named: the last check reads it
: >"$log"
export TILELINK_TUNE_CACHE=$tmp/tune.json
quick=(--warmup 0 --iters 1)
failed=0
run() {
  if ! timeout 120 "$tl" "$@" >>"$log" 2>&1; then
    echo "FAIL: tilelink $*"
    failed=1
  fi
}
run info
run bench all_gather --world 2 "${quick[@]}"
run bench reduce_scatter --world 2 "${quick[@]}"
run bench ag_gemm --world 2 --m 1024 --n 1024 --k 512 "${quick[@]}"
run bench gemm_rs --world 2 --m 1024 --n 1024 --k 1024 "${quick[@]}"
run bench mlp --world 2 --m 1024 --hidden 512 --intermediate 1024 "${quick[@]}"
run bench moe_ag --world 2 --m 512 --hidden 512 --intermediate 512 --experts 4 "${quick[@]}"
run bench moe --world 2 --m 512 --hidden 512 --intermediate 512 --experts 4 "${quick[@]}"
run bench sp_attention --world 2 --seq 2048 --q-heads 4 --kv-heads 2 "${quick[@]}"
run trace ag_gemm --world 2 --m 1024 --n 1024 --k 512 "${quick[@]}"
run trace gemm_rs --world 2 --m 1024 --n 1024 --k 1024 "${quick[@]}"
run trace mlp --world 2 --m 1024 --hidden 512 --intermediate 1024 "${quick[@]}"
run trace moe --world 2 --m 512 --hidden 512 --intermediate 512 --experts 4 "${quick[@]}"
run trace sp_attention --world 2 --seq 2048 --q-heads 4 --kv-heads 2 "${quick[@]}"
run tune ag_gemm --world 2 --m 1024 --n 1024 --k 512 --top 2 "${quick[@]}"
run tune gemm_rs --world 2 --m 1024 --n 1024 --k 1024 --top 2 "${quick[@]}"
run tune moe --world 2 --m 512 --hidden 512 --intermediate 512 --experts 4 --top 2 "${quick[@]}"
run tune sp_attention --world 2 --seq 2048 --q-heads 4 --kv-heads 2 --top 2 "${quick[@]}"
# The cache the tunes wrote is read back by the ops.
run bench moe --world 2 --m 512 --hidden 512 --intermediate 512 --experts 4 "${quick[@]}"
run bench sp_attention --world 2 --seq 2048 --q-heads 4 --kv-heads 2 "${quick[@]}"
grep -q "config from the tune cache" "$log" || { echo "FAIL: no op took the tuned configuration"; failed=1; }
# A knob given at its default value is still an explicit choice: the cache must stay out.
if timeout 120 "$tl" bench sp_attention --world 2 --seq 2048 --q-heads 4 --kv-heads 2 --section-heads 0 \
    "${quick[@]}" >"$tmp/explicit.log" 2>&1; then
  if grep -q "config from the tune cache" "$tmp/explicit.log"; then
    echo "FAIL: bench sp_attention --section-heads 0 took the tune cache's configuration"
    failed=1
  fi
else
  echo "FAIL: tilelink bench sp_attention --section-heads 0"
  failed=1
fi
rm -rf "$tmp"
exit $failed
