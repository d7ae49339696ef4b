// The resident CPU block index: a set of (namespace, group id, digest) keys, digests of 8, 16 or
// 32 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

/// A tenant, model or cache salt. Lookups in one namespace never see another's keys.
using Namespace = std::uint32_t;
/// Namespaces are 24-bit so that namespace and group id pack into one 32-bit word per slot.
inline constexpr Namespace kMaxNamespace = (1U << 24) - 1;

/// The most slots an index may be asked for (initial_capacity, max_capacity): 2^40.
inline constexpr std::uint64_t kMaxIndexSlots = std::uint64_t{1} << 40;
/// The smallest max_load_factor accepted; below it a table needs absurdly many slots per key.
inline constexpr double kMinMaxLoadFactor = 0.01;

struct BlockIndexOptions {
  std::size_t initial_capacity = 1 << 16;  ///< slots reserved up front, at most kMaxIndexSlots
  double max_load_factor = 0.8;            ///< grow (rehash) past this, in [0.01, 0.95]
  std::size_t max_capacity = 0;  ///< 0: unbounded; else at most kMaxIndexSlots, grow no further
  std::uint64_t seed = 0;        ///< 0: a random seed (hash flooding resistance)
};

/// Layout and hashing: open addressing over buckets of 12 slots, each bucket's 8-bit tags and
/// meta words in one 64-byte header line and the digests apart (the slot logic of
/// detail/index_slots.hpp, shared with the GPU DeviceBlockIndex). The hash is
/// seeded (options.seed, or a random seed when 0), so crafted digests cannot flood one bucket.
/// A key is reported present only after its tag, namespace, group id, digest width and all 32
/// digest bytes compare equal.
///
/// Digest widths: every call takes the width of its keys (`digest_size`: 8, 16 or 32 bytes,
/// default 32; see BlockDigest). The width is part of the key: the same bytes inserted as an
/// 8-byte and as a 32-byte digest are two keys, and a lookup finds only keys of its own width.
/// A key with a nonzero byte past the width is an InvalidArgument (nothing is applied). A vLLM
/// KV event's integer hash h goes in as insert(ns, group, {BlockDigest::from_int_hash(h)}, 8).
///
/// Capacity: capacity() counts slots (a power-of-two number of 12-slot buckets). The index holds
/// at most max_load_factor * capacity() keys and grows (doubling, rehashing) past that; erased
/// slots become tombstones that later inserts reuse and rehashes drop. With max_capacity set it
/// grows no further than the largest such table within max_capacity slots, and an insert whose
/// new keys would not fit there throws CapacityExceeded and inserts nothing. A failed allocation
/// also throws CapacityExceeded and leaves the index unchanged. No key is ever dropped.
///
/// Thread safety: any number of concurrent readers and writers. Every call takes one internal
/// reader-writer lock once (bulk writes exclusively, reads shared), so a bulk call is atomic:
/// readers see all of it or none of it, and a failed call (bad argument, capacity) applies
/// nothing. A lookup through a View takes the shared lock once (View::run_lookup), so it sees
/// one state of the index; a View::probe called directly takes it once per window. Moving or
/// destroying an index while other threads use it is not allowed.
class BlockIndex {
 public:
  BlockIndex();
  explicit BlockIndex(const BlockIndexOptions& options);
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;
  BlockIndex(BlockIndex&&) noexcept;
  BlockIndex& operator=(BlockIndex&&) noexcept;

  /// Inserts keys for one group; returns how many were new (duplicates in `keys` count once).
  /// Throws CapacityExceeded (and inserts nothing) when the keys would not fit under
  /// max_capacity; InvalidArgument (inserting nothing) for a namespace above kMaxNamespace or a
  /// group id outside [0, kMaxGroups), a digest_size other than 8, 16 or 32, or a key that is
  /// not of that width.
  std::size_t insert(Namespace ns, int group_id, span<const BlockDigest> keys,
                     std::size_t digest_size = BlockDigest::kSize);
  /// Per-key group ids (group_ids.size() == keys.size()).
  std::size_t insert(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys,
                     std::size_t digest_size = BlockDigest::kSize);
  /// Erases keys; absent keys are ignored. Returns how many were removed.
  std::size_t erase(Namespace ns, int group_id, span<const BlockDigest> keys,
                    std::size_t digest_size = BlockDigest::kSize);
  std::size_t erase(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys,
                    std::size_t digest_size = BlockDigest::kSize);
  /// out[i] = 1 if present, else 0. `out` has keys.size() entries.
  void contains(Namespace ns, int group_id, span<const BlockDigest> keys, std::uint8_t* out,
                std::size_t digest_size = BlockDigest::kSize) const;
  void contains(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys,
                std::uint8_t* out, std::size_t digest_size = BlockDigest::kSize) const;
  bool contains(Namespace ns, int group_id, const BlockDigest& key,
                std::size_t digest_size = BlockDigest::kSize) const;

  std::size_t size() const noexcept;
  std::size_t capacity() const noexcept;
  void clear();
  const BlockIndexOptions& options() const noexcept;
  /// The seed actually in use (options().seed, or the random one drawn for seed 0).
  std::uint64_t hash_seed() const noexcept;
  /// How this build computes the slot hash (the same hash in every form): "aes-ni" (x86-64),
  /// "armv8-aes" (aarch64's crypto extension) or "table" (PREFIXHIT_CPU_AES=OFF, or a CPU with
  /// neither; 3.5x the time of a cache-resident lookup). docs/design/device-index.md.
  static const char* slot_hash_form() noexcept;
  /// Slots taken by live keys and tombstones (what the load limit counts).
  std::size_t used_slots() const noexcept;

  /// Where the keys lie against where a lookup looks first, under a consistent snapshot: a
  /// lookup of a large table prefetches a key's home-bucket header and its preferred lane's
  /// digest line together (docs/design/device-index.md, "Preferred lane"), so a key in that
  /// line is found in one round trip to memory, any other key in two or more.
  struct Layout {
    std::size_t keys = 0;                ///< live keys (size())
    std::size_t in_home_bucket = 0;      ///< keys in their home bucket
    std::size_t in_prefetched_line = 0;  ///< of those, keys in their preferred lane's digest line
    /// Keys in the second bucket of their sequence, which a lookup prefetches as soon as it finds
    /// the home bucket full with no candidate in it.
    std::size_t in_second_bucket = 0;
  };
  Layout layout() const;

  /// Visits every key (in no particular order) under a consistent snapshot.
  void for_each(const std::function<void(Namespace, int, const BlockDigest&)>& visit) const;
  /// The same, with each key's digest width (8, 16 or 32): (ns, group id, digest_size, digest).
  void for_each_key(
      const std::function<void(Namespace, int, std::size_t, const BlockDigest&)>& visit) const;

  /// An ExistenceSource over the keys of one namespace and one digest width, for Coordinator
  /// lookups (whose Config::digest_size must match). It borrows the index.
  /// probe() hashes the whole window first and prefetches its buckets; a bad group id, namespace
  /// or width simply never matches (probe is called on hot paths and does not throw).
  class View final : public ExistenceSource {
   public:
    View(const BlockIndex& index, Namespace ns, std::size_t digest_size = BlockDigest::kSize)
        : index_(&index), ns_(ns), digest_size_(digest_size) {}
    std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                        std::int64_t step, int count) const override;
    std::size_t digest_size() const noexcept override { return digest_size_; }
    /// Every window's keys in one software-pipelined pass under one shared lock: each key's
    /// bucket and then its candidate slot are prefetched a fixed distance ahead, so many cache
    /// misses are in flight at once (a lookup's ~600 keys cost about the memory system's
    /// random-read throughput, not 600 dependent round trips).
    void probe_many(const ProbeWindow* windows, std::size_t n, std::uint64_t* out) const override;
    /// True for a table of 64 MiB or more, whose probes miss the caches: lookups then fetch
    /// their probe set up front through probe_many. A smaller table answers from cache, where
    /// the window-by-window probes cost less CPU (and stop at a hole).
    bool prefers_probe_many() const noexcept override;
    /// Holds the index's shared lock for the whole lookup and passes a twin of this view that
    /// probes under it: inserts and erases wait for the lookup, which sees one state of the index.
    void run_lookup(const LookupBody& lookup) const override;

   private:
    const BlockIndex* index_;
    Namespace ns_;
    std::size_t digest_size_;
    bool held_ = false;  // the twin of run_lookup: its caller holds the shared lock
  };
  View view(Namespace ns, std::size_t digest_size = BlockDigest::kSize) const {
    return View(*this, ns, digest_size);
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
