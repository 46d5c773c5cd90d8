# Cross-compiles for 64-bit ARM Linux with Debian's aarch64-linux-gnu toolchain
# (apt-get install g++-aarch64-linux-gnu; qemu-user to run what it builds):
#
#   cmake -S . -B build/arm64/build -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
#
# scripts/test_arm64.sh does the whole cross build and test. Programs built here (the op
# manifest tool at build time, the tests under ctest) run through qemu-aarch64, when it is
# installed.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ORTOPS_CROSS_PREFIX aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${ORTOPS_CROSS_PREFIX}-gcc)
set(CMAKE_CXX_COMPILER ${ORTOPS_CROSS_PREFIX}-g++)

# Debian installs the target's libc and libstdc++ under /usr/aarch64-linux-gnu.
set(ORTOPS_CROSS_SYSROOT "/usr/${ORTOPS_CROSS_PREFIX}" CACHE PATH "Root of the target's libraries (qemu -L)")
set(CMAKE_FIND_ROOT_PATH "${ORTOPS_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The guest's root for qemu (-L): library and other absolute paths are looked up there first.
# scripts/test_arm64.sh passes a folder that adds an ARM /proc/cpuinfo to the sysroot's
# libraries, because qemu-user (before 8.x) shows the guest the host's x86 /proc/cpuinfo and
# ONNX Runtime's CPU detection (cpuinfo) then crashes while loading libonnxruntime.so.
set(ORTOPS_QEMU_LD_PREFIX "${ORTOPS_CROSS_SYSROOT}" CACHE PATH "qemu-aarch64 -L folder")
find_program(ORTOPS_QEMU_AARCH64 qemu-aarch64)
if(ORTOPS_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${ORTOPS_QEMU_AARCH64};-L;${ORTOPS_QEMU_LD_PREFIX}")
endif()
