// Existence sources: where a lookup learns which (group id, key) pairs the store holds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "prefixhit/types.hpp"

namespace prefixhit {

/// The store as a lookup sees it. Implementations: KeySet (a caller-supplied set), the resident
/// BlockIndex (through BlockIndex::view) and PlanAnswers (a remote store's batch answer).
class ExistenceSource {
 public:
  virtual ~ExistenceSource() = default;

  /// Bit k (k < count <= 64) of the result is set iff (group_id, hashes[first + k*step]) is
  /// present. `hashes` is the request's whole hash list; every index asked for is inside it.
  virtual std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                              std::int64_t step, int count) const = 0;
};

/// A caller-supplied set of (group id, key) pairs: the store content of a conformance vector, or
/// a runtime's own view of its store. Any group id is accepted; ids outside the configuration
/// simply never match.
///
/// Hashing: all 32 digest bytes and the group id, under a secret drawn once per process, so
/// crafted digests cannot flood one bucket. Thread safety: any number of concurrent readers and
/// writers; an internal reader-writer lock is taken once per call (once per probe window), so a
/// lookup running while another thread inserts sees each window whole, either before or after
/// each insert. Moving or destroying a KeySet while other threads use it is not allowed.
class KeySet final : public ExistenceSource {
 public:
  KeySet();
  ~KeySet() override;
  KeySet(KeySet&&) noexcept;
  KeySet& operator=(KeySet&&) noexcept;
  KeySet(const KeySet&) = delete;
  KeySet& operator=(const KeySet&) = delete;

  /// Adds one pair; returns false if it was already present.
  bool insert(int group_id, const BlockDigest& key);
  bool contains(int group_id, const BlockDigest& key) const;
  std::size_t size() const noexcept;
  void clear() noexcept;

  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
