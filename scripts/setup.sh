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

# ONNX Runtime's own Windows runtimes (onnxruntime.dll) for the Windows suite
# (scripts/test_windows.sh), at the two pins of deps/versions.env, each archive checked
# against its SHA-256: only where that suite can run, with the MinGW-w64 cross compiler and
# Wine installed. Needs the main environment's pip for the wheel.
fetch_ort_windows() {
  command -v x86_64-w64-mingw32-g++-posix >/dev/null || return 0
  command -v wine64 >/dev/null || [[ -x /usr/lib/wine/wine64 ]] || return 0
  local dest="$DEPS/onnxruntime-windows" tmp
  local oldest="$dest/$ORT_WINDOWS_OLDEST_JAR_VERSION" newest="$dest/$ORT_WINDOWS_NEWEST_WHEEL_VERSION"
  if [[ ! -f "$oldest/onnxruntime.dll" ]]; then
    log "onnxruntime.dll (win-x64) from Maven Central com.microsoft.onnxruntime:onnxruntime:$ORT_WINDOWS_OLDEST_JAR_VERSION"
    tmp=$(mktemp -d)
    mvn -q -B dependency:copy \
      "-Dartifact=com.microsoft.onnxruntime:onnxruntime:$ORT_WINDOWS_OLDEST_JAR_VERSION:jar" \
      "-DoutputDirectory=$tmp" >/dev/null
    local jar="$tmp/onnxruntime-$ORT_WINDOWS_OLDEST_JAR_VERSION.jar"
    if ! echo "$ORT_WINDOWS_OLDEST_JAR_SHA256  $jar" | sha256sum --check --status; then
      log "$(basename "$jar"): SHA-256 $(sha256sum "$jar" | cut -d' ' -f1), not the pinned $ORT_WINDOWS_OLDEST_JAR_SHA256"
      rm -rf "$tmp"
      return 1
    fi
    unzip -q -j -o "$jar" 'ai/onnxruntime/native/win-x64/onnxruntime.dll' -d "$tmp/dll"
    mkdir -p "$dest" && rm -rf "$oldest" && mv "$tmp/dll" "$oldest"
    rm -rf "$tmp"
  fi
  if [[ ! -f "$newest/onnxruntime.dll" ]]; then
    log "onnxruntime.dll from PyPI's onnxruntime $ORT_WINDOWS_NEWEST_WHEEL_VERSION win_amd64 wheel"
    tmp=$(mktemp -d)
    printf 'onnxruntime==%s --hash=sha256:%s\n' "$ORT_WINDOWS_NEWEST_WHEEL_VERSION" \
      "$ORT_WINDOWS_NEWEST_WHEEL_SHA256" >"$tmp/requirements.txt"
    "$ROOT/.venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --platform win_amd64 --python-version "$ORT_WINDOWS_NEWEST_WHEEL_PYTHON" \
      --require-hashes -r "$tmp/requirements.txt" -d "$tmp" >&2
    unzip -q -j -o "$tmp"/onnxruntime-*.whl 'onnxruntime/capi/onnxruntime.dll' -d "$tmp/dll"
    mkdir -p "$dest" && rm -rf "$newest" && mv "$tmp/dll" "$newest"
    rm -rf "$tmp"
  fi
}

# make_venv DIR REQUIREMENTS [STAMP PIP-OPTION...]: creates DIR if needed and installs the pinned
# requirements, skipping pip entirely when the same file was installed before (STAMP: the name of
# the copy kept in DIR, another one for a second file added to the same environment).
make_venv() {
  local dir="$1" requirements="$2" stamp="$1/${3:-.ortops-requirements}"
  local options=("${@:4}")
  if [[ -f "$stamp" ]] && cmp -s "$stamp" "$requirements"; then
    return
  fi
  log "Python environment $dir from $requirements${options[*]:+ (${options[*]})}"
  [[ -x "$dir/bin/python" ]] || python3 -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${options[@]}" -r "$requirements"
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
make_venv "$ROOT/.venv-cuda" "$ROOT/deps/python-cuda.txt"  # CMake, nvcc and CCCL: the build's toolchain
# The build needs only .venv-cuda and the headers: it compiles while pip fills the other
# environments (mostly downloads and unpacking; torch alone is several GB). Its output is
# printed when it ends.
build_log="$ROOT/build/setup-build.log"
if [[ $deps_only == 0 ]]; then
  mkdir -p "$ROOT/build"
  build_library >"$build_log" 2>&1 &
  build_pid=$!
fi
make_venv "$ROOT/.venv" "$ROOT/deps/python-main.txt"
# Without their declared dependencies: deps/python-main-no-deps.txt says why.
make_venv "$ROOT/.venv" "$ROOT/deps/python-main-no-deps.txt" .ortops-no-deps --no-deps
make_venv "$ROOT/.venv-ort-min" "$ROOT/deps/python-ort-min.txt"
make_venv "$ROOT/.venv-wheel" "$ROOT/deps/python-wheel.txt"  # scripts/build_wheel.sh, tests/python/test_wheel.py
if [[ $with_ray == 1 ]]; then
  make_venv "$ROOT/.venv-ray" "$ROOT/deps/python-ray.txt"  # examples/ray, tests/python/test_ray_example.py
fi
[[ -n "${ORTOPS_ORT_ROOT:-}" ]] || fetch_ort_windows
if [[ $deps_only == 0 ]]; then
  build_status=0
  wait "$build_pid" || build_status=$?
  cat "$build_log" >&2
  [[ $build_status == 0 ]] || { log "the build failed (above; also in $build_log)"; exit "$build_status"; }
  install_package "$ROOT/.venv"
  install_package "$ROOT/.venv-ort-min"
  if [[ $with_ray == 1 ]]; then install_package "$ROOT/.venv-ray"; fi
fi
log "ready ($SECONDS s)"
