// DeviceBlockIndex's host-side helpers (internal): CUDA errors as typed exceptions, device memory
// from the options' allocator or cudaMalloc (DeviceBuffer, TableBuffers: one table generation),
// and the argument checks every public call runs before anything reaches a kernel. Used by
// device_block_index.cu (the public calls) and device_block_index_impl.cu (planning, growth and
// launches); defined in device_index_memory.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "kernels/device_index_slots.cuh"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::index_host {

using index_kernels::DeviceCounters;
using index_kernels::DeviceTable;
using index_kernels::KeyBatch;

/// Throws CudaError naming the DeviceBlockIndex call; clears a non-sticky error first.
[[noreturn]] void throw_cuda(cudaError_t status, const std::string& what);

inline void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw_cuda(status, what);
  }
}

/// Device memory from the options' allocator or cudaMalloc; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceAllocator& allocator, std::size_t bytes, cudaStream_t stream,
               const std::string& what);
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }

  void* get() const noexcept { return ptr_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    std::swap(deallocate_, other.deallocate_);
  }
  void release() noexcept;

  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::function<void(void*, std::size_t, cudaStream_t)> deallocate_;
};

/// One table generation on the device: bucket headers and digests (index_slots.hpp).
struct TableBuffers {
  std::uint64_t buckets = 0;
  DeviceBuffer headers;  // 32 bytes more than the headers: a caller's allocator aligns to 32 only
  DeviceBuffer digests;

  std::uint64_t slots() const { return detail::slots_of_buckets(buckets); }
  std::size_t bytes() const { return headers.bytes() + digests.bytes(); }
  std::size_t header_bytes() const {
    return static_cast<std::size_t>(buckets * sizeof(detail::BucketHeader));
  }
  /// The first 64-byte boundary of the header buffer: a header is one line, never two.
  detail::BucketHeader* first_header() const {
    auto* base = static_cast<unsigned char*>(headers.get());
    const auto misalignment =
        static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(base) % 64U);
    return reinterpret_cast<detail::BucketHeader*>(base +
                                                   (misalignment == 0 ? 0 : 64 - misalignment));
  }
  DeviceTable view(const detail::IndexHashKey& hash_key) const {
    return DeviceTable{first_header(), static_cast<BlockDigest*>(digests.get()), buckets - 1,
                       hash_key};
  }
};

/// Throws InvalidArgument for a namespace past 24 bits or a group id outside [0, kMaxGroups).
void validate_owner(Namespace ns, std::int64_t group_id, const char* call);

/// Rejects null, misaligned and plain host pointers, which a kernel could not read (an illegal
/// address would poison the whole CUDA context).
void validate_device_pointer(const void* ptr, std::size_t alignment, const char* call,
                             const char* name);

/// The keys of one call as the kernels take them; throws InvalidArgument for a bad digest size.
KeyBatch make_batch(Namespace ns, int group_id, const std::int32_t* group_ids,
                    const BlockDigest* keys, std::size_t digest_size, const char* call);

}  // namespace prefixhit::index_host
