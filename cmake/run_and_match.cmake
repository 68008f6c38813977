# A ctest command that must succeed AND print something: PASS_REGULAR_EXPRESSION alone ignores
# the exit code, so a program that prints the expected words in an error message and fails
# would pass.
#   cmake -DEXPECT=<regex> -P run_and_match.cmake -- <program> [args...]
# Fails when the program exits non-zero or its standard output does not match EXPECT. An
# argument holding ";" would be split in two (a CMake list): pass none.
set(command)
set(after_separator FALSE)
foreach(i RANGE 1 ${CMAKE_ARGC})
  if(i EQUAL CMAKE_ARGC)
    break()
  endif()
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "usage: cmake -DEXPECT=<regex> -P run_and_match.cmake -- <program> [args...]")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status STREQUAL "0")
  message(FATAL_ERROR "${command} exited with ${status}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${command}: its output does not match '${EXPECT}'")
endif()
