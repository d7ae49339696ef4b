// Helpers of cuemu's own tests: device buffers and a launch shorthand.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace cuemu_test {

/// A device array of n T, filled from `init` (or left as cudaMalloc leaves it).
template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit DeviceArray(std::size_t count, const std::vector<T>& init = {}) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(T)), cudaSuccess);
    if (!init.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr, init.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

}  // namespace cuemu_test
