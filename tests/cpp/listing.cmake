# What the library checks (check_*.cmake) share: a binary tool's listing of LIBRARY, and the
# part of it after a heading.

# The standard output of the command in ARGN, or an error that names it.
function(ortops_tool_listing out)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE listing RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "${command} failed (${status})")
  endif()
  set(${out} "${listing}" PARENT_SCOPE)
endfunction()

# The part of `listing` from `heading` on; `missing` is the error when it has no such heading.
function(ortops_listing_from out listing heading missing)
  string(FIND "${listing}" "${heading}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${missing}")
  endif()
  string(SUBSTRING "${listing}" ${at} -1 part)
  set(${out} "${part}" PARENT_SCOPE)
endfunction()
