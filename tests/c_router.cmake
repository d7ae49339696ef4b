# Router mode through the C ABI (tests/c/c_api_router.c), compiled as C and run by ctest.
add_executable(prefixhit_c_api_router ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_router.c)
set_target_properties(prefixhit_c_api_router PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
target_compile_options(prefixhit_c_api_router PRIVATE
  $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
target_link_libraries(prefixhit_c_api_router PRIVATE prefixhit)
add_test(NAME c_api_router COMMAND prefixhit_c_api_router)
set_tests_properties(c_api_router PROPERTIES LABELS "c_api;router" TIMEOUT 60)
