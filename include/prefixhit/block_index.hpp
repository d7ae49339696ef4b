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

struct BlockIndexOptions {
  std::size_t initial_capacity = 1 << 16;  ///< slots reserved up front
  double max_load_factor = 0.8;            ///< grow (rehash) past this, in (0, 0.95]
  std::size_t max_capacity = 0;            ///< 0: unbounded; else grow no further, then fail
  std::uint64_t seed = 0;                  ///< 0: a random seed (hash flooding resistance)
};

/// Thread safety: any number of concurrent readers and writers. Reads see each bulk call either
/// not at all or key by key as it is applied; a failed bulk insert applies nothing.
class BlockIndex {
 public:
  BlockIndex();
  explicit BlockIndex(const BlockIndexOptions& options);
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;
  BlockIndex(BlockIndex&&) noexcept;
  BlockIndex& operator=(BlockIndex&&) noexcept;

  /// Inserts keys for one group; returns how many were new. Throws CapacityExceeded (and inserts
  /// nothing) when the keys would not fit under max_capacity; InvalidArgument for a bad ns/group.
  std::size_t insert(Namespace ns, int group_id, span<const BlockDigest> keys);
  /// Per-key group ids (group_ids.size() == keys.size()).
  std::size_t insert(Namespace ns, span<const std::int32_t> group_ids,
                     span<const BlockDigest> keys);
  /// Erases keys; absent keys are ignored. Returns how many were removed.
  std::size_t erase(Namespace ns, int group_id, span<const BlockDigest> keys);
  std::size_t erase(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys);
  /// out[i] = 1 if present, else 0. `out` has keys.size() entries.
  void contains(Namespace ns, int group_id, span<const BlockDigest> keys,
                std::uint8_t* out) const;
  void contains(Namespace ns, span<const std::int32_t> group_ids, span<const BlockDigest> keys,
                std::uint8_t* out) const;
  bool contains(Namespace ns, int group_id, const BlockDigest& key) const;

  std::size_t size() const noexcept;
  std::size_t capacity() const noexcept;
  void clear();
  const BlockIndexOptions& options() const noexcept;

  /// Visits every key (in no particular order) under a consistent snapshot.
  void for_each(const std::function<void(Namespace, int, const BlockDigest&)>& visit) const;

  /// An ExistenceSource over one namespace, for Coordinator lookups. It borrows the index.
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
