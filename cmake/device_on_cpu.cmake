# libortops_device_on_cpu.so: the emulated device. The device path of every op (its .cu
# files, through one-line wrappers that the host compiler takes as C++) compiled with
# Thrust's CPP backend, and registered for the CPU execution provider under the same domains
# and names, in place of the CPU kernels (those of ops without a device path stay). Not
# for distribution: the test suite runs it (ORTOPS_LIBRARY) to check the device path.
set(ORTOPS_DEVICE_ON_CPU_SOURCES "")
foreach(source IN LISTS ORTOPS_DEVICE_SOURCES)
  file(RELATIVE_PATH relative "${CMAKE_CURRENT_SOURCE_DIR}/csrc" "${source}")
  string(REGEX REPLACE "\\.cu$" ".cc" relative "${relative}")
  set(wrapper "${CMAKE_CURRENT_BINARY_DIR}/device_on_cpu/${relative}")
  file(CONFIGURE OUTPUT "${wrapper}" CONTENT "#include \"${source}\"\n")
  list(APPEND ORTOPS_DEVICE_ON_CPU_SOURCES "${wrapper}")
endforeach()

add_library(ortops_device_on_cpu SHARED
  csrc/register.cc csrc/op_table.cc csrc/device/runtime_host.cc ${ORTOPS_DEVICE_ON_CPU_SOURCES})
target_link_libraries(ortops_device_on_cpu PRIVATE ortops_ops)
target_include_directories(ortops_device_on_cpu PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/include")
target_include_directories(ortops_device_on_cpu SYSTEM PRIVATE "${ORTOPS_CCCL_INCLUDE_DIR}")
target_compile_definitions(ortops_device_on_cpu PRIVATE
  THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP ORTOPS_DEVICE_PATHS=1 ORTOPS_DEVICE_ON_CPU=1)
# As the GPU build (nvcc --fmad=false), no multiply-add is contracted: both return the CPU
# kernels' bits where their arithmetic is the same.
target_compile_options(ortops_device_on_cpu PRIVATE ${ORTOPS_WARNINGS} -ffp-contract=off)
ortops_link_as_custom_op_library(ortops_device_on_cpu)
