// DeviceBlockIndex::Impl (device_block_index_impl.cuh): the counters read back by synchronous
// calls, the all-or-nothing checks of keys and group ids, capacity planning and growth (rehash,
// with an exact count of the distinct new keys when only that can tell) and the kernel launches
// (device_index_kernels.cu) behind the public calls of device_block_index.cu.
#include "kernels/device_block_index_impl.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "host/nvtx.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using index_host::check_cuda;
using index_host::DeviceBuffer;
using index_host::DeviceCounters;
using index_host::KeyBatch;
using index_host::TableBuffers;

DeviceCounters DeviceBlockIndex::Impl::read_counters(cudaStream_t stream, const char* call) const {
  DeviceCounters host{};
  check_cuda(cudaMemcpyAsync(&host, counters(), sizeof(host), cudaMemcpyDeviceToHost, stream),
             std::string(call) + ": reading the counters");
  check_cuda(cudaStreamSynchronize(stream), std::string(call) + ": synchronising the stream");
  return host;
}

void DeviceBlockIndex::Impl::reset_call_count(cudaStream_t stream, const char* call) {
  check_cuda(cudaMemsetAsync(&counters()->call_count, 0, sizeof(unsigned long long), stream),
             std::string(call) + ": resetting the call counter");
}

void DeviceBlockIndex::Impl::clear_headers(const TableBuffers& t, cudaStream_t stream,
                                           const char* what) {
  static_assert(detail::kEmptyTag == 0, "a zeroed header is an empty bucket");
  check_cuda(cudaMemsetAsync(t.first_header(), 0, t.header_bytes(), stream), what);
}

TableBuffers DeviceBlockIndex::Impl::allocate_table(std::uint64_t buckets,
                                                    cudaStream_t stream) const {
  TableBuffers t;
  t.buckets = buckets;
  const std::uint64_t slots = detail::slots_of_buckets(buckets);
  t.headers = DeviceBuffer(options.allocator, t.header_bytes() + 32, stream, "bucket headers");
  t.digests = DeviceBuffer(options.allocator, slots * sizeof(BlockDigest), stream, "digests");
  clear_headers(t, stream, "clearing new bucket headers");
  return t;
}

void DeviceBlockIndex::Impl::check_key_widths(const BlockDigest* keys, std::uint64_t n,
                                              std::size_t digest_size, cudaStream_t stream,
                                              const char* call) const {
  check_digest_size(digest_size, std::string("DeviceBlockIndex::") + call);
  if (digest_size == BlockDigest::kSize) {
    return;
  }
  check_cuda(cudaMemsetAsync(&counters()->first_bad, 0xFF, sizeof(unsigned long long), stream),
             std::string(call) + ": resetting the validation flag");
  check_cuda(index_kernels::launch_check_key_tails(keys, n, static_cast<int>(digest_size / 8),
                                                   counters(), sm_count, stream),
             std::string(call) + ": launching check_key_tails");
  const DeviceCounters c = read_counters(stream, call);
  if (c.first_bad != ~0ULL) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": keys[" +
                          std::to_string(c.first_bad) + "] is not a " +
                          std::to_string(digest_size) + "-byte digest: bytes past " +
                          std::to_string(digest_size) + " must be zero; nothing was applied");
  }
}

void DeviceBlockIndex::Impl::check_groups(const std::int32_t* group_ids, std::uint64_t n,
                                          cudaStream_t stream, const char* call) {
  check_cuda(cudaMemsetAsync(&counters()->first_bad, 0xFF, sizeof(unsigned long long), stream),
             std::string(call) + ": resetting the validation flag");
  check_cuda(index_kernels::launch_check_groups(group_ids, n, counters(), sm_count, stream),
             std::string(call) + ": launching check_group_ids");
  const DeviceCounters c = read_counters(stream, call);
  if (c.first_bad != ~0ULL) {
    std::int32_t value = 0;
    check_cuda(cudaMemcpy(&value, group_ids + c.first_bad, sizeof(value), cudaMemcpyDeviceToHost),
               std::string(call) + ": reading a bad group id");
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": group_ids[" +
                          std::to_string(c.first_bad) + "] = " + std::to_string(value) +
                          " is outside [0, " + std::to_string(kMaxGroups) +
                          "); nothing was applied");
  }
}

void DeviceBlockIndex::Impl::rehash(std::uint64_t buckets, cudaStream_t stream) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::rehash");
  TableBuffers next = allocate_table(buckets, stream);
  check_cuda(index_kernels::launch_rehash(view(), table.slots(), next.view(hash_key), counters(),
                                          sm_count, stream),
             "rehash: launching rehash_slots");
  DeviceCounters c = read_counters(stream, "rehash");
  if (c.overflow != 0) {
    check_cuda(cudaMemsetAsync(&counters()->overflow, 0, sizeof(unsigned int), stream),
               "rehash: resetting the overflow flag");
    throw CudaError(
        "DeviceBlockIndex::rehash: a key found no slot in the new table (internal "
        "error); the index is unchanged");
  }
  const unsigned long long used = c.live;
  check_cuda(
      cudaMemcpyAsync(&counters()->used, &used, sizeof(used), cudaMemcpyHostToDevice, stream),
      "rehash: updating the counters");
  check_cuda(cudaStreamSynchronize(stream), "rehash: synchronising the stream");
  table = std::move(next);
  used_upper = used;
}

void DeviceBlockIndex::Impl::reserve(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream) {
  const double mlf = options.max_load_factor;
  const std::uint64_t limit = detail::load_limit(table.slots(), mlf);
  if (used_upper + n <= limit) {
    return;  // fits even if every key is new: no synchronisation
  }
  DeviceCounters c = read_counters(stream, "insert");
  used_upper = c.used;
  if (c.used + n <= limit) {
    return;
  }
  // Keys absent from the table bound the new keys from above.
  DeviceBuffer present(options.allocator, n, stream, "insert scratch flags");
  reset_call_count(stream, "insert");
  check_cuda(index_kernels::launch_find_missing(view(), batch, n,
                                                static_cast<std::uint8_t*>(present.get()),
                                                counters(), sm_count, stream),
             "insert: launching find_missing_keys");
  c = read_counters(stream, "insert");
  const std::uint64_t missing = c.call_count;
  if (c.used + missing <= limit) {
    return;
  }
  std::uint64_t buckets = detail::plan_buckets(c.live + missing, table.buckets, max_buckets, mlf);
  if (buckets == 0) {
    // Only an exact count of the distinct new keys can tell: insert the missing ones into a
    // scratch table with its own counters.
    const std::uint64_t distinct = count_distinct(batch, n, present, missing, stream);
    buckets = detail::plan_buckets(c.live + distinct, table.buckets, max_buckets, mlf);
    if (buckets == 0) {
      throw CapacityExceeded(
          "DeviceBlockIndex::insert: " + std::to_string(distinct) + " new keys on top of " +
          std::to_string(c.live) + " would exceed the limit of " +
          std::to_string(detail::load_limit(detail::slots_of_buckets(max_buckets), mlf)) +
          " keys (max_capacity " + std::to_string(options.max_capacity) +
          " slots, max_load_factor " + std::to_string(mlf) + "); nothing was inserted");
    }
  }
  rehash(buckets, stream);
}

std::uint64_t DeviceBlockIndex::Impl::count_distinct(const KeyBatch& batch, std::uint64_t n,
                                                     const DeviceBuffer& present,
                                                     std::uint64_t missing,
                                                     cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::count_distinct");
  const TableBuffers scratch = allocate_table(detail::buckets_for_keys(missing, 0.5), stream);
  DeviceBuffer scratch_counters(options.allocator, sizeof(DeviceCounters), stream,
                                "scratch counters");
  check_cuda(cudaMemsetAsync(scratch_counters.get(), 0, sizeof(DeviceCounters), stream),
             "insert: clearing scratch counters");
  auto* sc = static_cast<DeviceCounters*>(scratch_counters.get());
  check_cuda(index_kernels::launch_insert(scratch.view(hash_key), batch, n,
                                          static_cast<const std::uint8_t*>(present.get()), sc,
                                          sm_count, stream),
             "insert: launching insert_keys into the scratch table");
  DeviceCounters host{};
  check_cuda(cudaMemcpyAsync(&host, sc, sizeof(host), cudaMemcpyDeviceToHost, stream),
             "insert: reading scratch counters");
  check_cuda(cudaStreamSynchronize(stream), "insert: synchronising the stream");
  if (host.overflow != 0) {
    throw CudaError("DeviceBlockIndex::insert: the scratch table overflowed (internal error)");
  }
  return host.call_count;
}

std::size_t DeviceBlockIndex::Impl::insert(const KeyBatch& batch, std::uint64_t n,
                                           cudaStream_t stream, bool sync) {
  reserve(batch, n, stream);
  if (sync) {
    reset_call_count(stream, "insert");
  }
  check_cuda(index_kernels::launch_insert(view(), batch, n, nullptr, counters(), sm_count, stream),
             "insert: launching insert_keys");
  used_upper += n;
  if (!sync) {
    return 0;
  }
  const DeviceCounters c = read_counters(stream, "insert");
  used_upper = c.used;
  if (c.overflow != 0) {
    throw CudaError("DeviceBlockIndex::insert: a key found no free slot (internal error)");
  }
  return static_cast<std::size_t>(c.call_count);
}

std::size_t DeviceBlockIndex::Impl::erase(const KeyBatch& batch, std::uint64_t n,
                                          cudaStream_t stream, bool sync) {
  if (sync) {
    reset_call_count(stream, "erase");
  }
  check_cuda(index_kernels::launch_erase(view(), batch, n, counters(), sm_count, stream),
             "erase: launching erase_keys");
  if (!sync) {
    return 0;
  }
  const DeviceCounters c = read_counters(stream, "erase");
  used_upper = c.used;
  return static_cast<std::size_t>(c.call_count);
}

void DeviceBlockIndex::Impl::contains(const KeyBatch& batch, std::uint64_t n, std::uint8_t* out,
                                      cudaStream_t stream, bool sync) const {
  check_cuda(index_kernels::launch_contains(view(), batch, n, out, sm_count, stream),
             "contains: launching contains_keys");
  if (sync) {
    check_cuda(cudaStreamSynchronize(stream), "contains: synchronising the stream");
  }
}

}  // namespace prefixhit
