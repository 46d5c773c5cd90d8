# ctest: the objects compiled for a wider instruction-set level (build/isa/<level>/...) may
# define no weak symbol outside that level's namespace, isa_<level>. A weak symbol (an inline
# function or template instance) is merged by the linker with the baseline's copies of it
# and one copy is kept for all callers: an AVX-512 copy kept that way would run on every CPU.
# In Windows (COFF) objects such a symbol is a COMDAT section, which nm lists by its name,
# .text$<symbol> (or .rdata$, .data$, ... and the .xdata$/.pdata$ of its unwind data).
#   cmake -DNM=nm -DOBJECTS=a.o,b.o -P check_isa_symbols.cmake
string(REPLACE "," ";" objects "${OBJECTS}")
set(checked 0)
set(offending "")
foreach(object IN LISTS objects)
  if(NOT object MATCHES "/isa/([a-z0-9]+)/")
    continue()
  endif()
  set(level "${CMAKE_MATCH_1}")
  math(EXPR checked "${checked} + 1")
  # Mangled names (no brackets or semicolons to upset CMake's lists); the namespace shows
  # in them as <length>isa_<level>.
  execute_process(COMMAND "${NM}" --defined-only "${object}" OUTPUT_VARIABLE listing RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${object}")
  endif()
  string(REGEX MATCHALL "[^\n]+" lines "${listing}")
  foreach(line IN LISTS lines)
    set(symbol "")
    if(line MATCHES "^[0-9a-f]* [WVu] (.+)$")
      set(symbol "${CMAKE_MATCH_1}")
    elseif(line MATCHES "^[0-9a-f]* [a-zA-Z] \\.[a-z]+\\$(.+)$")
      set(symbol "${CMAKE_MATCH_1}")
    endif()
    if(symbol)
      # DW.ref.__gxx_personality_v0 is a pointer to the C++ personality routine (data, the
      # same in every object), which exception cleanups need: harmless to merge. So are
      # COFF's .refptr.<name>, pointers to data imported from elsewhere, and .rdata$zzz is the
      # compiler's name and version.
      if(NOT symbol MATCHES "isa_${level}" AND NOT symbol MATCHES "^(DW\\.ref\\.|\\.refptr\\.|zzz$)")
        list(APPEND offending "${object}: ${symbol}")
      endif()
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no per-level objects among OBJECTS")
endif()
if(offending)
  list(JOIN offending "\n  " text)
  message(FATAL_ERROR "weak symbols outside their level's namespace (c++filt names them):\n  ${text}")
endif()
message(STATUS "${checked} per-level objects define weak symbols in their own namespace only")
