# ctest of a Windows cross build, and a check of the DLL in the Windows wheel
# (tests/python/test_wheel.py): ortops.dll is a 64-bit DLL that
#   - imports system DLLs only: no MinGW runtime (libstdc++-6.dll, libgcc_s_seh-1.dll,
#     libwinpthread-1.dll: linked in statically) and no onnxruntime.dll (the runtime that
#     loads the library hands it the API), so it loads beside any application;
#   - exports RegisterCustomOps and nothing else;
#   - moves no 32- or 64-byte vector to or from memory with an aligned move: the Windows x64
#     stack is only 16-byte aligned, and GCC has spilled AVX registers to it with aligned
#     moves (GCC bug 54412), which fault where the slot happens to be misaligned.
#   cmake -DOBJDUMP=x86_64-w64-mingw32-objdump -DLIBRARY=ortops.dll -P check_windows_dll.cmake
cmake_minimum_required(VERSION 3.22)  # IN_LIST
set(system_dlls kernel32.dll msvcrt.dll ucrtbase.dll advapi32.dll ntdll.dll)

include("${CMAKE_CURRENT_LIST_DIR}/listing.cmake")
ortops_tool_listing(headers "${OBJDUMP}" -p "${LIBRARY}")
if(NOT headers MATCHES "file format pei-x86-64")
  message(FATAL_ERROR "${LIBRARY} is not a 64-bit Windows (PE32+) image")
endif()

string(REGEX MATCHALL "DLL Name: [^\n]+" imports "${headers}")
set(foreign "")
foreach(line IN LISTS imports)
  string(REPLACE "DLL Name: " "" dll "${line}")
  string(TOLOWER "${dll}" name)
  if(NOT name IN_LIST system_dlls AND NOT name MATCHES "^api-ms-win-")
    list(APPEND foreign "${dll}")
  endif()
endforeach()
if(NOT imports)
  message(FATAL_ERROR "${LIBRARY}: no import table found in objdump's output")
endif()
if(foreign)
  message(FATAL_ERROR "${LIBRARY} imports DLLs that are not part of Windows: ${foreign}")
endif()

# The name table of the export directory: lines "\t[   0] Name" after its heading.
ortops_listing_from(names "${headers}" "[Ordinal/Name Pointer] Table" "${LIBRARY} exports nothing")
string(REGEX MATCH "Table[^\n]*\n((\t\\[ *[0-9]+\\] [^\n]+\n)+)" names "${names}")
# (Names only: brackets would keep CMake from splitting the list.)
string(REGEX REPLACE "\t\\[ *[0-9]+\\] ([^\n]+)\n" "\\1;" exported "${CMAKE_MATCH_1}")
list(REMOVE_ITEM exported "")
if(NOT exported STREQUAL "RegisterCustomOps")
  message(FATAL_ERROR "${LIBRARY} must export RegisterCustomOps alone; it exports: ${exported}")
endif()

execute_process(COMMAND "${OBJDUMP}" -d --no-show-raw-insn "${LIBRARY}"
                COMMAND grep -E "\\s(vmovaps|vmovapd|vmovdqa|vmovdqa32|vmovdqa64|vmovntps|vmovntpd|vmovntdq)\\s.*%[yz]mm.*\\(|\\s(vmovaps|vmovapd|vmovdqa|vmovdqa32|vmovdqa64)\\s[^,]*\\(.*%[yz]mm"
                OUTPUT_VARIABLE aligned RESULT_VARIABLE status)
if(aligned)
  string(SUBSTRING "${aligned}" 0 2000 aligned)
  message(FATAL_ERROR "${LIBRARY} has aligned 32/64-byte vector moves with memory operands:\n${aligned}")
endif()

list(LENGTH imports count)
message(STATUS "${LIBRARY}: imports ${count} system DLLs, exports RegisterCustomOps only, no aligned wide vector moves")
