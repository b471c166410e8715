#!/usr/bin/env bash
# Installs TileLink's pinned dependencies into .deps/ (override with TILELINK_DEPS_DIR).
#  - CUTLASS 4.2.0 / CuTe headers from the nvidia-cutlass==4.2.0.0 wheel (sha256-checked)
#  - GoogleTest sources (Debian's libgtest-dev), built with the project
#  - CLI11 and nlohmann-json headers (Debian's libcli11-dev, nlohmann-json3-dev) for the tilelink tool
#  - ninja and cmake from Debian when missing
#  - NVSHMEM 3.4.5 (nvidia-nvshmem-cu13==3.4.5, torch 2.11's): used from Python's environment when
#    it has that version (torch's machines), else headers and host libraries unpacked from the
#    wheel (sha256-checked) into .deps/nvshmem
# When .deps/ is complete it does nothing and needs no network: that is how the GPU machine,
# which has none, uses the folder carried to it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${TILELINK_DEPS_DIR:-$root/.deps}
cutlass_version=4.2.0.0
cutlass_wheel=nvidia_cutlass-${cutlass_version}-py3-none-any.whl
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
stamp=$deps/.complete-cutlass-${cutlass_version}

nvshmem_version=3.4.5
nvshmem_wheel=nvidia_nvshmem_cu13-${nvshmem_version}-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
nvshmem_sha256=290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80

# NVSHMEM: Python's copy when it is the pinned version (cmake/nvshmem.cmake finds it there), else
# the wheel's include/ and host libraries in $deps/nvshmem.
install_nvshmem() {
  local have
  have=$(python3 -c "import importlib.metadata as m; print(m.version('nvidia-nvshmem-cu13'))" 2>/dev/null || true)
  if [[ $have == "$nvshmem_version" ]]; then
    echo "install_deps: NVSHMEM $nvshmem_version from Python's environment"
    return
  fi
  if [[ -f $deps/nvshmem/.complete-$nvshmem_version ]]; then
    echo "install_deps: NVSHMEM $nvshmem_version in $deps/nvshmem"
    return
  fi
  mkdir -p "$deps/download"
  if [[ ! -f $deps/download/$nvshmem_wheel ]]; then
    echo "install_deps: downloading nvidia-nvshmem-cu13==$nvshmem_version"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      -d "$deps/download" "nvidia-nvshmem-cu13==$nvshmem_version"
  fi
  echo "$nvshmem_sha256  $deps/download/$nvshmem_wheel" | sha256sum --check --quiet
  rm -rf "$deps/nvshmem"
  python3 - "$deps/download/$nvshmem_wheel" "$deps/nvshmem" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
prefix = "nvidia/nvshmem/"
keep_libs = {"libnvshmem_host.so.3", "nvshmem_bootstrap_uid.so.3"}
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        if not (rel.startswith("include/") or (rel.startswith("lib/") and os.path.basename(rel) in keep_libs)):
            continue
        dst = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with z.open(name) as src, open(dst, "wb") as f:
            f.write(src.read())
        if rel.startswith("lib/"):
            os.chmod(dst, 0o755)
PY
  rm -f "$deps/download/$nvshmem_wheel"
  touch "$deps/nvshmem/.complete-$nvshmem_version"
  echo "install_deps: NVSHMEM $nvshmem_version headers and host libraries in $deps/nvshmem"
}

if [[ -f $stamp && -f $deps/cutlass/include/cute/tensor.hpp && -f $deps/googletest/CMakeLists.txt &&
      -f $deps/cli11/include/CLI/CLI.hpp && -f $deps/json/include/nlohmann/json.hpp ]]; then
  echo "install_deps: $deps is complete (CUTLASS $cutlass_version, GoogleTest, CLI11, nlohmann-json); nothing to do"
  install_nvshmem
  exit 0
fi

missing=()
[[ -f /usr/src/googletest/CMakeLists.txt ]] || missing+=(libgtest-dev)
[[ -f /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
[[ -f /usr/include/nlohmann/json.hpp ]] || missing+=(nlohmann-json3-dev)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v cmake >/dev/null || missing+=(cmake)
if ((${#missing[@]})); then
  echo "install_deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p "$deps/download"
if [[ ! -f $deps/download/$cutlass_wheel ]]; then
  echo "install_deps: downloading nvidia-cutlass==$cutlass_version"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$deps/download" \
    "nvidia-cutlass==$cutlass_version"
fi
echo "$cutlass_sha256  $deps/download/$cutlass_wheel" | sha256sum --check --quiet

rm -rf "$deps/cutlass"
python3 - "$deps/download/$cutlass_wheel" "$deps/cutlass" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dst = os.path.join(out, "include", name[len(prefix):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(name) as src, open(dst, "wb") as f:
                f.write(src.read())
PY

rm -rf "$deps/googletest"
cp -r /usr/src/googletest "$deps/googletest"
rm -rf "$deps/cli11" "$deps/json"
mkdir -p "$deps/cli11/include" "$deps/json/include"
cp -r /usr/include/CLI "$deps/cli11/include/CLI"
cp -r /usr/include/nlohmann "$deps/json/include/nlohmann"
rm -rf "$deps/download"
touch "$stamp"
install_nvshmem
echo "install_deps: CUTLASS $cutlass_version headers, GoogleTest, CLI11 and nlohmann-json in $deps"
