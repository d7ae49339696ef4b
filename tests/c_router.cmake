# Router mode through the C ABI (tests/c/c_api_router.c), compiled as C and run by ctest.
add_executable(prefixhit_c_api_router ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_router.c)
set_target_properties(prefixhit_c_api_router PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
target_compile_options(prefixhit_c_api_router PRIVATE
  $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
target_link_libraries(prefixhit_c_api_router PRIVATE prefixhit)
add_test(NAME c_api_router COMMAND prefixhit_c_api_router)
set_tests_properties(c_api_router PROPERTIES LABELS "c_api;router" TIMEOUT 60)

# The GPU scorer through the C ABI (tests/c/c_api_router_gpu.c): equal to the CPU call where a
# device is present, PREFIXHIT_STATUS_UNAVAILABLE where not; under emulation both.
add_executable(prefixhit_c_api_router_gpu ${CMAKE_CURRENT_SOURCE_DIR}/c/c_api_router_gpu.c)
set_target_properties(prefixhit_c_api_router_gpu PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF LINKER_LANGUAGE CXX)
target_compile_options(prefixhit_c_api_router_gpu PRIVATE
  $<$<C_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
target_link_libraries(prefixhit_c_api_router_gpu PRIVATE prefixhit)
add_test(NAME c_api_router_gpu COMMAND prefixhit_c_api_router_gpu)
if(PREFIXHIT_CUDA_EMULATION)
  set_tests_properties(c_api_router_gpu PROPERTIES LABELS "c_api;router;gpu-emu" TIMEOUT 300)
  add_test(NAME c_api_router_gpu_no_device COMMAND prefixhit_c_api_router_gpu)
  set_tests_properties(c_api_router_gpu_no_device PROPERTIES LABELS "c_api;router;gpu-emu"
                       ENVIRONMENT "CUEMU_NO_DEVICE=1" TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "GPU unavailable.*c_api_router_gpu: ok")
else()
  set_tests_properties(c_api_router_gpu PROPERTIES LABELS "c_api;router" TIMEOUT 300)
endif()
