#!/usr/bin/env bash
# Cross-builds ortops for 64-bit ARM Linux and runs its C++ tests (GoogleTest, in a real ONNX
# Runtime) under qemu-aarch64.
#
#   scripts/test_arm64.sh [--junit FILE]
#
# Needs Debian's cross toolchain and user-mode qemu
#   apt-get install g++-aarch64-linux-gnu qemu-user googletest
# and what scripts/setup.sh puts in .deps/: the ONNX Runtime headers, and the ONNX Runtime jar
# from Maven Central, whose ai/onnxruntime/native/linux-aarch64/libonnxruntime.so the tests
# load. GoogleTest is compiled for aarch64 from its sources (/usr/src/googletest).
# Builds in build/arm64/ (toolchain file: cmake/aarch64-linux-gnu.cmake); a second run only
# rebuilds what changed. Overrides: ORTOPS_ORT_INCLUDE_DIR, ORTOPS_ORT_JAR, ORTOPS_GTEST_SOURCE_DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORT_INCLUDE=${ORTOPS_ORT_INCLUDE_DIR:-$ROOT/.deps/onnxruntime/include}
ORT_JAR=${ORTOPS_ORT_JAR:-$ROOT/.deps/onnxruntime/lib/onnxruntime.jar}
GTEST_SOURCE=${ORTOPS_GTEST_SOURCE_DIR:-/usr/src/googletest}
WORK="$ROOT/build/arm64"
JUNIT=""
if [[ "${1:-}" == "--junit" ]]; then
  JUNIT="$2"
fi
log() { printf '[arm64] %s\n' "$*" >&2; }

for tool in aarch64-linux-gnu-g++ aarch64-linux-gnu-nm aarch64-linux-gnu-readelf qemu-aarch64 cmake ninja unzip; do
  command -v "$tool" >/dev/null || { log "missing $tool (apt-get install g++-aarch64-linux-gnu qemu-user)"; exit 2; }
done
[[ -f "$GTEST_SOURCE/CMakeLists.txt" ]] || { log "no GoogleTest sources in $GTEST_SOURCE (apt-get install googletest)"; exit 2; }
[[ -f "$ORT_INCLUDE/onnxruntime_c_api.h" ]] || { log "no ONNX Runtime headers in $ORT_INCLUDE (scripts/setup.sh)"; exit 2; }
[[ -f "$ORT_JAR" ]] || { log "no ONNX Runtime jar at $ORT_JAR (scripts/setup.sh)"; exit 2; }

# The aarch64 runtime from the jar, re-extracted whenever the jar changes.
ORT_LIB="$WORK/onnxruntime/lib"
if [[ ! -f "$ORT_LIB/libonnxruntime.so" || "$ORT_JAR" -nt "$ORT_LIB/libonnxruntime.so" ]]; then
  log "libonnxruntime.so (linux-aarch64) from $ORT_JAR"
  rm -rf "$ORT_LIB" && mkdir -p "$ORT_LIB"
  unzip -q -j -o "$ORT_JAR" 'ai/onnxruntime/native/linux-aarch64/libonnxruntime.so' -d "$ORT_LIB"
  ln -sf libonnxruntime.so "$ORT_LIB/libonnxruntime.so.1"  # its SONAME
fi

# qemu's guest root: the toolchain's aarch64 libraries plus an ARM /proc/cpuinfo (one
# Neoverse-N1 entry per possible CPU). qemu-user 7 shows the guest the host's x86
# /proc/cpuinfo, on which ONNX Runtime's CPU detection crashes while libonnxruntime.so loads.
QEMU_ROOT="$WORK/qemu-root"
mkdir -p "$QEMU_ROOT/proc"
ln -sfn /usr/aarch64-linux-gnu/lib "$QEMU_ROOT/lib"
last_cpu=$(tr ',' '\n' </sys/devices/system/cpu/possible | sed 's/.*-//' | sort -n | tail -1)
for cpu in $(seq 0 "$last_cpu"); do
  printf 'processor\t: %d\nBogoMIPS\t: 50.00\n' "$cpu"
  printf 'Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n'
  printf 'CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n'
done >"$QEMU_ROOT/proc/cpuinfo"

log "cross build (aarch64-linux-gnu)"
cmake -S "$ROOT" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_TOOLCHAIN_FILE=$ROOT/cmake/aarch64-linux-gnu.cmake" \
  "-DORTOPS_ORT_INCLUDE_DIR=$ORT_INCLUDE" "-DORTOPS_ORT_LIBRARY_DIR=$ORT_LIB" \
  "-DORTOPS_GTEST_SOURCE_DIR=$GTEST_SOURCE" "-DORTOPS_QEMU_LD_PREFIX=$QEMU_ROOT" >/dev/null
cmake --build "$WORK/build" -j2 >&2

# The same promises as on x86-64: an AArch64 library that exports RegisterCustomOps only.
LIB="$WORK/build/libortops.so"
machine=$(aarch64-linux-gnu-readelf -h "$LIB" | sed -n 's/^ *Machine: *//p')
[[ "$machine" == "AArch64" ]] || { log "$LIB is for '$machine', not AArch64"; exit 1; }
exported=$(aarch64-linux-gnu-nm -D --defined-only "$LIB" | awk '{print $NF}')
[[ "$exported" == "RegisterCustomOps" ]] || { log "$LIB exports more than RegisterCustomOps: $exported"; exit 1; }

log "C++ tests under qemu-aarch64 (ONNX Runtime $(unzip -p "$ORT_JAR" META-INF/MANIFEST.MF 2>/dev/null \
  | sed -n 's/^Implementation-Version: *//p' | tr -d '\r' || true))"
ctest --test-dir "$WORK/build" --output-on-failure -j2 ${JUNIT:+--output-junit "$JUNIT"}
