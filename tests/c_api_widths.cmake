# Digest widths through the C ABI (tests/c/digest_width_example.c), compiled as strict C99 and
# run by ctest like the c_api_example.
add_executable(prefixhit_c_api_widths ${CMAKE_CURRENT_SOURCE_DIR}/c/digest_width_example.c)
set_target_properties(prefixhit_c_api_widths PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
target_compile_options(prefixhit_c_api_widths PRIVATE
  $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
target_link_libraries(prefixhit_c_api_widths PRIVATE prefixhit)
add_test(NAME c_api_widths COMMAND prefixhit_c_api_widths)
set_tests_properties(c_api_widths PROPERTIES LABELS "c_api" TIMEOUT 60)
