# The event mirror through the C ABI (tests/c/c_api_mirror.c), compiled as C and run by ctest.
if(PREFIXHIT_HAS_MIRROR)
  prefixhit_add_c_test(c_api_mirror ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_mirror.c)
  target_include_directories(prefixhit_c_api_mirror SYSTEM PRIVATE ${PREFIXHIT_CPPZMQ_INCLUDE_DIR})
  target_link_libraries(prefixhit_c_api_mirror PRIVATE ${PREFIXHIT_ZMQ_LIBRARY})
  set_tests_properties(c_api_mirror PROPERTIES LABELS "c_api;mirror" TIMEOUT 60)
  if(PREFIXHIT_SANITIZE MATCHES "thread")
    # libzmq is not TSan-instrumented: the mirror suite's suppressions (tests/mirror.cmake).
    set_tests_properties(c_api_mirror PROPERTIES ENVIRONMENT
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mirror/tsan.supp")
  endif()
endif()
