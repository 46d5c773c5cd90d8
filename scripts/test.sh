#!/usr/bin/env bash
# Runs every test of ortops on a fresh or prepared machine: set-up (scripts/setup.sh),
# format and lint checks, the C++ tests in a real ONNX Runtime (the session tests again under
# qemu-x86_64 as CPUs without AVX and without AVX-512, and all again cross-built for ARM64
# under qemu, where the cross toolchain is installed), the Python tests in the main
# environment, the tests of the per-level loops again at each lower instruction-set level
# this CPU has (ORTOPS_ISA), the ONNX-Runtime-level Python tests again with the oldest
# supported runtime, and the C++ and ONNX-Runtime-level tests again against a build with
# AddressSanitizer and UndefinedBehaviorSanitizer (scripts/test_sanitizers.sh, every level).
# Ends with one line that totals every suite.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh

REPORTS="$ROOT/build/test-reports"
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
failed=0
step() { printf '\n==== %s\n' "$*"; }

step "format and lint"
cpp_files=$(git ls-files 'csrc/*.cc' 'csrc/*.h' 'tests/cpp/*.cc' 'tests/cpp/*.h' 'include/*.h' 'examples/cpp/*.cc')
# shellcheck disable=SC2086
.venv/bin/clang-format --dry-run --Werror $cpp_files || failed=1
.venv/bin/ruff format --check python tests examples scripts benchmarks setup.py || failed=1
.venv/bin/ruff check python tests examples scripts benchmarks setup.py || failed=1

step "C++ tests (ONNX Runtime from .deps)"
(cd build && ctest --output-on-failure --output-junit "$REPORTS/ctest.xml" -j2) || failed=1

step "C++ session tests on older x86-64 CPUs (qemu-x86_64: Westmere has no AVX, Haswell no AVX-512)"
# The library must pick the level each CPU model has and run without an instruction above
# it (an illegal instruction stops the run). qemu 7 emulates no AVX-512: that level runs on
# this machine's own CPU, when it has it, in every other step.
if [[ "$(uname -m)" == x86_64 ]] && command -v qemu-x86_64 >/dev/null; then
  # (Haswell less the features qemu's TCG lacks, which it would warn about at every thread.)
  for model in Westmere:sse2 Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm:avx2; do
    ORTOPS_EXPECT_ISA=${model#*:} qemu-x86_64 -cpu "${model%:*}" build/tests/cpp/ortops_tests \
      --gtest_filter='Isa.*:Session.*' --gtest_brief=1 --gtest_output="xml:$REPORTS/gtest-qemu-${model#*:}.xml" \
      || failed=1
  done
else
  echo "skipped: needs an x86-64 machine with qemu-x86_64 (apt-get install qemu-user)"
fi

step "C++ tests on ARM64 (aarch64 cross build, run under qemu-aarch64)"
# Before the Python tests, which also build examples/cpp against this cross build.
if command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null \
  && [[ -f /usr/src/googletest/CMakeLists.txt && -f .deps/onnxruntime/lib/onnxruntime.jar ]]; then
  scripts/test_arm64.sh --junit "$REPORTS/ctest-arm64.xml" || failed=1
else
  echo "ARM64 skipped: needs g++-aarch64-linux-gnu, qemu-user and googletest (apt-get install them)" \
    "and the ONNX Runtime jar in .deps (not fetched with ORTOPS_ORT_ROOT)"
fi

step "Python tests (onnxruntime $(.venv/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)'))"
.venv/bin/python -m pytest -q -p no:cacheprovider tests/python --junitxml "$REPORTS/pytest-main.xml" || failed=1

# The library runs its hot loops at the widest instruction-set level the CPU has (the run
# above, where test_isa.py also checks that every level returns the same bits for random
# cases of every op); ORTOPS_ISA forces each lower one for the tests of the ops whose loops
# are compiled per level (tests/python/isa_levels.py lists them), against the same references.
lower_levels=$(.venv/bin/python tests/python/isa_levels.py | awk '{$NF=""; print}')
read -r -a per_level_tests <<<"$(.venv/bin/python tests/python/isa_levels.py --tests)"
for level in $lower_levels; do
  step "ONNX-Runtime-level tests of the per-level loops at instruction-set level $level (ORTOPS_ISA=$level)"
  ORTOPS_ISA=$level .venv/bin/python -m pytest -q -p no:cacheprovider "${per_level_tests[@]}" \
    --junitxml "$REPORTS/pytest-isa-$level.xml" || failed=1
done

step "ONNX-Runtime-level tests with the oldest supported runtime ($(.venv-ort-min/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)'))"
.venv-ort-min/bin/python -m pytest -q -p no:cacheprovider tests/python/ort --junitxml "$REPORTS/pytest-ort-min.xml" \
  || failed=1

step "Sanitizers: C++ and ONNX-Runtime-level tests against an ASan + UBSan build (build/asan)"
# scripts/test_sanitizers.sh: the whole of tests/python/ort (the fuzz test included) and ctest.
if [[ -f "$(${CXX:-c++} -print-file-name=libasan.so)" ]]; then
  scripts/test_sanitizers.sh --junit-dir "$REPORTS" || failed=1
else
  echo "sanitizers skipped: ${CXX:-c++} has no libasan (GCC with its sanitizer runtimes is needed)"
fi

step "summary"
.venv/bin/python scripts/summarize_tests.py "$REPORTS"/*.xml
exit "$failed"
