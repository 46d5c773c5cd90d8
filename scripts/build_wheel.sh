#!/usr/bin/env bash
# Builds the wheel to install anywhere: dist/ortops-<version>-py3-none-<platform>.whl, where
# <platform> is ORTOPS_WHEEL_PLATFORM from deps/versions.env (manylinux_2_27_x86_64), checked
# and tagged by auditwheel. Needs python3 (3.9+), CMake 3.22+, a C++20 compiler, ninja or make,
# and npm for the pinned ONNX Runtime headers unless ORTOPS_ORT_INCLUDE_DIR names a folder
# with them (setup.py says so if they are missing). The tools (deps/python-wheel.txt) go into
# .venv-wheel. Options, by environment variable:
#   ORTOPS_PREBUILT_DIR=<CMake build folder>  package that build instead of compiling one
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
log "building the wheel${ORTOPS_PREBUILT_DIR:+ from the library in $ORTOPS_PREBUILT_DIR}"
"$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --wheel-dir "$raw" "$ROOT" >&2

# auditwheel refuses (non-zero exit) if the library needs anything the platform does not
# guarantee: a newer glibc symbol version, or a shared library outside the manylinux set.
log "checking and tagging it $ORTOPS_WHEEL_PLATFORM with auditwheel"
PATH="$VENV/bin:$PATH" "$VENV/bin/auditwheel" repair --only-plat --plat "$ORTOPS_WHEEL_PLATFORM" --strip \
  --wheel-dir "$raw/repaired" "$raw"/ortops-*.whl >&2
"$VENV/bin/auditwheel" show "$raw"/repaired/*.whl >&2
mkdir -p "$OUT"
wheel="$OUT/$(basename "$raw"/repaired/*.whl)"
mv -f "$raw"/repaired/*.whl "$wheel"
log "$wheel ($(du -k "$wheel" | cut -f1) KiB)"
echo "$wheel"
