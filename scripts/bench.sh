#!/usr/bin/env bash
# Builds the tilelink tool and runs the main benchmark on the GPUs present: with one GPU, a world
# of 8 virtual ranks; with several, one rank per GPU. Results also go to bench-results.json.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}

"$root/scripts/install_deps.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs" --target tilelink
exec "$build/tilelink" bench "${@:-all_gather}"
