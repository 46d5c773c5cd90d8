#!/usr/bin/env bash
# The GPU checks of the CUDA build: everything CI cannot run, run on a machine with an NVIDIA
# GPU, nvcc (13), CMake, ninja and a Python with torch, torchvision, onnx, onnxscript and
# pytest (the project's lent GPU machine has all of these but onnxruntime-gpu, and reaches no
# package registry).
#
#   scripts/test_gpu.sh --stage [PART_MB]   here, with network: download the pinned
#       onnxruntime-gpu wheel (deps/python-ort-gpu.txt) and split it into .carry/0, .carry/1, ...
#       (git-ignored), each small enough to travel to the GPU machine with one call
#   scripts/test_gpu.sh --receive K [--build]   there: keep part K (from .carry/K) in
#       /tmp/ortops-stage; with --build (part 0, which also carries the ONNX Runtime headers),
#       start the CUDA build in its own session, so that it runs while the other parts travel
#   scripts/test_gpu.sh [--quick]          there: reassemble and install onnxruntime-gpu (or use
#       one already importable), build cuda/libortops.so for the GPU at hand on all cores (or
#       wait for the build --build started), then
#         1. every ONNX Runtime-level test with every node on CUDAExecutionProvider alone
#            (ORTOPS_TEST_PROVIDERS: a node ONNX Runtime would place on the CPU fails its test),
#            against the same references and errors as on the CPU;
#         2. tests/python/cuda: the CUDA build's facts, a whole model whose custom nodes all run
#            on the GPU with no copy between them, several sessions and threads on one GPU;
#         3. compute-sanitizer memcheck and racecheck over tests/python/cuda and the compat files;
#         4. the CUDA benchmarks (benchmarks/bench_cuda.py, then whole models:
#            benchmarks/bench_cuda_models.py);
#       and writes its logs, the JUnit files and the benchmark's JSON to $OUT (or build/gpu-results).
#       --quick skips 3 (racecheck alone can take longer than a session's device time); --bench
#       runs 4 alone (a round that measures a kernel change). A round after a change to a few
#       kernels can narrow 1 and 4: ORTOPS_GPU_SUITE="tests/python/ort/test_nms.py ..." (the
#       files of step 1) and ORTOPS_GPU_BENCH_ONLY=NMS,NonMax (bench_cuda.py's --only; the whole-model
#       benchmark is then left out). ORTOPS_GPU_OPTIMIZE_BENCH="faster_rcnn ..." adds `ortops
#       optimize`'s whole-model benchmark on the CUDA provider for those families (step 4).
#
# With the project's device tool (as on 2026-11-26, on an H200): `--stage` here, then five
# calls back to back, each carrying .carry/K: `bash scripts/test_gpu.sh --receive 0 --build`,
# `--receive 1` to `--receive 3`, and last `bash scripts/test_gpu.sh --receive 4 && bash
# scripts/test_gpu.sh --quick`. The machine stays warm 30 s between calls, and what /tmp holds
# is lost when it goes back. Device time is short (15 minutes a session, starts and transfers
# included). One round took about 2.5 minutes there: a minute for the start and transfers,
# 45 s for the build, 35 s for the suite (8 processes), 10 s for tests/python/cuda, 30 s for
# the benchmark. That leaves time for a few rounds of fixes. The benchmark's JSON (in $OUT) is
# the record the docs are generated from: copy a full run's bench-cuda.json over
# docs/data/bench-cuda.json, run scripts/gen_perf_docs.py --readme, and write the date, the
# device and what the tests found in docs/guide/gpu.md's Status section.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
STAGE=/tmp/ortops-stage
log() { printf '[test_gpu] %s\n' "$*" >&2; }
pin() { sed -n "s/^$1==//p" deps/python-ort-gpu.txt; }

if [[ "${1:-}" == --stage ]]; then
  part_mb=${2:-56}
  version=$(pin onnxruntime-gpu)
  dest=.deps/onnxruntime-gpu-cp312
  mkdir -p "$dest"
  # The GPU machine's Python is 3.12 (a cp312 wheel); its platform manylinux_2_28.
  .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 -d "$dest" "onnxruntime-gpu==$version"
  wheel=$(ls "$dest"/onnxruntime_gpu-"$version"-cp312-*.whl)
  grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
  rm -rf .carry && mkdir -p .carry/parts
  split -b "${part_mb}m" -d -a 2 "$wheel" .carry/parts/part-
  parts=(.carry/parts/part-*)
  for i in "${!parts[@]}"; do mkdir -p ".carry/$i" && mv "${parts[$i]}" ".carry/$i/"; done
  last=$((${#parts[@]} - 1))
  (cd "$dest" && sha256sum "$(basename "$wheel")") >".carry/$last/SHA256SUM"
  # The pinned ONNX Runtime headers (git-ignored, so not in the working tree there) travel too.
  cp -r .deps/onnxruntime/include .carry/0/ort-include
  rmdir .carry/parts
  log "split $(basename "$wheel") into ${#parts[@]} parts: .carry/0 .. .carry/$last"
  exit 0
fi

# The CUDA build for the GPU at hand, on all cores (one unity file per core). The CPU library
# too: the benchmark's status quo (the same node placed on the CPU).
# It builds in a copy of the sources in /tmp, updated file by file where the content changed: the
# device tool copies the working tree afresh with each call, and new times on every source would
# make ninja rebuild everything that a build between calls already built.
BUILD_SRC=/tmp/ortops-src
build_for_gpu() {
  "${PYTHON:-python3}" - "$ROOT" "$BUILD_SRC" <<'EOF'
import filecmp, shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for path in src.rglob("*"):
    rel = path.relative_to(src)
    if rel.parts[0] in {"build", ".carry", ".git", ".deps"} or rel.parts[0].startswith(".venv") or not path.is_file():
        continue
    target = dst / rel
    if not target.is_file() or not filecmp.cmp(path, target, shallow=False):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
EOF
  cd "$BUILD_SRC"
  local ort_include=${ORTOPS_ORT_INCLUDE_DIR:-$ROOT/.deps/onnxruntime/include}
  [[ -f "$ort_include/onnxruntime_c_api.h" ]] || ort_include=$STAGE/ort-include  # staged by --stage
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DORTOPS_BUILD_TESTS=OFF \
    -DORTOPS_ORT_INCLUDE_DIR="$ort_include" -DORTOPS_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${arch}-real" \
    "-DORTOPS_CUDA_UNITY_GROUPS=$(nproc)" >/dev/null
  cmake --build build/gpu --target ortops_cuda ortops ortops_manifest_json -j "$(nproc)"
  cd "$ROOT"
  log "built for sm_$arch"
}

if [[ "${1:-}" == --receive ]]; then
  mkdir -p "$STAGE" && cp -r ".carry/$2"/* "$STAGE/"
  log "part $2 kept in $STAGE ($(ls "$STAGE" | wc -l) files)"
  # With the first part (it holds the headers) the build starts in its own session, so that it
  # outlives this call and runs while the other parts travel.
  if [[ "${3:-}" == --build ]]; then
    setsid nohup bash -c "source '$ROOT/scripts/test_gpu.sh' --define-only; build_for_gpu" \
      >"$STAGE/build.log" 2>&1 </dev/null &
    echo $! >"$STAGE/build.pid"
    log "build started in the background ($STAGE/build.log)"
  fi
  exit 0
fi
[[ "${1:-}" == --define-only ]] && return 0

QUICK=0 BENCH_ONLY=0
[[ "${1:-}" == --quick ]] && QUICK=1
[[ "${1:-}" == --bench ]] && BENCH_ONLY=1
OUT=${OUT:-$ROOT/build/gpu-results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
exec > >(tee "$OUT/test_gpu.log") 2>&1
started=$(date +%s)
elapsed() { echo "$(($(date +%s) - started)) s"; }

# --- ONNX Runtime for the GPU -------------------------------------------------------------
if ! "$PY" -c 'import onnxruntime, sys; sys.exit("CUDAExecutionProvider" not in onnxruntime.get_available_providers())' 2>/dev/null; then
  if [[ -f "$STAGE/SHA256SUM" ]]; then
    wheel="$STAGE/$(awk '{print $2}' "$STAGE/SHA256SUM")"
    cat "$STAGE"/part-* >"$wheel"
    (cd "$STAGE" && sha256sum -c SHA256SUM)
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target /tmp/ortops-ort-gpu "$wheel"
  fi
  export PYTHONPATH="/tmp/ortops-ort-gpu${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" - <<'EOF'
import onnxruntime as ort

# onnxruntime-gpu finds the CUDA libraries of the nvidia-* Python packages this way.
if hasattr(ort, "preload_dlls"):
    ort.preload_dlls()
print("onnxruntime", ort.__version__, ort.get_available_providers())
assert "CUDAExecutionProvider" in ort.get_available_providers(), "no CUDA execution provider"
EOF
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
log "ONNX Runtime ready ($(elapsed))"

# --- The CUDA build ---------------------------------------------------------------------------
if [[ -f "$STAGE/build.pid" ]]; then
  while kill -0 "$(cat "$STAGE/build.pid")" 2>/dev/null; do sleep 2; done
  tail -n 5 "$STAGE/build.log"
fi
build_for_gpu  # nothing left to do when the background build got there
LIBRARY="$BUILD_SRC/build/gpu/cuda/libortops.so"
log "built $LIBRARY ($(elapsed))"

export ORTOPS_LIBRARY="$LIBRARY" ORTOPS_CUDA_LIBRARY="$LIBRARY" ORTOPS_CPU_LIBRARY="$BUILD_SRC/build/gpu/libortops.so"
export PYTHONPATH="$ROOT/python:$PYTHONPATH"
failed=0
# A hung kernel must not eat the session's device time: pytest-timeout ends that test.
PYTEST=("$PY" -m pytest -q -p no:cacheprovider --timeout 400 -rfE)

if [[ $BENCH_ONLY == 0 ]]; then
# --- 1. Every ONNX Runtime-level test, every node on the GPU ----------------------------------
read -r -a selection <<<"${ORTOPS_GPU_SUITE:-tests/python/ort}"
# The tests that are about the CPU library itself (instruction-set levels, its thread pool).
deselect=(--ignore=tests/python/ort/test_isa.py)
ORTOPS_FUZZ_JOBS=4 ORTOPS_TEST_PROVIDERS=CUDAExecutionProvider "${PYTEST[@]}" -n 8 --maxfail 200 "${selection[@]}" "${deselect[@]}" \
  --junitxml "$OUT/pytest-cuda-ep.xml" || failed=1
log "suite on CUDAExecutionProvider done ($(elapsed))"

# --- 2. The CUDA build, a whole model, sessions and threads -----------------------------------
# (Not the glibc check: this build links against the GPU machine's glibc, not the pinned
# toolchain's that CI's wheel is built with.)
"${PYTEST[@]}" tests/python/cuda --junitxml "$OUT/pytest-cuda.xml" \
  --deselect tests/python/cuda/test_cuda_build.py::test_needs_no_glibc_newer_than_the_wheel_tag || failed=1

# --- 3. compute-sanitizer ---------------------------------------------------------------------
if [[ $QUICK == 0 ]]; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 --target-processes all \
      "${PYTEST[@]}" tests/python/cuda tests/python/ort/test_compat_files.py >"$OUT/sanitizer-$tool.log" 2>&1 \
      || { failed=1; log "compute-sanitizer $tool found errors: $OUT/sanitizer-$tool.log"; }
    tail -n 3 "$OUT/sanitizer-$tool.log"
  done
  log "compute-sanitizer done ($(elapsed))"
fi
fi  # BENCH_ONLY

# --- 4. The CUDA benchmark --------------------------------------------------------------------
PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_cuda.py --profile --only "${ORTOPS_GPU_BENCH_ONLY:-}" \
  --json "$OUT/bench-cuda.json" || failed=1
if [[ -z "${ORTOPS_GPU_BENCH_ONLY:-}" ]]; then
  PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_cuda_models.py --json "$OUT/bench-cuda-models.json" || failed=1
fi
# `ortops optimize` on whole models, original and optimized file on the CUDA provider, for the
# families ORTOPS_GPU_OPTIMIZE_BENCH names (bench_optimize.py's function names, e.g.
# "faster_rcnn mask_rcnn": the torchvision ones need nothing beyond torchvision).
for family in ${ORTOPS_GPU_OPTIMIZE_BENCH:-}; do
  PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_optimize.py --cuda --only "$family" --no-profile \
    --json "$OUT/bench-optimize-$family.json" || failed=1
done
log "all done in $(elapsed): $([[ $failed == 0 ]] && echo passed || echo FAILED)"
exit "$failed"
