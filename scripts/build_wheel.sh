#!/usr/bin/env bash
# Builds the wheel to install anywhere: dist/ortops-<version>-py3-none-<platform>.whl, where
# <platform> is ORTOPS_WHEEL_PLATFORM from deps/versions.env (manylinux_2_27_x86_64), checked
# and tagged by auditwheel. Needs python3 (3.9+), CMake 3.22+, a C++20 compiler, ninja or make,
# and npm for the pinned ONNX Runtime headers unless ORTOPS_ORT_INCLUDE_DIR names a folder
# with them (setup.py says so if they are missing). The tools (deps/python-wheel.txt) go into
# .venv-wheel.
#
#   scripts/build_wheel.sh windows
#
# builds dist/ortops-<version>-py3-none-win_amd64.whl instead, with ortops.dll cross-built
# by Debian's MinGW-w64 toolchain (apt-get install g++-mingw-w64-x86-64-posix wine64; Wine
# runs the op manifest tool) in build/windows/wheel, stripped, and checked as auditwheel
# checks the Linux one: it must import system DLLs only and export RegisterCustomOps alone
# (tests/cpp/check_windows_dll.cmake).
#
#   scripts/build_wheel.sh gpu
#
# builds dist/ortops_gpu-<version>-py3-none-manylinux_2_27_x86_64.whl: the same `ortops`
# package with the CUDA build's library (scripts/build_cuda.sh, every architecture of
# ORTOPS_CUDA_ARCHITECTURES), published as its own distribution, ortops-gpu, which requires
# onnxruntime-gpu (the way onnxruntime and onnxruntime-gpu split). Its metadata is
# pyproject.toml's with that name and requirement, written into a copy of the package.
#
# Options, by environment variable:
#   ORTOPS_PREBUILT_DIR=<CMake build folder>  package that build instead of compiling one
#                                             (with windows: a Windows cross build; with
#                                             gpu: a folder with the CUDA build's
#                                             libortops.so and ortops_ops.json)
#   ORTOPS_WHEEL_DIR=<folder>                 write the wheel there instead of dist/
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../deps/versions.env
source "$ROOT/deps/versions.env"
VENV="$ROOT/.venv-wheel"
REQUIREMENTS="$ROOT/deps/python-wheel.txt"
OUT="${ORTOPS_WHEEL_DIR:-$ROOT/dist}"
log() { printf '[build_wheel] %s\n' "$*" >&2; }

if ! { [[ -f "$VENV/.ortops-requirements" ]] && cmp -s "$VENV/.ortops-requirements" "$REQUIREMENTS"; }; then
  log "wheel tools into $VENV from $REQUIREMENTS"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$VENV/.ortops-requirements"
fi

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

# auditwheel refuses (non-zero exit) if the library needs anything the platform does not
# guarantee: a newer glibc symbol version, or a shared library outside the manylinux set.
check_and_tag() {
  log "checking and tagging it $ORTOPS_WHEEL_PLATFORM with auditwheel"
  PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair --only-plat --plat "$ORTOPS_WHEEL_PLATFORM" --strip \
    --wheel-dir "$raw/repaired" "$1" >&2
  "$VENV/bin/auditwheel" show "$raw"/repaired/*.whl >&2
}

# Moves the finished wheel $1 into $OUT and prints its path there.
deliver() {
  mkdir -p "$OUT"
  local wheel
  wheel="$OUT/$(basename "$1")"
  mv -f "$1" "$wheel"
  log "$wheel ($(du -k "$wheel" | cut -f1) KiB)"
  echo "$wheel"
}

if [[ "${1:-}" == windows ]]; then
  for tool in x86_64-w64-mingw32-g++-posix x86_64-w64-mingw32-strip x86_64-w64-mingw32-objdump cmake ninja; do
    command -v "$tool" >/dev/null || { log "missing $tool (apt-get install g++-mingw-w64-x86-64-posix)"; exit 2; }
  done
  build=${ORTOPS_PREBUILT_DIR:-}
  if [[ -z "$build" ]]; then
    include=${ORTOPS_ORT_INCLUDE_DIR:-$ROOT/.deps/onnxruntime/include}
    [[ -n "${ORTOPS_ORT_INCLUDE_DIR:-}" ]] || "$VENV/bin/python" "$ROOT/scripts/fetch_ort_headers.py" "$include" >&2
    build="$ROOT/build/windows/wheel"
    log "cross-building ortops.dll in $build"
    cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORTOPS_BUILD_TESTS=OFF \
      "-DCMAKE_TOOLCHAIN_FILE=$ROOT/cmake/x86_64-w64-mingw32.cmake" \
      "-DORTOPS_ORT_INCLUDE_DIR=$include" "-DORTOPS_MIN_ORT_API=$ORTOPS_MIN_ORT_API" >/dev/null
    cmake --build "$build" >&2
  fi
  # The DLL without its symbol table (as auditwheel --strip does for Linux), checked.
  mkdir "$raw/library"
  cp "$build/ortops.dll" "$build/ortops_ops.json" "$raw/library/"
  x86_64-w64-mingw32-strip --strip-unneeded "$raw/library/ortops.dll"
  cmake "-DOBJDUMP=$(command -v x86_64-w64-mingw32-objdump)" "-DLIBRARY=$raw/library/ortops.dll" \
    -P "$ROOT/tests/cpp/check_windows_dll.cmake" >&2
  log "building the win_amd64 wheel from $build/ortops.dll"
  ORTOPS_PREBUILT_DIR="$raw/library" "$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check \
    --no-deps --no-build-isolation --wheel-dir "$raw" "$ROOT" >&2
  deliver "$raw"/ortops-*-py3-none-win_amd64.whl
  exit 0
fi

# The CUDA build as the ortops-gpu distribution: the package's sources copied, with
# pyproject.toml's name and ONNX Runtime requirement changed, and the CUDA build's library.
if [[ "${1:-}" == gpu ]]; then
  library=${ORTOPS_PREBUILT_DIR:-}
  [[ -n "$library" ]] || library=$(dirname "$("$ROOT/scripts/build_cuda.sh")")
  grep -q '"library_providers": \[[^]]*CUDAExecutionProvider' "$library/ortops_ops.json" || {
    log "$library/ortops_ops.json is not a CUDA build's manifest (scripts/build_cuda.sh makes one)"
    exit 2
  }
  mkdir "$raw/source"
  cp -r "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/README.md" "$ROOT/LICENSE" "$ROOT/CHANGELOG.md" "$raw/source/"
  (cd "$ROOT" && git ls-files -z python) | (cd "$ROOT" && xargs -0 cp --parents -t "$raw/source")
  "$VENV/bin/python" - "$raw/source/pyproject.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text, named = re.subn(r'(?m)^name = "ortops"$', 'name = "ortops-gpu"', text)
text, required = re.subn(r'(?m)^dependencies = \["numpy"\]$', 'dependencies = ["numpy", "onnxruntime-gpu>=1.17"]', text)
text, extras = re.subn(r'(?m)^onnxruntime(-gpu)? = \[.*\]\n', "", text)
# pip shows which build this is; whether and where it was verified on a GPU is for the docs
# (a date and a device), not for metadata that outlives it.
text, described = re.subn(r'(?m)^description = "(.*)"$', r'description = "\1; CUDA build (CUDAExecutionProvider kernels)"', text)
assert (named, required, extras, described) == (1, 1, 2, 1), "pyproject.toml's layout changed: update build_wheel.sh gpu"
open(path, "w").write(text)
PY
  log "building the ortops-gpu wheel from $library/libortops.so"
  ORTOPS_PREBUILT_DIR="$library" "$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --no-build-isolation --wheel-dir "$raw" "$raw/source" >&2
  check_and_tag "$raw"/ortops_gpu-*.whl
  deliver "$raw"/repaired/*.whl
  exit 0
fi

log "building the wheel${ORTOPS_PREBUILT_DIR:+ from the library in $ORTOPS_PREBUILT_DIR}"
"$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$raw" "$ROOT" >&2
check_and_tag "$raw"/ortops-*.whl
deliver "$raw"/repaired/*.whl
