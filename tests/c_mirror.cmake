# The event mirror through the C ABI (tests/c/c_api_mirror.c), compiled as C and run by ctest.
if(PREFIXHIT_HAS_MIRROR)
  add_executable(prefixhit_c_api_mirror ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_mirror.c)
  set_target_properties(prefixhit_c_api_mirror PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                        C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
  target_compile_options(prefixhit_c_api_mirror PRIVATE
    $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
  target_include_directories(prefixhit_c_api_mirror SYSTEM PRIVATE ${PREFIXHIT_CPPZMQ_INCLUDE_DIR})
  target_link_libraries(prefixhit_c_api_mirror PRIVATE prefixhit ${PREFIXHIT_ZMQ_LIBRARY})
  add_test(NAME c_api_mirror COMMAND prefixhit_c_api_mirror)
  set_tests_properties(c_api_mirror PROPERTIES LABELS "c_api;mirror" TIMEOUT 60)
endif()
