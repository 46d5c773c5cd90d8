# ctest: libortops.so may need no glibc symbol version newer than the glibc of the wheel's
# manylinux tag (csrc/compat/glibc_compat.cc keeps it so). tests/python/test_wheel.py checks
# the built wheel too; this runs with every build's C++ tests, so that a library function
# that brings a newer version (std::thread's pthread_create@GLIBC_2.34, twice so far) fails
# at once, naming the symbol.
#   cmake -DREADELF=readelf -DLIBRARY=libortops.so -DMAX_GLIBC=2.27 -P check_glibc_versions.cmake
include("${CMAKE_CURRENT_LIST_DIR}/listing.cmake")
ortops_tool_listing(listing "${READELF}" --dyn-syms -V -W "${LIBRARY}")
ortops_listing_from(needs "${listing}" "Version needs section"
                    "${LIBRARY} has no version needs section: the parsing is broken")
string(REGEX MATCHALL "Name: GLIBC_[0-9.]+" versions "${needs}")
if(NOT versions)
  message(FATAL_ERROR "no GLIBC_ version among ${LIBRARY}'s needs: the parsing is broken")
endif()
set(too_new "")
foreach(entry IN LISTS versions)
  string(REPLACE "Name: GLIBC_" "" version "${entry}")
  if(version VERSION_GREATER MAX_GLIBC)
    # The undefined symbols bound at that version, from the dynamic symbol table.
    string(REGEX MATCHALL "[^ \n]+@GLIBC_${version}[ \n]" symbols "${listing}")
    list(TRANSFORM symbols STRIP)
    list(REMOVE_DUPLICATES symbols)
    list(JOIN symbols ", " symbols)
    list(APPEND too_new "GLIBC_${version}: ${symbols}")
  endif()
endforeach()
if(too_new)
  list(JOIN too_new "\n  " text)
  message(FATAL_ERROR "${LIBRARY} needs glibc versions newer than ${MAX_GLIBC}, the wheel's manylinux tag:\n  ${text}\n"
                      "wrap the symbol in csrc/compat/glibc_compat.cc, or avoid the function that brings it")
endif()
list(TRANSFORM versions REPLACE "Name: " "")
list(REMOVE_DUPLICATES versions)
list(JOIN versions ", " text)
message(STATUS "glibc versions needed, none above ${MAX_GLIBC}: ${text}")
