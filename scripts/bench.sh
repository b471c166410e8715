#!/usr/bin/env bash
# Builds the tilelink tool and runs the main job: AG+GEMM on the paper's three shapes against
# cuBLAS and its baselines. With several GPUs, one rank per GPU; on one GPU, 8 virtual ranks, then
# what that table means, the world-1 result against cuBLAS and the plan model's prediction for 8
# GPUs over NVLink (`bench ag_gemm --explain`). Arguments replace the default:
# scripts/bench.sh <benchmark> [options].
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}

"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target tilelink_cli
if [[ $# -eq 0 ]]; then
  if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
    gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
  else
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  fi
  if ((gpus >= 2)); then
    export TILELINK_RANKS=gpus
    set -- ag_gemm --world "$gpus" --shapes paper --explain
  else
    set -- ag_gemm --world 8 --shapes paper --explain
  fi
fi
exec "$build/tilelink" bench "$@"
