#!/usr/bin/env bash
# Brings everything ortops needs from the package registries, at the versions pinned in
# deps/versions.env, then builds the library and installs the Python package.
# Idempotent: whatever is already in place at the pinned version is reused, so a second run
# only rebuilds what changed. Set ORTOPS_ORT_ROOT to an ONNX Runtime release folder
# (include/, lib/) to build against it instead of the downloaded headers.
# Options: --deps-only (environments, no build), --with-ray (also .venv-ray, the Ray
# example's own environment: scripts/test.sh asks for it, scripts/demo.sh does not).
set -euo pipefail

deps_only=0 with_ray=0
for arg in "$@"; do
  case "$arg" in
    --deps-only) deps_only=1 ;;
    --with-ray) with_ray=1 ;;
    *) echo "usage: scripts/setup.sh [--deps-only] [--with-ray]" >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../deps/versions.env
source "$ROOT/deps/versions.env"
DEPS="$ROOT/.deps"
mkdir -p "$DEPS"
log() { printf '[setup] %s\n' "$*" >&2; }

fetch_ort_headers() {
  # npm pack of the pinned package, SHA-512 checked against the pin, headers/ of its AAR
  # (the same code setup.py uses when `pip install .` finds no headers).
  python3 "$ROOT/scripts/fetch_ort_headers.py" "$DEPS/onnxruntime/include"
}

fetch_ort_runtime() {
  local dest="$DEPS/onnxruntime/lib"
  local stamp="$dest/.from-jar-$ORT_JAR_VERSION-with-jar"
  [[ -f "$stamp" ]] && return
  log "libonnxruntime.so from Maven Central com.microsoft.onnxruntime:onnxruntime:$ORT_JAR_VERSION"
  local tmp
  tmp=$(mktemp -d)
  mvn -q -B dependency:copy \
    "-Dartifact=com.microsoft.onnxruntime:onnxruntime:$ORT_JAR_VERSION:jar" \
    "-DoutputDirectory=$tmp" >/dev/null
  rm -rf "$dest" && mkdir -p "$dest"
  unzip -q -j -o "$tmp/onnxruntime-$ORT_JAR_VERSION.jar" \
    'ai/onnxruntime/native/linux-x64/libonnxruntime.so' -d "$dest"
  ln -sf libonnxruntime.so "$dest/libonnxruntime.so.1"  # its SONAME
  mv "$tmp/onnxruntime-$ORT_JAR_VERSION.jar" "$dest/onnxruntime.jar"  # for the Java binding test
  rm -rf "$tmp"
  touch "$stamp"
}

# make_venv DIR REQUIREMENTS: creates DIR if needed and installs the pinned requirements,
# skipping pip entirely when the same file was installed before.
make_venv() {
  local dir="$1" requirements="$2"
  local stamp="$dir/.ortops-requirements"
  if [[ -f "$stamp" ]] && cmp -s "$stamp" "$requirements"; then
    return
  fi
  log "Python environment $dir from $requirements"
  [[ -x "$dir/bin/python" ]] || python3 -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
}

# The CUDA toolchain's folders in .venv-cuda (deps/python-cuda.txt): CUDA_HOME, with bin/nvcc,
# include/ and include/cccl (CCCL's headers).
cuda_home() {
  local nvcc
  nvcc=$(ls "$ROOT"/.venv-cuda/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n 1)
  [[ -n "$nvcc" ]] || { log "no nvcc in .venv-cuda"; return 1; }
  dirname "$(dirname "$nvcc")"
}

build_library() {
  local ort_include="$DEPS/onnxruntime/include"
  [[ -n "${ORTOPS_ORT_ROOT:-}" ]] && ort_include="$ORTOPS_ORT_ROOT/include"
  local cuda
  cuda=$(cuda_home)
  # With .venv-cuda's CMake (C++20 for nvcc): ORTOPS_CCCL_INCLUDE_DIR adds the emulated device
  # (build/libortops_device_on_cpu.so), ORTOPS_CUDA the CUDA build, which is compiled only on
  # request (scripts/build_cuda.sh), for one GPU architecture here.
  "$ROOT/.venv-cuda/bin/cmake" -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DORTOPS_ORT_INCLUDE_DIR=$ort_include" \
    "-DORTOPS_ORT_LIBRARY_DIR=${ORTOPS_ORT_ROOT:+$ORTOPS_ORT_ROOT/lib}" \
    "-DORTOPS_MIN_ORT_API=$ORTOPS_MIN_ORT_API" \
    "-DORTOPS_CCCL_INCLUDE_DIR=$cuda/include/cccl" \
    -DORTOPS_CUDA=ON "-DCMAKE_CUDA_COMPILER=$cuda/bin/nvcc" "-DCMAKE_CUDA_ARCHITECTURES=$ORTOPS_CUDA_TEST_ARCHITECTURE" \
    >/dev/null
  "$ROOT/.venv-cuda/bin/cmake" --build "$ROOT/build" >&2
}

install_package() {
  # The wheel carries the library built above; ORTOPS_PREBUILT_DIR stops setup.py from
  # compiling it a second time.
  local venv="$1"
  ORTOPS_PREBUILT_DIR="$ROOT/build" "$venv/bin/python" -m pip install --quiet \
    --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall "$ROOT" >&2
}

if [[ -z "${ORTOPS_ORT_ROOT:-}" ]]; then
  fetch_ort_headers
  fetch_ort_runtime
fi
make_venv "$ROOT/.venv" "$ROOT/deps/python-main.txt"
make_venv "$ROOT/.venv-ort-min" "$ROOT/deps/python-ort-min.txt"
make_venv "$ROOT/.venv-wheel" "$ROOT/deps/python-wheel.txt"  # scripts/build_wheel.sh, tests/python/test_wheel.py
make_venv "$ROOT/.venv-cuda" "$ROOT/deps/python-cuda.txt"    # the device paths: the emulated device, the CUDA build
if [[ $with_ray == 1 ]]; then
  make_venv "$ROOT/.venv-ray" "$ROOT/deps/python-ray.txt"  # examples/ray, tests/python/test_ray_example.py
fi
if [[ $deps_only == 0 ]]; then
  build_library
  install_package "$ROOT/.venv"
  install_package "$ROOT/.venv-ort-min"
  if [[ $with_ray == 1 ]]; then install_package "$ROOT/.venv-ray"; fi
fi
log "ready"
