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
rm -rf "$build/gpu-results"
ctest --test-dir "$build" --output-on-failure -j "$gpu_jobs" -L gpu "$@" || status=1
# The GPU suite's shards as GoogleTest counted them (JUnit XML: tests, failures, skipped).
if compgen -G "$build/gpu-results/*.xml" >/dev/null; then
  python3 - "$build"/gpu-results/*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    t += int(root.get("tests", 0)); f += int(root.get("failures", 0)) + int(root.get("errors", 0))
    s += sum(1 for c in root.iter("testcase") if c.find("skipped") is not None or c.get("result") == "skipped")
print(f"GPU suite (GoogleTest, {len(sys.argv) - 1} shards): {t} tests, {t - f - s} passed, {f} failed, {s} skipped")
PY
fi
exit $status
