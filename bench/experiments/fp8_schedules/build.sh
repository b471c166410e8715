#!/usr/bin/env bash
# Builds the FP8 schedule experiment into build/fp8_schedules/fp8_schedules (README.md here).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$root/build/fp8_schedules}
python3 "$here/gen.py" "$out"
flags=(-O3 -DNDEBUG "--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]" --expt-relaxed-constexpr
       -Xptxas=--warn-on-spills -std=c++17 -I"$root/src" -I"$root/include" -I"$root/.deps/cutlass/include" -I"$here" -I"$out")
cd "$out"
printf '%s\n' c_*.cu "$here/main.cu" | xargs -P "${JOBS:-$(nproc)}" -I{} sh -c \
  'nvcc "$@" -c "{}" -o "$(basename "{}").o"' _ "${flags[@]}"
nvcc -o fp8_schedules ./*.o -lcudart
echo "$out/fp8_schedules"
