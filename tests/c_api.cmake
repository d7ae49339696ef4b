# The C ABI example (include/prefixhit/prefixhit.h), compiled as C and run by ctest. Included by
# tests/CMakeLists.txt with every other tests/*.cmake fragment.
add_executable(prefixhit_c_api_example ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_example.c)
set_target_properties(prefixhit_c_api_example PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF)
# The header must stay plain C: strict warnings, as errors, for the example.
target_compile_options(prefixhit_c_api_example PRIVATE
  $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
# The library is C++ (static by default); linking it pulls in the C++ runtime.
target_link_libraries(prefixhit_c_api_example PRIVATE prefixhit)
set_target_properties(prefixhit_c_api_example PROPERTIES LINKER_LANGUAGE CXX)
add_test(NAME c_api_example COMMAND prefixhit_c_api_example)
set_tests_properties(c_api_example PROPERTIES LABELS "c_api" TIMEOUT 60)
