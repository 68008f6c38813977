# AXONN_FUZZ: a build of its own (a separate build folder, clang) in which every C and C++
# object carries libFuzzer's coverage instrumentation, AddressSanitizer and UBSan, so the
# fuzz targets under tests/fuzz/ link the real libraries and coverage guides the fuzzer into
# them. scripts/fuzz-smoke.sh configures, builds and runs it; docs/fuzzing.md says how.
option(AXONN_FUZZ "Build the libFuzzer targets under tests/fuzz (needs clang; use a build folder of its own)" OFF)
if(NOT AXONN_FUZZ)
  return()
endif()

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "axonn: AXONN_FUZZ=ON needs clang's libFuzzer, but the compilers are "
                      "${CMAKE_C_COMPILER_ID} and ${CMAKE_CXX_COMPILER_ID}; configure a fresh build folder with "
                      "CC=clang CXX=clang++ (apt-get install clang libclang-rt-14-dev), e.g. scripts/fuzz-smoke.sh")
endif()

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] AXONN_LIBFUZZER_LINKS)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
axonn_require(AXONN_LIBFUZZER_LINKS "clang's libFuzzer and sanitizer runtimes (-fsanitize=fuzzer,address,undefined)"
              "libclang-rt-14-dev")

# Every object: coverage for the fuzzer, ASan and UBSan; any UBSan report aborts, so the
# fuzzer counts it as a crash. Executables that are not fuzz targets link the sanitizers
# without libFuzzer's main (tests/fuzz adds -fsanitize=fuzzer to the targets).
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=all>")
add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=address,undefined>")
