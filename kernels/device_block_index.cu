// DeviceBlockIndex, host side: the GPU-resident set of (namespace, group id, digest) keys, digests
// of 8, 16 or 32 bytes. This file holds the public calls: argument checks, then the Impl's steps.
// The Impl (capacity planning, growth, launches) is device_block_index_impl.cu, device memory
// and the argument checks device_index_memory.cu; the kernels are device_index_kernels.cu, their
// per-key device functions device_index_slots.cuh, and the slot logic (hash, tags, buckets,
// compare, erase rule) detail/index_slots.hpp, shared with the CPU BlockIndex and covered by its
// CPU tests.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "host/nvtx.hpp"
#include "host/random_seed.hpp"
#include "kernels/device_block_index_impl.cuh"
#include "kernels/device_index_memory.cuh"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace {

using index_host::check_cuda;
using index_host::DeviceBuffer;
using index_host::DeviceCounters;
using index_host::DeviceTable;
using index_host::make_batch;
using index_host::validate_device_pointer;
using index_host::validate_owner;

template <class ImplPtr>
auto& live_impl(const ImplPtr& impl) {
  if (!impl) {
    throw InvalidArgument("DeviceBlockIndex: this index was moved from");
  }
  return *impl;
}

}  // namespace

DeviceBlockIndex::DeviceBlockIndex(const DeviceBlockIndexOptions& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::DeviceBlockIndex");
  // The CPU index's bounds (block_index.hpp): a tinier factor makes the first insert spin, a
  // slot limit near 2^64 overflows the bucket arithmetic.
  if (!(options.max_load_factor >= kMinMaxLoadFactor && options.max_load_factor <= 0.95)) {
    throw InvalidArgument("DeviceBlockIndexOptions.max_load_factor must be in [" +
                          std::to_string(kMinMaxLoadFactor) + ", 0.95], got " +
                          std::to_string(options.max_load_factor));
  }
  if (static_cast<std::uint64_t>(options.max_capacity) > kMaxIndexSlots) {
    throw InvalidArgument("DeviceBlockIndexOptions.max_capacity must be at most 2^40 slots, got " +
                          std::to_string(options.max_capacity));
  }
  if (options.max_capacity != 0 &&
      options.max_capacity < static_cast<std::size_t>(detail::kBucketSlots)) {
    throw InvalidArgument(
        "DeviceBlockIndexOptions.max_capacity must be 0 (unbounded) or at "
        "least " +
        std::to_string(detail::kBucketSlots) + " slots, got " +
        std::to_string(options.max_capacity));
  }
  if (static_cast<bool>(options.allocator.allocate) !=
      static_cast<bool>(options.allocator.deallocate)) {
    throw InvalidArgument(
        "DeviceBlockIndexOptions.allocator needs both allocate and deallocate, "
        "or neither");
  }
  Impl& impl = *impl_;
  impl.options = options;
  impl.seed = options.seed != 0 ? options.seed : detail::random_hash_seed();
  impl.hash_key = detail::make_hash_key(impl.seed);
  impl.max_buckets = detail::max_buckets_for(options.max_capacity);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "DeviceBlockIndex: cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&impl.sm_count, cudaDevAttrMultiProcessorCount, device),
             "DeviceBlockIndex: reading the SM count");
  const std::uint64_t buckets = detail::buckets_for_slots(
      static_cast<std::uint64_t>(options.initial_capacity), impl.max_buckets);
  impl.counter_buffer = DeviceBuffer(options.allocator, sizeof(DeviceCounters), stream, "counters");
  check_cuda(cudaMemsetAsync(impl.counter_buffer.get(), 0, sizeof(DeviceCounters), stream),
             "DeviceBlockIndex: clearing the counters");
  impl.table = impl.allocate_table(buckets, stream);
  check_cuda(cudaStreamSynchronize(stream), "DeviceBlockIndex: synchronising the stream");
}

DeviceBlockIndex::~DeviceBlockIndex() = default;
DeviceBlockIndex::DeviceBlockIndex(DeviceBlockIndex&&) noexcept = default;
DeviceBlockIndex& DeviceBlockIndex::operator=(DeviceBlockIndex&&) noexcept = default;

std::size_t DeviceBlockIndex::insert(Namespace ns, int group_id, const BlockDigest* keys,
                                     std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "insert");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "insert");
  return impl.insert(make_batch(ns, group_id, nullptr, keys, digest_size, "insert"), n, stream,
                     true);
}

void DeviceBlockIndex::insert_async(Namespace ns, int group_id, const BlockDigest* keys,
                                    std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert_async");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "insert_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert_async", "keys");
  impl.insert(make_batch(ns, group_id, nullptr, keys, digest_size, "insert_async"), n, stream,
              false);
}

std::size_t DeviceBlockIndex::insert(Namespace ns, const std::int32_t* group_ids,
                                     const BlockDigest* keys, std::size_t n, cudaStream_t stream,
                                     std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "insert");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "insert");
  validate_device_pointer(group_ids, alignof(std::int32_t), "insert", "group_ids");
  impl.check_groups(group_ids, n, stream, "insert");
  return impl.insert(make_batch(ns, 0, group_ids, keys, digest_size, "insert"), n, stream, true);
}

std::size_t DeviceBlockIndex::erase(Namespace ns, int group_id, const BlockDigest* keys,
                                    std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "erase");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "erase");
  return impl.erase(make_batch(ns, group_id, nullptr, keys, digest_size, "erase"), n, stream, true);
}

void DeviceBlockIndex::erase_async(Namespace ns, int group_id, const BlockDigest* keys,
                                   std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase_async");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "erase_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase_async", "keys");
  impl.erase(make_batch(ns, group_id, nullptr, keys, digest_size, "erase_async"), n, stream, false);
}

std::size_t DeviceBlockIndex::erase(Namespace ns, const std::int32_t* group_ids,
                                    const BlockDigest* keys, std::size_t n, cudaStream_t stream,
                                    std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "erase");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "erase");
  validate_device_pointer(group_ids, alignof(std::int32_t), "erase", "group_ids");
  impl.check_groups(group_ids, n, stream, "erase");
  return impl.erase(make_batch(ns, 0, group_ids, keys, digest_size, "erase"), n, stream, true);
}

void DeviceBlockIndex::contains(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                                std::uint8_t* out, cudaStream_t stream,
                                std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "contains");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "contains");
  validate_device_pointer(out, 1, "contains", "out");
  impl.contains(make_batch(ns, group_id, nullptr, keys, digest_size, "contains"), n, out, stream,
                true);
}

void DeviceBlockIndex::contains_async(Namespace ns, int group_id, const BlockDigest* keys,
                                      std::size_t n, std::uint8_t* out, cudaStream_t stream,
                                      std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains_async");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "contains_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains_async", "keys");
  validate_device_pointer(out, 1, "contains_async", "out");
  impl.contains(make_batch(ns, group_id, nullptr, keys, digest_size, "contains_async"), n, out,
                stream, false);
}

void DeviceBlockIndex::contains(Namespace ns, const std::int32_t* group_ids,
                                const BlockDigest* keys, std::size_t n, std::uint8_t* out,
                                cudaStream_t stream, std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "contains");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "contains");
  validate_device_pointer(group_ids, alignof(std::int32_t), "contains", "group_ids");
  validate_device_pointer(out, 1, "contains", "out");
  impl.contains(make_batch(ns, 0, group_ids, keys, digest_size, "contains"), n, out, stream, true);
}

void DeviceBlockIndex::contains_async(Namespace ns, const std::int32_t* group_ids,
                                      const BlockDigest* keys, std::size_t n, std::uint8_t* out,
                                      cudaStream_t stream, std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains_async");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "contains_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains_async", "keys");
  validate_device_pointer(group_ids, alignof(std::int32_t), "contains_async", "group_ids");
  validate_device_pointer(out, 1, "contains_async", "out");
  impl.contains(make_batch(ns, 0, group_ids, keys, digest_size, "contains_async"), n, out, stream,
                false);
}

std::size_t DeviceBlockIndex::size(cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::size");
  return static_cast<std::size_t>(live_impl(impl_).read_counters(stream, "size").live);
}

DeviceBlockIndexStats DeviceBlockIndex::stats(cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::stats");
  const Impl& impl = live_impl(impl_);
  const DeviceCounters c = impl.read_counters(stream, "stats");
  DeviceBlockIndexStats s;
  s.size = static_cast<std::size_t>(c.live);
  s.used_slots = static_cast<std::size_t>(c.used);
  s.capacity = static_cast<std::size_t>(impl.table.slots());
  s.bytes = impl.table.bytes();
  return s;
}

std::size_t DeviceBlockIndex::capacity() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->table.slots()) : 0;
}

void DeviceBlockIndex::clear(cudaStream_t stream) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::clear");
  Impl& impl = live_impl(impl_);
  Impl::clear_headers(impl.table, stream, "clear: clearing the bucket headers");
  check_cuda(cudaMemsetAsync(impl.counters(), 0, sizeof(DeviceCounters), stream),
             "clear: clearing the counters");
  check_cuda(cudaStreamSynchronize(stream), "clear: synchronising the stream");
  impl.used_upper = 0;
}

DeviceBlockIndexRef DeviceBlockIndex::ref() const noexcept {
  DeviceBlockIndexRef r;
  if (impl_) {
    const DeviceTable t = impl_->view();
    r.headers = t.headers;
    r.digests = t.digests;
    r.bucket_mask = t.bucket_mask;
    r.hash_key = t.hash_key;
  }
  return r;
}

const DeviceBlockIndexOptions& DeviceBlockIndex::options() const noexcept {
  static const DeviceBlockIndexOptions kMovedFrom{};
  return impl_ ? impl_->options : kMovedFrom;
}

std::uint64_t DeviceBlockIndex::hash_seed() const noexcept {
  return impl_ ? impl_->seed : 0;
}

}  // namespace prefixhit
