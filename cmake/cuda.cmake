# The CUDA build (ORTOPS_CUDA=ON; built by scripts/build_cuda.sh): cuda/libortops.so, with
# every node's CPU kernels and, for the nodes the op table marks OnCuda, their device
# kernels (csrc/ops/*/*.cu, compiled by nvcc) registered for CUDAExecutionProvider. Not built
# by default (target ortops_cuda). The CUDA runtime is linked statically, so the library
# needs no CUDA library of its own and loads, running its CPU kernels, where there is no GPU
# or driver. CMAKE_CUDA_ARCHITECTURES picks the GPUs (scripts/build_cuda.sh says which).
#
# C++20 for nvcc needs CMake 3.26 or newer (deps/python-cuda.txt pins one beside nvcc).
cmake_minimum_required(VERSION 3.26)
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
set(CMAKE_CUDA_VISIBILITY_PRESET hidden)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)

add_library(ortops_cuda SHARED EXCLUDE_FROM_ALL
  csrc/register.cc csrc/op_table.cc csrc/device/runtime_cuda.cu ${ORTOPS_DEVICE_SOURCES})
target_link_libraries(ortops_cuda PRIVATE ortops_ops)
# nvcc spends about 20 s on every translation unit before it reaches our code (CCCL's headers,
# preprocessed twice, through cudafe++, cicc and the host compiler), more than most of our
# files take themselves; so the .cu files are compiled as ORTOPS_CUDA_UNITY_GROUPS unity files
# (CMake's unity build, round robin), about one per core, which takes a 2-core machine 3
# minutes instead of 10. Each .cu file still compiles alone in the emulated device's build
# (g++, one file each), which keeps them self-contained. 0: one translation unit per file.
set(ORTOPS_CUDA_UNITY_GROUPS 2 CACHE STRING "Unity files the CUDA build's .cu files are compiled as (0: none)")
if(ORTOPS_CUDA_UNITY_GROUPS GREATER 0)
  set_target_properties(ortops_cuda PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  set(cuda_source_index 0)
  foreach(source IN LISTS ORTOPS_DEVICE_SOURCES ITEMS csrc/device/runtime_cuda.cu)
    math(EXPR group "${cuda_source_index} % ${ORTOPS_CUDA_UNITY_GROUPS}")
    set_source_files_properties("${source}" TARGET_DIRECTORY ortops_cuda PROPERTIES UNITY_GROUP "device${group}")
    math(EXPR cuda_source_index "${cuda_source_index} + 1")
  endforeach()
endif()
target_include_directories(ortops_cuda PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include")
if(ORTOPS_CCCL_INCLUDE_DIR)  # else the toolkit's own copy of CCCL
  target_include_directories(ortops_cuda SYSTEM BEFORE PRIVATE "${ORTOPS_CCCL_INCLUDE_DIR}")
endif()
target_compile_definitions(ortops_cuda PRIVATE ORTOPS_DEVICE_PATHS=1)
target_compile_options(ortops_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${ORTOPS_WARNINGS}>
  # constexpr functions (float16 conversions, std::min) are callable on the device; no
  # multiply-add is contracted, so device arithmetic rounds as the CPU kernels' does.
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr --fmad=false -Werror=all-warnings -Xcompiler=-ffp-contract=off>)
ortops_link_as_custom_op_library(ortops_cuda)
set_target_properties(ortops_cuda PROPERTIES OUTPUT_NAME ortops LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/cuda")
if(ORTOPS_GLIBC_COMPAT)
  # The static CUDA runtime's glibc functions too (csrc/compat/glibc_compat_cuda.cc).
  # (One LIBRARIES list per target: CMake would drop a second --push-state group's options.)
  ortops_bind_old_glibc(ortops_cuda csrc/compat/glibc_compat.cc ${ORTOPS_GLIBC_WRAPPED})
  ortops_bind_old_glibc(ortops_cuda csrc/compat/glibc_compat_cuda.cc
    dlopen dlmopen dlclose dlerror dlsym dlvsym
    pthread_create pthread_detach pthread_join pthread_kill pthread_condattr_setpshared pthread_mutex_trylock
    pthread_mutexattr_init pthread_mutexattr_destroy pthread_mutexattr_setpshared pthread_mutexattr_settype
    pthread_rwlock_init pthread_rwlock_destroy pthread_rwlock_tryrdlock pthread_rwlock_trywrlock
    pthread_rwlock_timedrdlock pthread_rwlock_timedwrlock pthread_rwlockattr_init pthread_rwlockattr_destroy
    pthread_rwlockattr_setpshared pthread_spin_init pthread_spin_destroy pthread_spin_lock pthread_spin_trylock
    pthread_spin_unlock sem_init sem_destroy sem_post sem_wait sem_trywait sem_timedwait shm_open shm_unlink fstat64
    LIBRARIES libpthread.so.0 libdl.so.2 librt.so.1)
endif()
# Its manifest beside it, where the Python package looks (ortops.ops(), library_providers()).
add_custom_command(TARGET ortops_cuda POST_BUILD
  COMMAND ortops_manifest --cuda-build > "${CMAKE_BINARY_DIR}/cuda/ortops_ops.json"
  COMMENT "Writing the CUDA build's op manifest")
