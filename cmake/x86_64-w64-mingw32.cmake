# Cross-compiles for 64-bit Windows with Debian's MinGW-w64 toolchain, POSIX thread model
# (apt-get install g++-mingw-w64-x86-64-posix; wine64 to run what it builds):
#
#   cmake -S . -B build/windows/build -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/x86_64-w64-mingw32.cmake ...
#
# scripts/test_windows.sh does the whole cross build and test, scripts/build_wheel.sh windows
# the wheel. Programs built here (the op manifest tool at build time, the tests) run through
# Wine when it is installed (scripts/wine.sh, which keeps its prefix in build/windows/wine).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)

# The -posix compilers: std::thread and std::mutex over winpthreads, which the library links
# statically (CMakeLists.txt), like libstdc++ and libgcc.
set(ORTOPS_CROSS_PREFIX x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${ORTOPS_CROSS_PREFIX}-gcc-posix)
set(CMAKE_CXX_COMPILER ${ORTOPS_CROSS_PREFIX}-g++-posix)
set(CMAKE_RC_COMPILER ${ORTOPS_CROSS_PREFIX}-windres)

# Programs are linked statically too, so that they run under Wine (or on Windows) with no
# MinGW runtime DLL (libstdc++-6.dll, libwinpthread-1.dll) on the loader's path.
set(CMAKE_EXE_LINKER_FLAGS_INIT -static)

set(CMAKE_FIND_ROOT_PATH "/usr/${ORTOPS_CROSS_PREFIX}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

get_filename_component(ORTOPS_WINE "${CMAKE_CURRENT_LIST_DIR}/../scripts/wine.sh" ABSOLUTE)
if(EXISTS "${ORTOPS_WINE}")
  find_program(ORTOPS_WINE64 wine64 PATHS /usr/lib/wine)  # where Debian's wine64 puts it
  if(ORTOPS_WINE64)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${ORTOPS_WINE}")
  endif()
endif()
