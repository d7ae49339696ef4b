// Existence sources: where a lookup learns which (group id, key) pairs the store holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "prefixhit/types.hpp"

namespace prefixhit {

/// One run of keys for ExistenceSource::probe_many: (group_id, hashes[first + k*step]) for
/// k < count (count <= 64).
struct ProbeWindow {
  const BlockDigest* hashes;
  std::int64_t first;
  std::int64_t step;
  int group_id;
  int count;
};

class ExistenceSource;

/// The work of one lookup, for ExistenceSource::run_lookup: a non-owning reference to a callable
/// that takes the source to probe. It must not outlive the callable it refers to.
class LookupBody {
 public:
  template <class F, std::enable_if_t<!std::is_same_v<std::decay_t<F>, LookupBody>, int> = 0>
  LookupBody(const F& body) noexcept  // NOLINT(google-explicit-constructor): a lambda converts
      : body_(&body), call_([](const void* b, const ExistenceSource& source) {
          (*static_cast<const F*>(b))(source);
        }) {}
  void operator()(const ExistenceSource& source) const { call_(body_, source); }

 private:
  const void* body_;
  void (*call_)(const void*, const ExistenceSource&);
};

/// The store as a lookup sees it. Implementations: KeySet (a caller-supplied set), the resident
/// BlockIndex (through BlockIndex::view) and PlanAnswers (a remote store's batch answer).
class ExistenceSource {
 public:
  virtual ~ExistenceSource() = default;

  /// Bit k (k < count <= 64) of the result is set iff (group_id, hashes[first + k*step]) is
  /// present. `hashes` is the request's whole hash list; every index asked for is inside it.
  virtual std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                              std::int64_t step, int count) const = 0;

  /// The width (8, 16 or 32 bytes) of the keys this source holds and the hashes it is probed
  /// with. A coordinator refuses a source whose width is not its Config::digest_size.
  virtual std::size_t digest_size() const noexcept { return BlockDigest::kSize; }
  /// True when the source itself converts and validates every hash a probe reads before using
  /// it (the Python binding's lazily read hash lists): the engine then skips its own check of
  /// probed hashes' width, which would read entries the source has not converted yet.
  virtual bool checks_hash_widths() const noexcept { return false; }

  /// out[w] = probe(windows[w]...) for every w < n. Lookups hand a request's (or a batch's)
  /// whole probe set here at once, so a source can overlap the memory accesses of all of them
  /// (BlockIndex::View does); the default answers them one by one.
  /// Whether lookups should fetch their whole probe set up front through probe_many. That set is
  /// guessed (every key present until answers say otherwise), so it may hold keys a
  /// window-by-window lookup would never ask about: worth it where one overlapped pass over
  /// memory is the cost (BlockIndex::View), not where each key costs a call (callbacks, remote
  /// stores) or is already cheap. Default false.
  virtual bool prefers_probe_many() const noexcept { return false; }

  virtual void probe_many(const ProbeWindow* windows, std::size_t n, std::uint64_t* out) const {
    for (std::size_t w = 0; w < n; ++w) {
      out[w] = probe(windows[w].group_id, windows[w].hashes, windows[w].first, windows[w].step,
                     windows[w].count);
    }
  }

  /// Runs `lookup` once, passing the source its probes should use. Every lookup (one request, or
  /// one chunk of a batch) runs inside one call, so a source whose probes each take a lock can
  /// take it once here and pass a twin that probes under it (BlockIndex::View and KeySet do):
  /// the lookup then sees the store as of one instant, and a lookup of a cached table is not
  /// paced by a lock's barriers per window. The default passes this source. An override must
  /// call `lookup` once; returning without calling it makes the lookup throw InvalidArgument.
  virtual void run_lookup(const LookupBody& lookup) const { lookup(*this); }
};

/// A caller-supplied set of (group id, key) pairs: the store content of a conformance vector, or
/// a runtime's own view of its store. Any group id is accepted; ids outside the configuration
/// simply never match. A set holds keys of one digest width (8, 16 or 32 bytes).
///
/// Hashing: all 32 digest bytes and the group id, under a secret drawn once per process, so
/// crafted digests cannot flood one bucket. Thread safety: any number of concurrent readers and
/// writers; an internal reader-writer lock is taken once per call, and once for a whole lookup
/// (run_lookup), so a lookup running while another thread inserts sees the set either before or
/// after each insert. Moving or destroying a KeySet while other threads use it is not allowed.
class KeySet final : public ExistenceSource {
 public:
  /// Throws InvalidArgument unless digest_size is 8, 16 or 32.
  explicit KeySet(std::size_t digest_size = BlockDigest::kSize);
  ~KeySet() override;
  KeySet(KeySet&&) noexcept;
  KeySet& operator=(KeySet&&) noexcept;
  KeySet(const KeySet&) = delete;
  KeySet& operator=(const KeySet&) = delete;

  /// Adds one pair; returns false if it was already present. Throws InvalidArgument when `key`
  /// is not a digest of this set's width (a nonzero byte past it).
  bool insert(int group_id, const BlockDigest& key);
  /// A key that is not of this set's width is never contained.
  bool contains(int group_id, const BlockDigest& key) const;
  std::size_t size() const noexcept;
  void clear() noexcept;

  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override;
  std::size_t digest_size() const noexcept override { return digest_size_; }
  /// Holds the set's shared lock for the whole lookup (inserts wait for it).
  void run_lookup(const LookupBody& lookup) const override;

 private:
  std::size_t digest_size_ = BlockDigest::kSize;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit
