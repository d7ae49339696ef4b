// The GPU-resident block index: a device hash set of (namespace, group id, digest) keys, digests
// of 8, 16 or 32 bytes.
//
// Same slot logic as the CPU BlockIndex (detail/index_slots.hpp): buckets of 12 slots, each with
// a 64-byte header of 8-bit tags and meta words, digests apart, seeded hashing and double hashing
// over buckets. docs/design/device-index.md explains the layout and its costs.
//
// This header compiles with a plain C++17 compiler: it does not include cuda_runtime.h, and the
// device-only members are guarded by PREFIXHIT_CUDA_SOURCE (detail/hd.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/types.hpp"

// Identical to the CUDA runtime's own typedef, so either may come first.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace prefixhit {

#if PREFIXHIT_CUDA_SOURCE
namespace detail {
/// Device loads for find_slot_with: a header's 16 tag bytes as one 16-byte load, a meta word
/// from the same header sector, digests as two 16-byte loads, all through the read-only data
/// cache (the table is not written while a kernel probes it).
struct DeviceSlotLoads {
  __device__ static __forceinline__ BucketTags tags(const BucketHeader* header) {
    const ulonglong2 t = __ldg(reinterpret_cast<const ulonglong2*>(header->tags));
    return BucketTags{{t.x, t.y}};
  }
  __device__ static __forceinline__ std::uint32_t meta(const BucketHeader* header, int lane) {
    return __ldg(&header->metas[lane]);
  }
  __device__ static __forceinline__ void digest(const BlockDigest* digest,
                                                std::uint64_t (&out)[4]) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(digest);
    const ulonglong2 lo = __ldg(p);
    const ulonglong2 hi = __ldg(p + 1);
    out[0] = lo.x;
    out[1] = lo.y;
    out[2] = hi.x;
    out[3] = hi.y;
  }
};
}  // namespace detail
#endif

/// A small copyable view of a DeviceBlockIndex for use inside kernels, passed by value (as
/// cuCollections' refs are). It stays valid until the next call that may rehash the index
/// (insert, or destruction); take a fresh one after each insert. Probing through a ref while an
/// insert, erase or clear of the same index runs is not allowed (order them on one stream).
struct DeviceBlockIndexRef {
  const detail::BucketHeader* headers = nullptr;
  const BlockDigest* digests = nullptr;
  std::uint64_t bucket_mask = 0;
  detail::IndexHashKey hash_key{};

#if PREFIXHIT_CUDA_SOURCE
  /// Whether (ns, group_id, key) is in the index, `key` a digest of `digest_size` bytes (8, 16
  /// or 32; bytes past it must be zero, else it is never present). A hit has compared the tag,
  /// the namespace, the group id, the width and all 32 digest bytes. A namespace above
  /// kMaxNamespace or a group id outside [0, kMaxGroups) is never present. One thread answers
  /// one key; no warp synchronisation.
  __device__ __forceinline__ bool contains(Namespace ns, int group_id, const BlockDigest& key,
                                           std::size_t digest_size = BlockDigest::kSize) const {
    if (!detail::valid_namespace(ns) || !detail::valid_group(group_id) || headers == nullptr) {
      return false;
    }
    const detail::SlotKey slot_key = detail::make_slot_key(
        key, detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size)));
    const detail::SlotPlace place =
        detail::place_of(detail::slot_hash(slot_key, hash_key), bucket_mask);
    return detail::find_slot_with<detail::DeviceSlotLoads>(headers, digests, bucket_mask, slot_key,
                                                           place) >= 0;
  }
#endif
};

/// Where the index gets device memory. Both empty: cudaMalloc / cudaFree. Otherwise both must
/// be set; `allocate` returns device memory aligned to at least 32 bytes (never managed memory),
/// or returns nullptr / throws on failure (the index then throws CudaError). `allocate` gets the
/// stream of the call that needs the memory; `deallocate` gets the default stream (nullptr),
/// since the allocating stream may be gone by then.
struct DeviceAllocator {
  std::function<void*(std::size_t bytes, cudaStream_t stream)> allocate;
  std::function<void(void* ptr, std::size_t bytes, cudaStream_t stream)> deallocate;
};

struct DeviceBlockIndexOptions {
  std::size_t initial_capacity = std::size_t{1} << 20;  ///< slots reserved up front
  double max_load_factor = 0.8;                         ///< grow past this, in [0.01, 0.95]
  std::size_t max_capacity = 0;  ///< 0: unbounded; else grow no further, then fail
  std::uint64_t seed = 0;        ///< 0: a random seed (hash flooding resistance)
  DeviceAllocator allocator;     ///< empty: cudaMalloc
};

/// Counters of one index, read back from the device.
struct DeviceBlockIndexStats {
  std::size_t size = 0;        ///< live keys
  std::size_t used_slots = 0;  ///< live keys plus tombstones
  std::size_t capacity = 0;    ///< slots
  std::size_t bytes = 0;       ///< device memory held by the table
};

/// A GPU-resident set of (namespace, group id, digest).
///
/// Digest widths: every key call takes `digest_size` (8, 16 or 32 bytes, default 32; last, after
/// the stream), the width of its keys; BlockDigest explains the zero-padded form. The width is
/// part of the key, as in the CPU BlockIndex: the same bytes at two widths are two keys.
/// Synchronous calls check narrow keys on the device first (InvalidArgument naming the first
/// key with a nonzero byte past the width; nothing applied); `_async` calls cannot report it and
/// read only the first digest_size bytes of each key.
///
/// All key, group-id and output pointers are DEVICE pointers (n elements each; group-id arrays
/// hold int32). Every call takes a stream (default: the legacy default stream). Synchronous
/// calls return when the work is done; `_async` twins only enqueue and return at once, except
/// that an insert_async that might need to grow the table first synchronises `stream` to count
/// what is already there (at most once per growth).
///
/// Stream ordering: the index is not internally synchronised. All calls on one index, and all
/// kernels that use its ref, must be ordered: issue them on one stream, or synchronise between
/// streams. An insert may reallocate the table, which invalidates earlier refs.
///
/// Capacity: as the CPU BlockIndex. The table holds at most max_load_factor * capacity() keys
/// (counting tombstones); an insert that would pass that rehashes on the device into a larger
/// table (or the same size, to drop tombstones). With max_capacity set, an insert whose new keys
/// would not fit throws CapacityExceeded and inserts nothing. A failed allocation throws
/// CudaError and leaves the index as it was. No key is ever dropped.
///
/// Errors: InvalidArgument for a bad namespace or group id (per-key group ids are checked on the
/// device before anything is applied), CudaError for a CUDA failure, Unavailable in builds
/// without CUDA.
class DeviceBlockIndex {
 public:
  /// Allocates the table on the current device; throws CudaError when that fails.
  explicit DeviceBlockIndex(const DeviceBlockIndexOptions& options = {},
                            cudaStream_t stream = nullptr);
  ~DeviceBlockIndex();
  DeviceBlockIndex(const DeviceBlockIndex&) = delete;
  DeviceBlockIndex& operator=(const DeviceBlockIndex&) = delete;
  DeviceBlockIndex(DeviceBlockIndex&&) noexcept;
  DeviceBlockIndex& operator=(DeviceBlockIndex&&) noexcept;

  /// Inserts n keys of one group; returns how many were new (in-batch duplicates count once).
  std::size_t insert(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                     cudaStream_t stream = nullptr, std::size_t digest_size = BlockDigest::kSize);
  void insert_async(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                    cudaStream_t stream = nullptr, std::size_t digest_size = BlockDigest::kSize);
  /// Per-key group ids (device array of n int32); all are validated before any key is applied.
  std::size_t insert(Namespace ns, const std::int32_t* group_ids, const BlockDigest* keys,
                     std::size_t n, cudaStream_t stream = nullptr,
                     std::size_t digest_size = BlockDigest::kSize);

  /// Erases keys; absent keys are ignored. Returns how many were removed.
  std::size_t erase(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                    cudaStream_t stream = nullptr, std::size_t digest_size = BlockDigest::kSize);
  void erase_async(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                   cudaStream_t stream = nullptr, std::size_t digest_size = BlockDigest::kSize);
  std::size_t erase(Namespace ns, const std::int32_t* group_ids, const BlockDigest* keys,
                    std::size_t n, cudaStream_t stream = nullptr,
                    std::size_t digest_size = BlockDigest::kSize);

  /// out[i] = 1 if key i is present, else 0; every out[i] is written.
  void contains(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                std::uint8_t* out, cudaStream_t stream = nullptr,
                std::size_t digest_size = BlockDigest::kSize) const;
  void contains_async(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                      std::uint8_t* out, cudaStream_t stream = nullptr,
                      std::size_t digest_size = BlockDigest::kSize) const;
  /// Per-key group ids; a group id outside [0, kMaxGroups) is simply absent (out[i] = 0).
  void contains(Namespace ns, const std::int32_t* group_ids, const BlockDigest* keys, std::size_t n,
                std::uint8_t* out, cudaStream_t stream = nullptr,
                std::size_t digest_size = BlockDigest::kSize) const;
  void contains_async(Namespace ns, const std::int32_t* group_ids, const BlockDigest* keys,
                      std::size_t n, std::uint8_t* out, cudaStream_t stream = nullptr,
                      std::size_t digest_size = BlockDigest::kSize) const;

  /// Live keys; synchronises `stream`.
  std::size_t size(cudaStream_t stream = nullptr) const;
  DeviceBlockIndexStats stats(cudaStream_t stream = nullptr) const;
  /// Slots (a power-of-two number of 12-slot buckets).
  std::size_t capacity() const noexcept;
  /// Removes every key, keeping the capacity. Synchronous.
  void clear(cudaStream_t stream = nullptr);

  DeviceBlockIndexRef ref() const noexcept;
  const DeviceBlockIndexOptions& options() const noexcept;
  std::uint64_t hash_seed() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
