// Host-side CUDA helpers of the GPU engines (batch_lookup.cu, router_score.cu,
// device_residency.cu), the mirror's device sink and the C ABI's device index: errors as typed
// exceptions, empty-safe async copies, grow-only device staging and event timing of a synchronous
// call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::gpu::cuda_host {

[[noreturn]] inline void throw_cuda(cudaError_t err, const std::string& what) {
  throw CudaError(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw_cuda(err, what);
  }
}

/// cudaMemcpyAsync that skips empty copies: an empty batch may come with null host pointers,
/// which the runtime is free to reject even for zero bytes.
inline void copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream, const char* what) {
  if (bytes > 0) {
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), what);
  }
}

/// A device allocation that only grows; for the host overloads' staging.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) {
      cudaFree(data_);
    }
  }
  T* reserve(std::size_t count, const char* what) {
    if (count > capacity_) {
      if (data_ != nullptr) {
        cudaFree(data_);
        data_ = nullptr;
        capacity_ = 0;
      }
      check(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)), what);
      capacity_ = count;
    }
    return data_;
  }
  /// Copies `count` items from the host into the buffer (grown as needed; one spare item, since
  /// cudaMalloc(0) gives no usable address), ordered on `stream`; returns the device copy.
  T* upload(const T* host, std::size_t count, cudaStream_t stream, const char* what) {
    T* device = reserve(count + 1, what);
    copy_async(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream, what);
    return device;
  }
  T* data() const noexcept { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Events bracketing a synchronous call's kernels, when its caller asked for timing.
class EventTimer {
 public:
  EventTimer(LookupTiming* timing, cudaStream_t stream) : timing_(timing), stream_(stream) {
    if (timing_ == nullptr) {
      return;
    }
    check(cudaEventCreate(&start_), "cudaEventCreate");
    const cudaError_t err = cudaEventCreate(&stop_);
    if (err != cudaSuccess) {
      cudaEventDestroy(start_);
      throw_cuda(err, "cudaEventCreate");
    }
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() {
    if (timing_ != nullptr) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
  }
  void stop() {
    if (timing_ != nullptr) {
      check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    }
  }
  /// After the stream was synchronised.
  void report() {
    if (timing_ != nullptr) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
      timing_->device_us = static_cast<double>(ms) * 1e3;
    }
  }

 private:
  LookupTiming* timing_;
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace prefixhit::gpu::cuda_host
