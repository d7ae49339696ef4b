# Router mode through the C ABI (tests/c/c_api_router.c), compiled as C and run by ctest.
prefixhit_add_c_test(c_api_router ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_router.c)
set_tests_properties(c_api_router PROPERTIES LABELS "c_api;router" TIMEOUT 60)

# The GPU scorer through the C ABI (tests/c/c_api_router_gpu.c): equal to the CPU call where a
# device is present, PREFIXHIT_STATUS_UNAVAILABLE where not; under emulation both.
prefixhit_add_c_test(c_api_router_gpu ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_router_gpu.c)
if(PREFIXHIT_CUDA_EMULATION)
  set_tests_properties(c_api_router_gpu PROPERTIES LABELS "c_api;router;gpu-emu" TIMEOUT 300)
  add_test(NAME c_api_router_gpu_no_device COMMAND prefixhit_c_api_router_gpu)
  set_tests_properties(c_api_router_gpu_no_device PROPERTIES LABELS "c_api;router;gpu-emu"
                       ENVIRONMENT "CUEMU_NO_DEVICE=1" TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "GPU unavailable.*c_api_router_gpu: ok")
else()
  set_tests_properties(c_api_router_gpu PROPERTIES LABELS "c_api;router" TIMEOUT 300)
endif()
