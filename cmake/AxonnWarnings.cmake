# One INTERFACE target carries the warning flags; every axonn target links it.
add_library(axonn_warnings INTERFACE)
target_compile_options(axonn_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                              -Wnon-virtual-dtor -Wold-style-cast -Wnull-dereference>)
if(AXONN_WERROR)
  target_compile_options(axonn_warnings INTERFACE $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>)
endif()
