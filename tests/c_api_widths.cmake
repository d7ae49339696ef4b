# Digest widths through the C ABI (tests/c/digest_width_example.c), compiled as strict C99 and
# run by ctest like the c_api_example.
prefixhit_add_c_test(c_api_widths ${CMAKE_CURRENT_SOURCE_DIR}/c/digest_width_example.c)
set_tests_properties(c_api_widths PROPERTIES LABELS "c_api" TIMEOUT 60)
