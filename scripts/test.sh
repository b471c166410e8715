#!/usr/bin/env bash
# Builds everything (library, CUDA kernels, tests, benchmarks, tool) and runs the test suites
# through ctest. On a machine without a GPU the GPU tests report themselves skipped; the CPU suite
# runs for real. Arguments go to both ctest runs (e.g. -R AgGemm).
#
# The GPU tests run TILELINK_GPU_JOBS processes at a time (default 4): each is a process of its
# own on the same GPU(s), and more at once only time-slice the GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}
gpu_jobs=${TILELINK_GPU_JOBS:-4}

"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
status=0
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE gpu "$@" || status=1
ctest --test-dir "$build" --output-on-failure -j "$gpu_jobs" -L gpu "$@" || status=1
exit $status
