// DeviceBlockIndex's host-side helpers (declared in device_index_memory.cuh): CUDA errors,
// DeviceBuffer's allocation and release, the hash seed and the argument checks.
#include "kernels/device_index_memory.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <string>

namespace prefixhit::index_host {

void throw_cuda(cudaError_t status, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw CudaError("DeviceBlockIndex::" + what + ": " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")");
}

DeviceBuffer::DeviceBuffer(const DeviceAllocator& allocator, std::size_t bytes, cudaStream_t stream,
                           const std::string& what)
    : bytes_(bytes) {
  if (bytes == 0) {
    return;
  }
  if (allocator.allocate) {
    if (!allocator.deallocate) {
      throw InvalidArgument(
          "DeviceBlockIndex: DeviceAllocator.allocate is set but deallocate "
          "is not");
    }
    try {
      ptr_ = allocator.allocate(bytes, stream);
    } catch (const std::exception& e) {
      throw CudaError("DeviceBlockIndex: the allocator failed to provide " + std::to_string(bytes) +
                      " bytes for " + what + ": " + e.what());
    }
    if (ptr_ == nullptr) {
      throw CudaError("DeviceBlockIndex: the allocator returned no memory for " +
                      std::to_string(bytes) + " bytes of " + what);
    }
    deallocate_ = allocator.deallocate;
    if (reinterpret_cast<std::uintptr_t>(ptr_) % 32 != 0) {
      release();
      throw InvalidArgument("DeviceBlockIndex: the allocator returned memory for " + what +
                            " that is not 32-byte aligned");
    }
  } else {
    const cudaError_t status = cudaMalloc(&ptr_, bytes);
    if (status != cudaSuccess) {
      ptr_ = nullptr;
      throw_cuda(status, "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what);
    }
  }
}

void DeviceBuffer::release() noexcept {
  if (ptr_ == nullptr) {
    return;
  }
  if (deallocate_) {
    try {
      // The default stream: the allocating stream may no longer exist by now.
      deallocate_(ptr_, bytes_, nullptr);
    } catch (...) {
      // A destructor must not throw; the caller's allocator owns the failure.
    }
  } else {
    cudaFree(ptr_);
  }
  ptr_ = nullptr;
}

void validate_owner(Namespace ns, std::int64_t group_id, const char* call) {
  if (!detail::valid_namespace(ns)) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": namespace " +
                          std::to_string(ns) + " exceeds the 24-bit maximum " +
                          std::to_string(kMaxNamespace));
  }
  if (!detail::valid_group(group_id)) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": group id " +
                          std::to_string(group_id) + " is outside [0, " +
                          std::to_string(kMaxGroups) + ")");
  }
}

void validate_device_pointer(const void* ptr, std::size_t alignment, const char* call,
                             const char* name) {
  if (ptr == nullptr) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name + " is null");
  }
  if (reinterpret_cast<std::uintptr_t>(ptr) % alignment != 0) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name + " is not " +
                          std::to_string(alignment) + "-byte aligned");
  }
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess || attributes.type == cudaMemoryTypeUnregistered) {
    cudaGetLastError();
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name +
                          " is not device-accessible memory (pass device, managed or pinned "
                          "host memory)");
  }
}

KeyBatch make_batch(Namespace ns, int group_id, const std::int32_t* group_ids,
                    const BlockDigest* keys, std::size_t digest_size, const char* call) {
  check_digest_size(digest_size, std::string("DeviceBlockIndex::") + call);
  KeyBatch batch{};
  batch.width_code = detail::digest_width_code(digest_size);
  batch.words = static_cast<int>(digest_size / 8);
  batch.keys = keys;
  batch.group_ids = group_ids;
  batch.group_id = group_id;
  batch.ns = ns;
  batch.aligned16 = reinterpret_cast<std::uintptr_t>(keys) % 16 == 0;
  return batch;
}

}  // namespace prefixhit::index_host
