// Router mode (issue 12): which workers hold which blocks, and every worker's exact prefix hit
// for a batch of requests in one pass over the request's probes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

/// A worker (an engine instance, or one dp_rank of one) in [0, ResidencyOptions::num_workers).
using WorkerId = std::uint32_t;
/// At most this many workers per residency index.
inline constexpr int kMaxWorkers = 1 << 16;
/// At most this many tiers (media: e.g. 0 = GPU, 1 = CPU, 2 = STORAGE) per worker.
inline constexpr int kMaxTiers = 4;

/// Where the event mirror sends what each worker's KV events say. One call per event of one
/// worker; the mirror maps (endpoint, dp_rank) to a WorkerId. Implemented by ResidencyIndex.
class ResidencySink {
 public:
  virtual ~ResidencySink() = default;
  /// BlockStored: the worker now holds these keys of one group, on `tier`.
  virtual void blocks_stored(WorkerId worker, Namespace ns, int group_id,
                             span<const BlockDigest> keys, std::size_t digest_size, int tier) = 0;
  /// BlockRemoved: the worker no longer holds them on `tier` (absent keys are ignored).
  virtual void blocks_removed(WorkerId worker, Namespace ns, int group_id,
                              span<const BlockDigest> keys, std::size_t digest_size, int tier) = 0;
  /// AllBlocksCleared, or the worker left: drops every key of the worker on every tier.
  virtual void all_blocks_cleared(WorkerId worker) = 0;
};

struct ResidencyOptions {
  int num_workers = 1;                     ///< in [1, kMaxWorkers]
  int num_tiers = 1;                       ///< in [1, kMaxTiers]
  std::size_t initial_capacity = 1 << 16;  ///< key slots reserved up front
  std::uint64_t seed = 0;                  ///< 0: a random hash seed
};

/// Memory of a residency index, in bytes, and what it holds.
struct ResidencyMemory {
  std::size_t keys = 0;         ///< live keys (held by at least one worker)
  std::size_t pairs = 0;        ///< live (key, worker-tier) pairs
  std::size_t worker_sets = 0;  ///< distinct worker sets in use
  std::size_t table_bytes = 0;  ///< key table (digest, namespace, group, width, set id per slot)
  std::size_t set_bytes = 0;    ///< the interned worker sets and their bookkeeping
  /// Bytes per live pair beyond the key itself: the set-id word of each key and the sets.
  double bytes_per_pair_beyond_key() const noexcept;
};

/// The residency index: (namespace, group id, digest) -> the set of workers (and tiers) holding
/// the key. Keys point to interned worker sets (bitsets over worker x tier columns), so a key
/// held by many workers costs one 4-byte set id, not one entry per worker.
///
/// all_blocks_cleared / clear_worker runs in time proportional to the number of distinct worker
/// sets (not keys): it clears the worker's bits in each set in place. Keys left pointing to an
/// empty set count as absent and are swept by a later rehash.
///
/// Thread safety: any number of concurrent readers (scoring) and writers; each call takes one
/// internal reader-writer lock, so a bulk call is atomic and a failed call applies nothing.
class ResidencyIndex final : public ResidencySink {
 public:
  explicit ResidencyIndex(const ResidencyOptions& options);
  ~ResidencyIndex() override;
  ResidencyIndex(const ResidencyIndex&) = delete;
  ResidencyIndex& operator=(const ResidencyIndex&) = delete;

  /// Adds the keys for (worker, tier); returns how many pairs were new. Throws InvalidArgument
  /// (applying nothing) for a worker, tier, namespace, group id or width out of range, or a key
  /// with a nonzero byte past the width.
  std::size_t insert(WorkerId worker, Namespace ns, int group_id, span<const BlockDigest> keys,
                     std::size_t digest_size = BlockDigest::kSize, int tier = 0);
  /// Removes the keys for (worker, tier); returns how many pairs were removed.
  std::size_t erase(WorkerId worker, Namespace ns, int group_id, span<const BlockDigest> keys,
                    std::size_t digest_size = BlockDigest::kSize, int tier = 0);
  /// Drops every key of the worker on every tier. Time: O(distinct worker sets).
  void clear_worker(WorkerId worker);
  void clear();

  /// Whether the worker holds the key on any tier in `tier_mask`.
  bool contains(WorkerId worker, Namespace ns, int group_id, const BlockDigest& key,
                std::size_t digest_size = BlockDigest::kSize, std::uint32_t tier_mask = ~0U) const;

  int num_workers() const noexcept;
  int num_tiers() const noexcept;
  std::size_t size() const;  ///< live keys
  ResidencyMemory memory() const;

  /// One worker's keys as an ExistenceSource (the naive per-worker lookup; tests and benchmarks).
  /// It borrows the index.
  class WorkerView final : public ExistenceSource {
   public:
    WorkerView(const ResidencyIndex& index, WorkerId worker, Namespace ns,
               std::size_t digest_size = BlockDigest::kSize, std::uint32_t tier_mask = ~0U)
        : index_(&index),
          worker_(worker),
          ns_(ns),
          digest_size_(digest_size),
          tier_mask_(tier_mask) {}
    std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                        std::int64_t step, int count) const override;
    std::size_t digest_size() const noexcept override { return digest_size_; }

   private:
    const ResidencyIndex* index_;
    WorkerId worker_;
    Namespace ns_;
    std::size_t digest_size_;
    std::uint32_t tier_mask_;
  };

  // ResidencySink
  void blocks_stored(WorkerId worker, Namespace ns, int group_id, span<const BlockDigest> keys,
                     std::size_t digest_size, int tier) override;
  void blocks_removed(WorkerId worker, Namespace ns, int group_id, span<const BlockDigest> keys,
                      std::size_t digest_size, int tier) override;
  void all_blocks_cleared(WorkerId worker) override;

  struct Impl;
  /// Internal: the scorer's access (host/router).
  const Impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Feeds one worker's KV events into a ResidencyIndex: give each worker's EventMirror (one
/// endpoint per worker; a dp-ranked engine publishes one endpoint per rank) its own sink with that
/// worker's id. The mirror handles AllBlocksCleared and resyncs by erasing the keys it put in,
/// which this sink turns into the worker's pairs only. A call validates every key (group id,
/// width, bytes past the width) before applying any, so a throwing call applies nothing.
class WorkerResidencySink final : public MirrorSink {
 public:
  /// Throws InvalidArgument for a worker or tier outside the index.
  WorkerResidencySink(ResidencyIndex& index, WorkerId worker, int tier = 0);
  void insert(Namespace ns, span<const EventKey> keys) override;
  void erase(Namespace ns, span<const EventKey> keys) override;
  /// (key, worker-tier) pairs this sink holds.
  std::size_t size() const override;

 private:
  void apply(Namespace ns, span<const EventKey> keys, bool insert);

  ResidencyIndex* index_;
  WorkerId worker_;
  int tier_;
  std::atomic<std::size_t> pairs_{0};  // written by the mirror thread, read by stats()
};

struct ScoreOptions {
  Namespace ns = 0;               ///< the namespace the requests are looked up in
  std::uint32_t tier_mask = ~0U;  ///< tiers that count as held (bit t: tier t)
  int num_threads = 0;            ///< 0: every hardware thread; 1: the calling thread only
};

/// Every worker's result for every request: row-major [request][worker] (and [..][group]).
struct RouterScores {
  std::size_t num_requests = 0;
  int num_workers = 0;
  int num_groups = 0;
  std::vector<std::int64_t> hit_lengths;       ///< [num_requests * num_workers]
  std::vector<std::int64_t> num_blocks;        ///< [num_requests * num_workers * num_groups]
  std::vector<std::int64_t> num_placeholders;  ///< [num_requests * num_workers * num_groups]
  /// Distinct worker classes the scorer ended with, summed over requests (a cost measure).
  std::size_t classes = 0;
  /// Keys read from the residency index (each probed key once per request), summed.
  std::size_t index_reads = 0;
  /// Existence bits answered to the finders over all classes, summed (the bit work).
  std::size_t probes = 0;
  /// Finder runs (fixed points) over all classes, summed: final classes plus the runs a split
  /// cut short (a cost measure of the CPU scorer; 0 from the GPU scorer).
  std::size_t runs = 0;

  /// Request r's result on worker w: equal to the single-store lookup on w's keys.
  LookupResult result(std::size_t r, int w) const;
};

/// Scores every worker for every request of the batch, exactly as W single-store lookups would
/// (one per worker, against that worker's keys), but in one pass over each request's probes:
/// each probed key's worker set is read once, and workers are split into classes only where
/// their keys differ. Throws InvalidArgument for a bad batch (see Coordinator::validate_batch)
/// or a hash not of Config::digest_size's width, and the finder errors of SEMANTICS.md 4,
/// naming the request.
RouterScores score_workers(const Coordinator& coordinator, const LookupBatch& batch,
                           const ResidencyIndex& residency, const ScoreOptions& options = {});

/// The k best workers per request ([num_requests * k], -1 past the last worker): longest hit
/// first, then lowest load[w], then lowest worker id. `load` has num_workers entries or is empty.
std::vector<std::int32_t> top_k_workers(const RouterScores& scores, int k,
                                        span<const double> load = {});

}  // namespace prefixhit
