#!/usr/bin/env bash
# Builds ortops with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) in build/asan and
# runs against that library
#   1. the C++ tests (ctest), and
#   2. the ONNX-Runtime-level Python tests, tests/python/ort, the fuzz test included, in the
#      main environment's Python (.venv) with libasan preloaded, at the widest instruction-set
#      level the CPU has (test_isa.py in it runs cases of every op at every level); then, at
#      each lower level (ORTOPS_ISA), the tests of the ops whose loops are compiled per level
#      (tests/python/isa_levels.py --tests).
#
#   scripts/test_sanitizers.sh [--junit-dir DIR] [--step build|ctest|python] [PYTEST ARGS...]
#
# PYTEST ARGS replace the default selection (tests/python/ort) and are then run at every
# level; ORTOPS_ISA set by the caller runs that one level only. --step runs one part alone:
# the build, the C++ tests or the Python tests (the last two need the build in place), as
# scripts/test.sh does to run them beside other suites. E.g.
#   scripts/test_sanitizers.sh tests/python/ort/test_roi_align.py -x
#   ORTOPS_ISA=avx2 ORTOPS_FUZZ_CASES=50000 scripts/test_sanitizers.sh tests/python/ort/test_fuzz.py
# Needs what scripts/setup.sh puts in place (.deps/, .venv, .venv-cuda) and GCC's sanitizer
# runtimes (libasan, libubsan: Debian's g++ has them). Overrides: ORTOPS_SANITIZE (default
# address,undefined), ORTOPS_ORT_ROOT (as for setup.sh), ORTOPS_SANITIZED_LIBRARY (default
# libortops.so; libortops_device_on_cpu.so tests the device path, built here too when
# .venv-cuda has CCCL's headers).
#
# How the Python half sees memory errors: Python itself is not instrumented, so libasan is
# preloaded (with libstdc++, whose exceptions ASan intercepts), leak detection is off (Python
# keeps memory until exit by design), and ORTOPS_TEST_CPU_ARENA=0 makes the tests' sessions
# run without ONNX Runtime's CPU memory arena (tests/python/ortest.py), so that every input,
# output and scratch buffer is its own malloc with ASan's red zones around it; a read past a
# tensor's end then stops the run with a report naming the kernel's source line (pytest
# captures sys.stdout/stderr only, so that the report, written to file descriptor 2 by a
# process about to exit, is not lost with pytest's capture files).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=../deps/versions.env
source deps/versions.env
BUILD="$ROOT/build/asan"
JUNIT_DIR=""
STEP=all
while [[ "${1:-}" == "--junit-dir" || "${1:-}" == "--step" ]]; do
  case "$1" in
    --junit-dir) JUNIT_DIR="$2" ;;
    --step) STEP="$2" ;;
  esac
  shift 2
done
[[ "$STEP" =~ ^(all|build|ctest|python)$ ]] || { echo "[sanitizers] --step takes build, ctest or python" >&2; exit 2; }
PYTEST_ARGS=("$@")
LOWER_LEVEL_ARGS=("$@")
if [[ ${#PYTEST_ARGS[@]} -eq 0 ]]; then
  PYTEST_ARGS=(tests/python/ort)
  # The tests of the per-level loops (test_isa.py, in the first run, runs every level).
  read -r -a LOWER_LEVEL_ARGS <<<"$(.venv/bin/python tests/python/isa_levels.py --tests)"
fi
log() { printf '[sanitizers] %s\n' "$*" >&2; }

ort_include="$ROOT/.deps/onnxruntime/include"
ort_lib=""
if [[ -n "${ORTOPS_ORT_ROOT:-}" ]]; then
  ort_include="$ORTOPS_ORT_ROOT/include"
  ort_lib="$ORTOPS_ORT_ROOT/lib"
fi
[[ -x .venv/bin/python ]] || { log "no .venv (run scripts/setup.sh first)"; exit 2; }

if [[ "$STEP" == all || "$STEP" == build ]]; then
  log "build ($BUILD, -fsanitize=${ORTOPS_SANITIZE:-address,undefined})"
  cccl=$(ls -d "$ROOT"/.venv-cuda/lib/python3*/site-packages/nvidia/cu13/include/cccl 2>/dev/null | head -n 1 || true)
  # -O1 with line tables only (-g1: what ASan's reports need to name source lines): with
  # both sanitizers, -O2 -g took 2.4 times as long to compile (batched_nms.cc: 96 s against
  # 40 s) and made this build the longest step of the test command. Not -O0, which would
  # halve it again: unoptimised, the per-level objects keep their own out-of-line copies of
  # inline functions (std::min, the float16 conversions), compiled for their level, which the
  # linker may pick for every caller (the isa_symbols test fails).
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DORTOPS_SANITIZE=${ORTOPS_SANITIZE:-address,undefined}" \
    "-DORTOPS_ORT_INCLUDE_DIR=$ort_include" "-DORTOPS_ORT_LIBRARY_DIR=$ort_lib" \
    "-DORTOPS_MIN_ORT_API=$ORTOPS_MIN_ORT_API" "-DORTOPS_CCCL_INCLUDE_DIR=$cccl" >/dev/null
  cmake --build "$BUILD" >&2
  [[ "$STEP" == build ]] && exit 0
fi
LIBRARY=${ORTOPS_SANITIZED_LIBRARY:-libortops.so}
[[ -f "$BUILD/CMakeCache.txt" && -f "$BUILD/$LIBRARY" ]] || { log "no $LIBRARY in $BUILD (run --step build first)"; exit 2; }
# The JUnit files of another library than libortops.so carry its name.
suffix=""
if [[ "$LIBRARY" != libortops.so ]]; then
  suffix="-${LIBRARY#libortops_}"
  suffix="${suffix%.so}"
fi

# The runtimes of the compiler that built it (GCC's: -print-file-name finds them).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
libasan=$("$cxx" -print-file-name=libasan.so)
libstdcxx=$("$cxx" -print-file-name=libstdc++.so)
for lib in "$libasan" "$libstdcxx"; do
  [[ -f "$lib" ]] || { log "$cxx has no $(basename "$lib") (a GCC with its sanitizer runtimes is needed)"; exit 2; }
done

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0

if [[ "$STEP" == all || "$STEP" == ctest ]]; then
  log "C++ tests"
  (cd "$BUILD" && ctest --output-on-failure -j2 ${JUNIT_DIR:+--output-junit "$JUNIT_DIR/ctest-asan.xml"}) || failed=1
  [[ "$STEP" == ctest ]] && exit "$failed"
fi

# pytest_at LEVEL JUNIT_NAME ARGS...: the Python tests at one instruction-set level ("" for
# the widest the CPU has).
pytest_at() {
  local level=$1 junit=$2
  shift 2
  log "Python tests of $LIBRARY at instruction-set level ${level:-(widest)}: $*"
  LD_PRELOAD="$libasan $libstdcxx" \
    ASAN_OPTIONS=detect_leaks=0 \
    ORTOPS_TEST_CPU_ARENA=0 \
    ORTOPS_ISA="$level" \
    ORTOPS_LIBRARY="$BUILD/$LIBRARY" \
    PYTHONPATH="$ROOT/python" \
    .venv/bin/python -m pytest -q -p no:cacheprovider --capture=sys \
    ${JUNIT_DIR:+--junitxml "$JUNIT_DIR/$junit$suffix.xml"} "$@"
}

if [[ -n "${ORTOPS_ISA:-}" ]]; then
  pytest_at "$ORTOPS_ISA" "pytest-asan-$ORTOPS_ISA" "${PYTEST_ARGS[@]}" || failed=1
else
  pytest_at "" pytest-asan "${PYTEST_ARGS[@]}" || failed=1
  for level in $(.venv/bin/python tests/python/isa_levels.py | awk '{$NF=""; print}'); do
    pytest_at "$level" "pytest-asan-$level" "${LOWER_LEVEL_ARGS[@]}" || failed=1
  done
fi
exit "$failed"
