#!/usr/bin/env bash
# Builds everything (library, CUDA kernels, tests, benchmarks, tool) and runs the test suites.
# On a machine without a GPU the GPU tests report themselves skipped; the CPU suite runs for real.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}

"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@"
