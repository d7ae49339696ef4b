# The C ABI example (include/prefixhit/prefixhit.h), compiled as C and run by ctest. Included by
# tests/CMakeLists.txt with every other tests/*.cmake fragment.
prefixhit_add_c_test(c_api_example ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_example.c)
set_tests_properties(c_api_example PROPERTIES LABELS "c_api" TIMEOUT 60)
