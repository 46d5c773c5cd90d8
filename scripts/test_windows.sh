#!/usr/bin/env bash
# Cross-builds ortops.dll for 64-bit Windows and tests it under Wine in ONNX Runtime's own
# Windows builds (the MSVC-built onnxruntime.dll), the oldest and the newest supported.
#
#   scripts/test_windows.sh [--junit-dir DIR]
#   scripts/test_windows.sh --check     # says what is missing (nothing: exit status 0)
#
# Needs Debian's MinGW-w64 toolchain, Wine and GoogleTest's sources
#   apt-get install g++-mingw-w64-x86-64-posix wine64 googletest
# and what scripts/setup.sh puts in .deps/ once they are installed: the ONNX Runtime headers
# and the two Windows runtimes pinned in deps/versions.env (.deps/onnxruntime-windows/), plus
# the main environment (.venv), which gives Linux's results to compare with.
#
# In build/windows/: the cross build (build/, toolchain cmake/x86_64-w64-mingw32.cmake, tests
# included, GoogleTest compiled for Windows; a second run only rebuilds what changed), the
# Wine prefix (wine/), the saved cases and each run's outputs. Steps:
#   1. ctest of the build: the DLL imports system DLLs only, exports RegisterCustomOps alone
#      (tests/cpp/check_windows_dll.cmake), and the per-level objects keep their symbols;
#      its op manifest equals the Linux build's;
#   2. for each runtime and each instruction-set level this CPU has (ORTOPS_ISA): the C++
#      tests (tests/cpp), and every op's one-node models compared with Linux's results
#      (tests/windows/cases.py, run by tests/cpp/case_runner.cc);
#   3. the Windows wheel and the CMake package used from a MinGW program
#      (tests/python/test_wheel.py, tests/python/test_cpp_package.py: their windows tests).
# With --junit-dir, JUnit reports of every step go there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=../deps/versions.env
source deps/versions.env
WORK="$ROOT/build/windows"
PY="$ROOT/.venv/bin/python"
GTEST_SOURCE=${ORTOPS_GTEST_SOURCE_DIR:-/usr/src/googletest}
RUNTIMES=("$ORT_WINDOWS_OLDEST_JAR_VERSION" "$ORT_WINDOWS_NEWEST_WHEEL_VERSION")
log() { printf '[windows %ss] %s\n' "$SECONDS" "$*" >&2; }
quiet() { sed '/^Failed to create DXGI factory/d'; }  # ONNX Runtime 1.31 looking for GPUs under Wine

# The first thing this machine lacks for the suite, in a few words; nothing when it has all.
missing() {
  local tool version
  for tool in x86_64-w64-mingw32-g++-posix x86_64-w64-mingw32-objdump x86_64-w64-mingw32-dlltool cmake ninja; do
    command -v "$tool" >/dev/null || { echo "no $tool: apt-get install g++-mingw-w64-x86-64-posix"; return; }
  done
  command -v wine64 >/dev/null || [[ -x /usr/lib/wine/wine64 ]] || { echo "no Wine: apt-get install wine64"; return; }
  [[ -f "$GTEST_SOURCE/CMakeLists.txt" ]] || { echo "no GoogleTest sources: apt-get install googletest"; return; }
  [[ -x "$PY" ]] || { echo "no main environment .venv: scripts/setup.sh"; return; }
  for version in "${RUNTIMES[@]}"; do
    [[ -f ".deps/onnxruntime-windows/$version/onnxruntime.dll" ]] \
      || { echo "no ONNX Runtime $version for Windows in .deps: scripts/setup.sh, with the above installed"; return; }
  done
}
if [[ "${1:-}" == "--check" ]]; then
  reason=$(missing)
  [[ -z "$reason" ]] || { echo "$reason"; exit 1; }
  exit 0
fi
reason=$(missing)
[[ -z "$reason" ]] || { log "$reason"; exit 2; }
JUNIT_DIR=""
if [[ "${1:-}" == "--junit-dir" ]]; then
  JUNIT_DIR=$(realpath "$2")
  mkdir -p "$JUNIT_DIR"
fi

# The tests import OrtGetApiBase from onnxruntime.dll, by name: one import library serves
# every runtime, and WINEPATH picks the runtime at run time.
ORT_IMPORT="$WORK/onnxruntime-import"
if [[ ! -f "$ORT_IMPORT/libonnxruntime.dll.a" ]]; then
  mkdir -p "$ORT_IMPORT"
  printf 'LIBRARY onnxruntime.dll\nEXPORTS\n  OrtGetApiBase\n' >"$ORT_IMPORT/onnxruntime.def"
  x86_64-w64-mingw32-dlltool --def "$ORT_IMPORT/onnxruntime.def" --output-lib "$ORT_IMPORT/libonnxruntime.dll.a"
fi

log "cross build (x86_64-w64-mingw32)"
BUILD="$WORK/build"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_TOOLCHAIN_FILE=$ROOT/cmake/x86_64-w64-mingw32.cmake" \
  "-DORTOPS_ORT_INCLUDE_DIR=$ROOT/.deps/onnxruntime/include" "-DORTOPS_ORT_LIBRARY_DIR=$ORT_IMPORT" \
  "-DORTOPS_GTEST_SOURCE_DIR=$GTEST_SOURCE" "-DORTOPS_MIN_ORT_API=$ORTOPS_MIN_ORT_API" >/dev/null
cmake --build "$BUILD" -j2 >&2

log "checks of the DLL and the per-level objects"
ctest --test-dir "$BUILD" --output-on-failure ${JUNIT_DIR:+--output-junit "$JUNIT_DIR/ctest-windows.xml"}
if [[ -f build/ortops_ops.json ]]; then
  "$PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
    build/ortops_ops.json "$BUILD/ortops_ops.json" || { log "the Windows op manifest differs from build/ortops_ops.json"; exit 1; }
fi

log "one-node models of every op, with Linux's results at each level (tests/windows/cases.py)"
rm -rf "$WORK/cases" "$WORK/runs"
levels=$("$PY" tests/python/isa_levels.py)
top=${levels##* }
for level in $levels; do
  ORTOPS_ISA=$level "$PY" tests/windows/cases.py make "$WORK/cases"
done
failed=0
for version in "${RUNTIMES[@]}"; do
  export WINEPATH="$ROOT/.deps/onnxruntime-windows/$version"
  for level in $levels; do
    label="$version-$level"
    log "ONNX Runtime $version (Windows), ORTOPS_ISA=$level"
    # The concurrent first registrations of RegistersFromManyThreads need a fresh process.
    # GoogleTest takes a path without a drive letter as relative: Wine's drive Z: is the Unix root.
    alone=Session.RegistersFromManyThreadsIntoManySessions
    for filter in "$alone" "-$alone"; do
      part=$([[ "$filter" == -* ]] && echo rest || echo threads)
      ORTOPS_ISA=$level ORTOPS_EXPECT_ISA=$top scripts/wine.sh "$BUILD/tests/cpp/ortops_tests.exe" \
        "--gtest_filter=$filter" --gtest_brief=1 \
        ${JUNIT_DIR:+"--gtest_output=xml:Z:$JUNIT_DIR/gtest-windows-$label-$part.xml"} 2>&1 | quiet || failed=1
    done
    ORTOPS_ISA=$level scripts/wine.sh "$BUILD/tests/cpp/ortops_case_runner.exe" "$BUILD/ortops.dll" \
      "$WORK/cases" "$WORK/runs/$label" 2>&1 | quiet || true  # cases.py reports a case it stopped at
    "$PY" tests/windows/cases.py compare "$WORK/cases" "$WORK/runs/$label" --level "$level" --label "$label" \
      ${JUNIT_DIR:+--junit "$JUNIT_DIR/windows-cases-$label.xml"} || failed=1
  done
done

log "the Windows wheel, and examples/cpp built by MinGW-w64 against the CMake package (pytest)"
ORTOPS_WINDOWS_BUILD_DIR="$BUILD" WINEPATH="$ROOT/.deps/onnxruntime-windows/${RUNTIMES[-1]}" \
  "$PY" -m pytest -q -p no:cacheprovider tests/python/test_wheel.py tests/python/test_cpp_package.py -k windows \
  ${JUNIT_DIR:+--junitxml "$JUNIT_DIR/pytest-windows.xml"} || failed=1
log "done"
exit "$failed"
