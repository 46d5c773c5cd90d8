#!/usr/bin/env bash
# Runs every test of ortops on a fresh or prepared machine: set-up (scripts/setup.sh), then,
# as suites side by side (scripts/run_suites.py), format and lint checks, the documentation
# site built in strict mode, the C++ tests in a real ONNX Runtime (the session tests again
# under qemu-x86_64 as CPUs without AVX and without AVX-512, and all again cross-built for
# ARM64 under qemu, where the cross toolchain is installed), the Windows DLL cross-built with
# MinGW-w64 and tested under Wine in ONNX Runtime's
# own Windows builds (where MinGW-w64 and Wine are installed; scripts/test_windows.sh), the
# Python tests in the main environment, the tests of the per-level loops again
# at each lower instruction-set level this CPU has (ORTOPS_ISA), the ONNX-Runtime-level Python
# tests again with the oldest supported runtime, and the C++ and ONNX-Runtime-level tests again
# against a build with AddressSanitizer and UndefinedBehaviorSanitizer
# (scripts/test_sanitizers.sh, every level). Ends with one line that totals every suite.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# The emulators and the cross toolchains of the qemu, ARM64 and Windows suites come from
# Debian's packages, installed here where this is a Debian machine and we are root (as on CI);
# elsewhere, or with ORTOPS_TEST_APT=0, those suites say they were skipped.
test_tools=(qemu-user g++-aarch64-linux-gnu googletest g++-mingw-w64-x86-64-posix wine64)
missing_tools() {  # not a pipeline into grep: under pipefail dpkg-query's failure would win
  local tool
  for tool in "${test_tools[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$tool" 2>/dev/null) == installed ]] || echo "$tool"
  done
}
if [[ "${ORTOPS_TEST_APT:-1}" != 0 && $(id -u) == 0 ]] && command -v apt-get >/dev/null \
  && [[ -n $(missing_tools) ]]; then
  echo "[test] apt-get install ${test_tools[*]} (for the qemu, ARM64 and Windows suites; ORTOPS_TEST_APT=0 skips this)"
  apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${test_tools[@]}" >/dev/null; }
  apt_install || { apt-get update -q >/dev/null && apt_install; } \
    || echo "[test] apt-get failed: the qemu, ARM64 and Windows suites will say they were skipped"
fi
bash scripts/setup.sh --with-ray  # the Ray example's own environment too (tests/python/test_ray_example.py)

REPORTS="$ROOT/build/test-reports"
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
# The slow references' results, shared by the suites that run the same tests
# (tests/python/references.py, cached): fresh for every run.
export ORTOPS_REFERENCE_CACHE="$ROOT/build/reference-cache"
rm -rf "$ORTOPS_REFERENCE_CACHE"
PY=.venv/bin/python
PYTEST="-m pytest -q -p no:cacheprovider"
lower_levels=$($PY tests/python/isa_levels.py | awk '{$NF=""; print}')
widest_level=$($PY tests/python/isa_levels.py | awk '{print $NF}')
per_level_tests=$($PY tests/python/isa_levels.py --tests)
have_sanitizers=$([[ -f "$(${CXX:-c++} -print-file-name=libasan.so)" ]] && echo 1 || true)
have_qemu_x86=$([[ "$(uname -m)" == x86_64 ]] && command -v qemu-x86_64 >/dev/null && echo 1 || true)
have_arm64=$(command -v aarch64-linux-gnu-g++ >/dev/null && command -v qemu-aarch64 >/dev/null \
  && [[ -f /usr/src/googletest/CMakeLists.txt && -f .deps/onnxruntime/lib/onnxruntime.jar ]] && echo 1 || true)
windows_missing=$(scripts/test_windows.sh --check || true)

# The suites, in the order to start them (the longest chain, the sanitizer build and its
# Python tests, early); scripts/run_suites.py runs as many at a time as there are cores (each
# keeps about one busy) and prints each one's output when it ends. torch's OpenMP threads wait
# passively, as the tests' sessions do (tests/python/ortest.py), so that a suite's idle threads
# take no core from the one beside it.
suites() {
  cat <<EOS
format-and-lint: .venv/bin/clang-format --dry-run --Werror \$(git ls-files 'csrc/*.cc' 'csrc/*.cu' 'csrc/*.h' 'tests/cpp/*.cc' 'tests/cpp/*.h' 'include/*.h' 'examples/cpp/*.cc') && .venv/bin/ruff format --check python tests examples scripts benchmarks setup.py && .venv/bin/ruff check python tests examples scripts benchmarks setup.py
# The documentation site (mkdocs.yml) in strict mode: a broken link, a page left out of the nav
# or a missing anchor fails it. It needs no network, no compiled library and no torch. Not
# --quiet: that drops the warnings before strict mode counts them, and the build passes.
docs-site: NO_MKDOCS_2_WARNING=1 $PY -m mkdocs build --strict
ctest: cd build && ctest --output-on-failure --output-junit "$REPORTS/ctest.xml" -j2
EOS
  # The library must pick the level each CPU model has and run without an instruction above
  # it (an illegal instruction stops the run). qemu 7 emulates no AVX-512: that level runs on
  # this machine's own CPU, when it has it, in every other suite. (Haswell less the features
  # qemu's TCG lacks, which it would warn about at every thread.)
  if [[ -n "$have_qemu_x86" ]]; then
    for model in Westmere:sse2 Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm:avx2; do
      echo "qemu-x86-${model#*:}: ORTOPS_EXPECT_ISA=${model#*:} qemu-x86_64 -cpu ${model%:*} build/tests/cpp/ortops_tests" \
        "--gtest_filter='Isa.*:Session.*' --gtest_brief=1 --gtest_output=xml:$REPORTS/gtest-qemu-${model#*:}.xml"
    done
  fi
  [[ -n "$have_sanitizers" ]] && echo "asan-build: scripts/test_sanitizers.sh --step build"
  # Early, so that the references it computes are in the cache (tests/python/references.py)
  # when the other suites of tests/python/ort need them.
  echo "python-main-ort: $PY $PYTEST tests/python/ort --junitxml $REPORTS/pytest-main-ort.xml"
  # The CUDA build (nvcc: long, so early), compiled for one GPU architecture (deps/versions.env);
  # without a GPU it is checked for what it links and that it loads and runs its CPU kernels,
  # in the newest and the oldest supported runtime.
  echo "cuda-build: .venv-cuda/bin/cmake --build build --target ortops_cuda" \
    "&& $PY $PYTEST tests/python/cuda --junitxml $REPORTS/pytest-cuda-build.xml" \
    "&& .venv-ort-min/bin/python $PYTEST tests/python/cuda -k 'not gpu_wheel' --junitxml $REPORTS/pytest-cuda-build-ort-min.xml"
  # ARM64 before the main Python tests, which also build examples/cpp against its cross build.
  [[ -n "$have_arm64" ]] && echo "arm64: scripts/test_arm64.sh --junit $REPORTS/ctest-arm64.xml"
  if [[ -n "$have_sanitizers" ]]; then
    # The whole of tests/python/ort (the fuzz test included) against the AddressSanitizer +
    # UndefinedBehaviorSanitizer build, at the widest level: the longest suite, so it starts
    # as soon as its build is done. The per-level tests at each lower level and the C++ tests
    # against that build follow below.
    echo "asan-python after asan-build: ORTOPS_ISA=$widest_level scripts/test_sanitizers.sh --junit-dir $REPORTS --step python"
  fi
  echo "python-main${have_arm64:+ after arm64}: $PY $PYTEST tests/python --ignore=tests/python/ort --ignore=tests/python/cuda --junitxml $REPORTS/pytest-main.xml"
  # Cross build, C++ tests and every op's models under Wine in two Windows runtimes at each
  # level, the Windows wheel and a MinGW consumer: a few minutes, nothing waits for it.
  [[ -z "$windows_missing" ]] && echo "windows: scripts/test_windows.sh --junit-dir $REPORTS"
  if [[ -n "$have_sanitizers" ]]; then
    # The per-level tests under the sanitizers at the lowest level (SSE2) only: on a CPU with
    # AVX-512 the AVX2 loops run under them in test_isa.py's cases of every op at every level
    # (in asan-python), and all their tests in python-avx2.
    read -r lowest_level _ <<<"$lower_levels" || true
    [[ -n "$lowest_level" ]] && echo "asan-python-$lowest_level after asan-build: ORTOPS_ISA=$lowest_level" \
      "scripts/test_sanitizers.sh --junit-dir $REPORTS --step python $per_level_tests"
    echo "asan-ctest after asan-build: scripts/test_sanitizers.sh --junit-dir $REPORTS --step ctest"
    # The device path under the sanitizers: the fuzz test's random and adversarial cases of
    # every node, also as a CUDA graph's capture runs them (no data check), and the existing
    # files (at one level: the device kernels have no per-level loops).
    echo "asan-device-on-cpu after asan-build: ORTOPS_ISA=$widest_level ORTOPS_SANITIZED_LIBRARY=libortops_device_on_cpu.so" \
      "scripts/test_sanitizers.sh --junit-dir $REPORTS --step python tests/python/ort/test_fuzz.py" \
      "tests/python/ort/test_graph_capture.py tests/python/ort/test_compat_files.py"
  fi
  echo "python-ort-min: .venv-ort-min/bin/python $PYTEST tests/python/ort --junitxml $REPORTS/pytest-ort-min.xml"
  # The device path of every node (csrc/device/README.md), compiled for the host, through the
  # ONNX Runtime-level suite and the torchvision export tests, in place of the CPU kernels
  # (those of the TorchScript exporter: the dynamo exporter's graphs hold the same nodes).
  echo "device-on-cpu: ORTOPS_LIBRARY=$ROOT/build/libortops_device_on_cpu.so $PY $PYTEST tests/python/ort" \
    "tests/python/torch/test_torchvision_export.py -k 'not dynamo' --junitxml $REPORTS/pytest-device-on-cpu.xml"
  # The library runs its hot loops at the widest instruction-set level the CPU has (the main
  # suite, where test_isa.py also checks that every level returns the same bits for random
  # cases of every op); ORTOPS_ISA forces each lower one for the tests of the ops whose loops
  # are compiled per level (tests/python/isa_levels.py lists them), against the same references.
  for level in $lower_levels; do
    echo "python-$level: ORTOPS_ISA=$level $PY $PYTEST $per_level_tests --junitxml $REPORTS/pytest-isa-$level.xml"
  done
}

printf 'main environment: onnxruntime %s; oldest supported runtime: onnxruntime %s\n' \
  "$($PY -c 'import onnxruntime; print(onnxruntime.__version__)')" \
  "$(.venv-ort-min/bin/python -c 'import onnxruntime; print(onnxruntime.__version__)')"
[[ -n "$have_qemu_x86" ]] || echo "skipped: C++ session tests on older x86-64 CPUs (need an x86-64 machine with qemu-x86_64: apt-get install qemu-user)"
[[ -n "$have_arm64" ]] || echo "skipped: C++ tests on ARM64 (need g++-aarch64-linux-gnu, qemu-user and googletest:" \
  "apt-get install them; and the ONNX Runtime jar in .deps, not fetched with ORTOPS_ORT_ROOT)"
[[ -z "$windows_missing" ]] || echo "skipped: the Windows DLL under Wine ($windows_missing)"
[[ -n "$have_sanitizers" ]] || echo "skipped: sanitizers (${CXX:-c++} has no libasan: GCC with its sanitizer runtimes is needed)"
failed=0
suites | OMP_WAIT_POLICY=PASSIVE $PY scripts/run_suites.py --logs "$REPORTS/logs" || failed=1

printf '\n==== summary\n'
$PY scripts/summarize_tests.py "$REPORTS"/*.xml
exit "$failed"
