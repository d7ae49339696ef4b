// DeviceBlockIndex::Impl (internal): the state behind a DeviceBlockIndex (options, hash key, the
// current table generation, the device counters) and the steps its public calls
// (device_block_index.cu) take: checks, capacity planning, growth and the kernel launches.
// Defined in device_block_index_impl.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device_index_memory.cuh"
#include "prefixhit/device_block_index.hpp"

namespace prefixhit {

struct DeviceBlockIndex::Impl {
  using DeviceBuffer = index_host::DeviceBuffer;
  using DeviceCounters = index_host::DeviceCounters;
  using DeviceTable = index_host::DeviceTable;
  using KeyBatch = index_host::KeyBatch;
  using TableBuffers = index_host::TableBuffers;

  DeviceBlockIndexOptions options;
  std::uint64_t seed = 0;
  detail::IndexHashKey hash_key{};
  std::uint64_t max_buckets = 0;
  int sm_count = 1;
  TableBuffers table;
  DeviceBuffer counter_buffer;
  /// An upper bound of the used slots, kept without synchronising; exact after a sync.
  std::uint64_t used_upper = 0;

  DeviceCounters* counters() const { return static_cast<DeviceCounters*>(counter_buffer.get()); }
  DeviceTable view() const { return table.view(hash_key); }

  /// Copies the counters back and synchronises `stream`.
  DeviceCounters read_counters(cudaStream_t stream, const char* call) const;
  void reset_call_count(cudaStream_t stream, const char* call);
  /// Every slot empty (spare tag bytes and meta words zero too).
  static void clear_headers(const TableBuffers& t, cudaStream_t stream, const char* what);
  /// A new table generation of `buckets` buckets, every slot empty.
  TableBuffers allocate_table(std::uint64_t buckets, cudaStream_t stream) const;

  /// Throws InvalidArgument naming the first key with a nonzero byte past `digest_size` (an
  /// invalid width too); applies nothing. Free for 32-byte keys.
  void check_key_widths(const BlockDigest* keys, std::uint64_t n, std::size_t digest_size,
                        cudaStream_t stream, const char* call) const;
  /// Throws InvalidArgument naming the first bad per-key group id; applies nothing.
  void check_groups(const std::int32_t* group_ids, std::uint64_t n, cudaStream_t stream,
                    const char* call);

  /// Rebuilds into `buckets` buckets (dropping tombstones). On any failure the old table stays.
  void rehash(std::uint64_t buckets, cudaStream_t stream);
  /// Makes room for the batch: grows or drops tombstones when needed; throws CapacityExceeded,
  /// with nothing applied, when its new keys cannot fit under max_capacity.
  void reserve(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream);
  /// The distinct keys among the batch's `missing` ones flagged absent in `present`, counted by
  /// inserting them into a scratch table.
  std::uint64_t count_distinct(const KeyBatch& batch, std::uint64_t n, const DeviceBuffer& present,
                               std::uint64_t missing, cudaStream_t stream) const;

  /// The launches; with `sync`, the stream is synchronised and the count of keys inserted or
  /// erased is returned (0 without).
  std::size_t insert(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream, bool sync);
  std::size_t erase(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream, bool sync);
  void contains(const KeyBatch& batch, std::uint64_t n, std::uint8_t* out, cudaStream_t stream,
                bool sync) const;
};

}  // namespace prefixhit
