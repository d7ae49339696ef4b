// The resident CPU block index: a set of (namespace, group id, 32-byte digest).
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
/// The smallest max_load_factor accepted; below it a 32-slot bucket would hold no key at all.
inline constexpr double kMinMaxLoadFactor = 0.01;

struct BlockIndexOptions {
  std::size_t initial_capacity = 1 << 16;  ///< slots reserved up front, at most kMaxIndexSlots
  double max_load_factor = 0.8;            ///< grow (rehash) past this, in [0.01, 0.95]
  std::size_t max_capacity = 0;  ///< 0: unbounded; else at most kMaxIndexSlots, grow no further
  std::uint64_t seed = 0;        ///< 0: a random seed (hash flooding resistance)
};

/// Layout and hashing: open addressing over buckets of 32 slots with an 8-bit tag per slot
/// (the slot logic of detail/index_slots.hpp, shared with the GPU DeviceBlockIndex). The hash is
/// seeded (options.seed, or a random seed when 0), so crafted digests cannot flood one bucket.
/// A key is reported present only after its tag, namespace, group id and all 32 digest bytes
/// compare equal.
///
/// Capacity: capacity() counts slots (a power-of-two number of 32-slot buckets). The index holds
/// at most max_load_factor * capacity() keys and grows (doubling, rehashing) past that; erased
/// slots become tombstones that later inserts reuse and rehashes drop. With max_capacity set it
/// grows no further than the largest such table within max_capacity slots, and an insert whose
/// new keys would not fit there throws CapacityExceeded and inserts nothing. A failed allocation
/// also throws CapacityExceeded and leaves the index unchanged. No key is ever dropped.
///
/// Thread safety: any number of concurrent readers and writers. Every call takes one internal
/// reader-writer lock once (bulk writes exclusively, reads shared), so a bulk call is atomic:
/// readers see all of it or none of it, and a failed call (bad argument, capacity) applies
/// nothing. View::probe takes the shared lock once per window. Moving or destroying an index
/// while other threads use it is not allowed.
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
  /// group id outside [0, kMaxGroups).
  std::size_t insert(Namespace ns, int group_id, span<const BlockDigest> keys);
  /// Per-key group ids (group_ids.size() == keys.size()).
  std::size_t insert(Namespace ns, span<const std::int32_t> group_ids,
                     span<const BlockDigest> keys);
  /// Erases keys; absent keys are ignored. Returns how many were removed.
  std::size_t erase(Namespace ns, int group_id, span<const BlockDigest> keys);
  std::size_t erase(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys);
  /// out[i] = 1 if present, else 0. `out` has keys.size() entries.
  void contains(Namespace ns, int group_id, span<const BlockDigest> keys, std::uint8_t* out) const;
  void contains(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys,
                std::uint8_t* out) const;
  bool contains(Namespace ns, int group_id, const BlockDigest& key) const;

  std::size_t size() const noexcept;
  std::size_t capacity() const noexcept;
  void clear();
  const BlockIndexOptions& options() const noexcept;
  /// The seed actually in use (options().seed, or the random one drawn for seed 0).
  std::uint64_t hash_seed() const noexcept;
  /// Slots taken by live keys and tombstones (what the load limit counts).
  std::size_t used_slots() const noexcept;

  /// Visits every key (in no particular order) under a consistent snapshot.
  void for_each(const std::function<void(Namespace, int, const BlockDigest&)>& visit) const;

  /// An ExistenceSource over one namespace, for Coordinator lookups. It borrows the index.
  /// probe() hashes the whole window first and prefetches its buckets; a bad group id or
  /// namespace simply never matches (probe is called on hot paths and does not throw).
  class View final : public ExistenceSource {
   public:
    View(const BlockIndex& index, Namespace ns) : index_(&index), ns_(ns) {}
    std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                        std::int64_t step, int count) const override;

   private:
    const BlockIndex* index_;
    Namespace ns_;
  };
  View view(Namespace ns) const { return View(*this, ns); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
