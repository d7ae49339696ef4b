// Shared helpers of the GPU test suites: every GPU test starts with PREFIXHIT_SKIP_WITHOUT_GPU(),
// so that on machines without a usable device the tests report SKIPPED, never PASSED.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

namespace prefixhit::testing {

/// Why no GPU test can run here, or an empty string when a device is usable.
inline std::string gpu_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
           cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  }
  if (count == 0) {
    return "no CUDA device present";
  }
  return {};
}

}  // namespace prefixhit::testing

/// Skips the current test (GTEST_SKIP) unless a CUDA device is usable.
#define PREFIXHIT_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                       \
    const std::string prefixhit_gpu_reason = ::prefixhit::testing::gpu_unavailable_reason(); \
    if (!prefixhit_gpu_reason.empty()) {                                                     \
      GTEST_SKIP() << prefixhit_gpu_reason;                                                  \
    }                                                                                        \
  } while (false)

/// Asserts that a CUDA runtime call succeeded, naming the call and the error.
#define PREFIXHIT_ASSERT_CUDA(call)                                         \
  do {                                                                      \
    const cudaError_t prefixhit_cuda_status = (call);                       \
    ASSERT_EQ(prefixhit_cuda_status, cudaSuccess)                           \
        << #call << ": " << cudaGetErrorName(prefixhit_cuda_status) << " (" \
        << cudaGetErrorString(prefixhit_cuda_status) << ")";                \
  } while (false)
