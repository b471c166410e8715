#!/usr/bin/env bash
# Builds everything (library, CUDA kernels, tests, benchmarks, tool) and runs the test suites
# through ctest: the CPU suite always, the GPU suite where a CUDA GPU answers (on a machine without
# one the script says so and does not start it). Arguments go to both ctest runs (e.g. -R AgGemm).
#
# The GPU tests run TILELINK_GPU_JOBS processes at a time (default 4): each is a process of its
# own on the same GPU(s), and more at once only time-slice the GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TILELINK_BUILD_DIR:-$root/build}
jobs=${TILELINK_JOBS:-$(nproc)}
gpu_jobs=${TILELINK_GPU_JOBS:-4}

"$root/scripts/install_deps.sh"
# The PyTorch operators and their pytest suite where python3 has torch (CI installs it).
python=${TILELINK_PYTHON:-python3}
if "$python" -c "import torch, pytest" >/dev/null 2>&1; then have_torch=ON; else have_torch=OFF; fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILELINK_BUILD_PYTHON=$have_torch \
  -DPython3_EXECUTABLE="$(command -v "$python")"
cmake --build "$build" -j "$jobs"
status=0
rm -f "$build/cpu-results.xml"
# The GPU suite includes the process-world suite (labels gpu and process: 2 and 4 processes under MPS).
ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE gpu --output-junit cpu-results.xml "$@" || status=1
# ctest's own count of the CPU run (JUnit XML written in the build folder).
cpu_summary=$(python3 - "$build/cpu-results.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
t = int(root.get("tests", 0)); f = int(root.get("failures", 0)) + int(root.get("errors", 0))
s = int(root.get("skipped", 0) or 0)
print(f"CPU suite (ctest -LE gpu): {t} tests, {t - f - s} passed, {f} failed, {s} skipped")
PY
) || cpu_summary="CPU suite (ctest -LE gpu): no result file"
# pytest (python/tests) against the operators just built: the CPU part everywhere, the GPU part
# (torchrun, 1/2/4 processes) where a GPU answers; it says what it skipped and why.
python_summary="Python suite (pytest): not run (python3 has no torch and pytest: pip install torch==2.11.0 pytest)"
run_pytest() {
  [[ $have_torch == ON ]] || return 0
  rm -f "$build/pytest-results.xml"
  TILELINK_TORCH_LIBRARY="$build/python/_tilelink_torch.so" TILELINK_PROCESS_TESTS="$build/tests/tilelink_process_tests" PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" -m pytest -rs -p no:cacheprovider --junitxml="$build/pytest-results.xml" "$root/python/tests" || status=1
  python_summary=$("$python" - "$build/pytest-results.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
s = root if root.tag == "testsuite" else root.find("testsuite")
t = int(s.get("tests", 0)); f = int(s.get("failures", 0)) + int(s.get("errors", 0)); k = int(s.get("skipped", 0))
print(f"Python suite (pytest): {t} tests, {t - f - k} passed, {f} failed, {k} skipped")
PY
  ) || python_summary="Python suite (pytest): no result file"
}
# The GPU suite runs where a CUDA GPU answers (`tilelink info` exits 2 where none does). Elsewhere
# it is not started at all, so that the last ctest summary printed is the one of tests that ran.
# Any other failure of `info` on a machine with a GPU is a failure, and the suite still runs.
info_rc=0
"$build/tilelink" info >/dev/null 2>&1 || info_rc=$?
if ((info_rc != 0 && info_rc != 2)); then
  echo "tilelink info failed (exit $info_rc): running the GPU suite anyway; this run fails." >&2
  status=1
fi
if ((info_rc == 2)); then
  gpu_tests=$(ctest --test-dir "$build" -N -L gpu "$@" | sed -n 's/^Total Tests: //p')
  echo "No CUDA GPU here: the GPU suite (ctest -L gpu, ${gpu_tests:-0} ctest entries) was not run;" \
       "run ./scripts/test.sh on a Hopper GPU machine for it."
  run_pytest
  echo "$cpu_summary"
  echo "$python_summary"
  exit $status
fi
rm -rf "$build/gpu-results"
ctest --test-dir "$build" --output-on-failure -j "$gpu_jobs" -L gpu "$@" || status=1
# The GPU suite's shards and its death-test entry as GoogleTest counted them (JUnit XML: tests,
# failures, skipped).
if compgen -G "$build/gpu-results/*.xml" >/dev/null; then
  python3 - "$build"/gpu-results/*.xml <<'PY'
import sys, xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.argv[1:]:
    root = ET.parse(path).getroot()
    t += int(root.get("tests", 0)); f += int(root.get("failures", 0)) + int(root.get("errors", 0))
    s += sum(1 for c in root.iter("testcase") if c.find("skipped") is not None or c.get("result") == "skipped")
print(f"GPU suite (GoogleTest, {len(sys.argv) - 1} result files): {t} tests, {t - f - s} passed, {f} failed, {s} skipped")
PY
fi
run_pytest
echo "$cpu_summary"
echo "$python_summary"
exit $status
