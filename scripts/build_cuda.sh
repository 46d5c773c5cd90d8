#!/usr/bin/env bash
# Builds the CUDA build of the library: <build>/cuda/libortops.so and its manifest, with every
# node's CPU kernels and, for the nodes the op table marks OnCuda, device kernels registered
# for CUDAExecutionProvider (cmake/cuda.cmake). No GPU is needed to build it.
#
#   scripts/build_cuda.sh [ARCHITECTURES [BUILD_DIR]]
#
# ARCHITECTURES is a CMAKE_CUDA_ARCHITECTURES list; by default ORTOPS_CUDA_ARCHITECTURES from
# deps/versions.env, the ortops-gpu wheel's (Turing to Hopper as machine code, plus Hopper's
# PTX). BUILD_DIR defaults to build/cuda-release. The toolchain is .venv-cuda's (nvcc, the
# CUDA runtime and CCCL from PyPI, deps/python-cuda.txt) and the ONNX Runtime headers are
# .deps' (both put there by scripts/setup.sh). Prints the library's path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../deps/versions.env
source "$ROOT/deps/versions.env"
architectures=${1:-$ORTOPS_CUDA_ARCHITECTURES}
build=${2:-$ROOT/build/cuda-release}
log() { printf '[build_cuda] %s\n' "$*" >&2; }

nvcc=$(ls "$ROOT"/.venv-cuda/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n 1)
[[ -n "$nvcc" ]] || { log "no nvcc in .venv-cuda: run scripts/setup.sh first"; exit 2; }
cuda=$(dirname "$(dirname "$nvcc")")
include=${ORTOPS_ORT_INCLUDE_DIR:-$ROOT/.deps/onnxruntime/include}
[[ -f "$include/onnxruntime_c_api.h" ]] || { log "no ONNX Runtime headers in $include: run scripts/setup.sh first"; exit 2; }

log "configuring $build for CUDA architectures $architectures"
"$ROOT/.venv-cuda/bin/cmake" -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DORTOPS_BUILD_TESTS=OFF \
  "-DORTOPS_ORT_INCLUDE_DIR=$include" "-DORTOPS_MIN_ORT_API=$ORTOPS_MIN_ORT_API" \
  "-DORTOPS_CCCL_INCLUDE_DIR=$cuda/include/cccl" -DORTOPS_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" \
  "-DCMAKE_CUDA_ARCHITECTURES=$architectures" "-DORTOPS_CUDA_UNITY_GROUPS=$(nproc)" >/dev/null
start=$SECONDS
"$ROOT/.venv-cuda/bin/cmake" --build "$build" --target ortops_cuda >&2
log "built $build/cuda/libortops.so in $((SECONDS - start)) s ($(du -k "$build/cuda/libortops.so" | cut -f1) KiB)"
echo "$build/cuda/libortops.so"
