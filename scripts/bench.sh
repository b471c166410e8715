#!/usr/bin/env bash
# Builds the tilelink tool and runs the main benchmark: AG+GEMM on the paper's three shapes, a
# world of 8 virtual ranks on GPU 0. Arguments replace the default: scripts/bench.sh <benchmark> [options].
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}

"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target tilelink_cli
if [[ $# -eq 0 ]]; then set -- ag_gemm --world 8 --shapes paper; fi
exec "$build/tilelink" bench "$@"
