# The device block index, GPU lookups and the device mirror through the C ABI
# (tests/c/c_api_device_index.c, tests/c/c_api_mirror_device.c): equal to the CPU calls where a
# device is present, PREFIXHIT_STATUS_UNAVAILABLE where not; under emulation both.
prefixhit_add_c_test(c_api_device_index ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_device_index.c)
set(prefixhit_c_device_tests c_api_device_index)
if(PREFIXHIT_HAS_MIRROR)
  prefixhit_add_c_test(c_api_mirror_device ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_mirror_device.c)
  target_include_directories(prefixhit_c_api_mirror_device SYSTEM PRIVATE
                             ${PREFIXHIT_CPPZMQ_INCLUDE_DIR})
  target_link_libraries(prefixhit_c_api_mirror_device PRIVATE ${PREFIXHIT_ZMQ_LIBRARY})
  list(APPEND prefixhit_c_device_tests c_api_mirror_device)
endif()
foreach(test IN LISTS prefixhit_c_device_tests)
  if(PREFIXHIT_CUDA_EMULATION)
    set_tests_properties(${test} PROPERTIES LABELS "c_api;gpu-emu" TIMEOUT 300)
    add_test(NAME ${test}_no_device COMMAND prefixhit_${test})
    set_tests_properties(${test}_no_device PROPERTIES LABELS "c_api;gpu-emu"
                         ENVIRONMENT "CUEMU_NO_DEVICE=1" TIMEOUT 60
                         PASS_REGULAR_EXPRESSION "GPU unavailable.*${test}: ok")
  else()
    set_tests_properties(${test} PROPERTIES LABELS "c_api" TIMEOUT 300)
  endif()
endforeach()
