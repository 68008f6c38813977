# One INTERFACE target carries the warning flags; every axonn target links it.
add_library(axonn_warnings INTERFACE)
target_compile_options(axonn_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                              -Wnon-virtual-dtor -Wold-style-cast -Wnull-dereference>)
# .cu files: the same host-compiler warnings minus two that nvcc's own generated code and
# the CUDA headers it includes (not as system headers) trip: -Wpedantic (its line
# directives) and -Wold-style-cast (channel_descriptor.h). Checked with nvcc 13.0.
target_compile_options(axonn_warnings INTERFACE
  "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcompiler=-Wall,-Wextra,-Wshadow,-Wconversion,-Wno-sign-conversion,-Wnon-virtual-dtor,-Wnull-dereference>")
if(AXONN_WERROR)
  target_compile_options(axonn_warnings INTERFACE $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>
                                                  "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings -Xcompiler=-Werror>")
endif()
