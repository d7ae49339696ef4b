# The event mirror's suite (tests/mirror): real ZeroMQ sockets on loopback and msgpack payloads.
# Included by tests/CMakeLists.txt with every other tests/*.cmake fragment; built only where the
# library has the mirror (cppzmq, libzmq and msgpack-cxx found).
if(PREFIXHIT_HAS_MIRROR)
  add_executable(prefixhit_mirror_tests ${CMAKE_CURRENT_SOURCE_DIR}/mirror/event_mirror_test.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/mirror/router_mirror_test.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/mirror/batching_test.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/mirror/pipeline_test.cpp
                 ${CMAKE_CURRENT_SOURCE_DIR}/mirror/cli_backend_test.cpp)
  target_link_libraries(prefixhit_mirror_tests PRIVATE prefixhit GTest::gtest_main
                        ${PREFIXHIT_ZMQ_LIBRARY})
  target_include_directories(prefixhit_mirror_tests PRIVATE ${PROJECT_SOURCE_DIR}
                             ${CMAKE_CURRENT_SOURCE_DIR})
  target_include_directories(prefixhit_mirror_tests SYSTEM PRIVATE
                             ${PREFIXHIT_CPPZMQ_INCLUDE_DIR} ${PREFIXHIT_MSGPACK_INCLUDE_DIR})
  target_compile_definitions(prefixhit_mirror_tests PRIVATE MSGPACK_NO_BOOST=1
                             MSGPACK_DEFAULT_API_VERSION=3)
  prefixhit_set_warnings(prefixhit_mirror_tests)
  prefixhit_test_code(prefixhit_mirror_tests)
  if(TARGET prefixhit_cli)  # cli_backend_test.cpp runs `prefixhit mirror` in a subprocess
    add_dependencies(prefixhit_mirror_tests prefixhit_cli)
    target_compile_definitions(prefixhit_mirror_tests PRIVATE
                               PREFIXHIT_CLI_PATH="$<TARGET_FILE:prefixhit_cli>")
  endif()
  # libzmq is not TSan-instrumented: its internal hand-offs need suppressing (tsan.supp).
  set(_ph_mirror_env "")
  if(PREFIXHIT_SANITIZE MATCHES "thread")
    set(_ph_mirror_env "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/mirror/tsan.supp")
  endif()
  gtest_discover_tests(prefixhit_mirror_tests
    PROPERTIES LABELS mirror ENVIRONMENT "${_ph_mirror_env}" DISCOVERY_TIMEOUT 60)
endif()

# The GPU suite's DeviceBlockIndexSink test (tests/gpu/mirror_device_sink_test.cu) also drives
# an EventApplier with msgpack-built payloads where the library has the mirror.
if(PREFIXHIT_HAS_MIRROR AND TARGET prefixhit_gpu_tests)
  target_include_directories(prefixhit_gpu_tests SYSTEM PRIVATE ${PREFIXHIT_MSGPACK_INCLUDE_DIR})
  target_compile_definitions(prefixhit_gpu_tests PRIVATE PREFIXHIT_TEST_MIRROR_PAYLOADS=1
                             MSGPACK_NO_BOOST=1 MSGPACK_DEFAULT_API_VERSION=3)
endif()
