// Remote mode: lookups against a store that answers `batch_is_exist(keys)` (the real Mooncake
// store), a whole batch of requests at once.
//
// A RemoteLookup turns a batch into deduplicated lists of store keys (vLLM's key format and rank
// namespaces, store_keys.hpp), one list per round, and takes the store's answers back. A (group,
// digest) is present only when every namespace of its group holds it. The keys asked are the ones
// vLLM's Mooncake store worker asks (its candidate rule), evaluated at each request's bound:
//   * without partial hits: group g's chunk keys j < min(n / (B_g/H), floor(bound / B_g)), window
//     groups only the chunks their lookup mask keeps;
//   * with partial hits: every raw hash below min(n, floor(bound / H)), for every group.
// Keys outside that set count as absent, exactly as in vLLM's flow (and as in a store written
// through store_mask without a retention interval, which holds no others).
//
// Plans:
//   * one_round: every candidate key in one batch_is_exist, as vLLM does per request.
//   * multi_round: full attention's keys first (it stops at its first miss); then only the keys
//     the finders actually read, learnt by running the lookup on what is known so far: a read of
//     a key not asked yet makes it a key of the next round. The answer is computed from known keys
//     only, so it is exact; it usually needs 2-3 rounds and asks far fewer keys (window groups read
//     a few chunks near the hit, not all of them). The last allowed round asks every key left.
//
// Driving it: while (!done()) { answer(store.batch_is_exist(pending_keys())); } then read the
// result. remote_lookup() / worker_lookup() do exactly that with a callable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/store_keys.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

namespace gpu {
class BatchLookupEngine;  // prefixhit/gpu.hpp
}

/// How a deployment names its keys: the format and, per group id, the namespaces to check.
struct StoreLayout {
  StoreKeyFormat format;
  std::vector<std::vector<RankNamespace>> namespaces;  ///< [group id] -> namespaces, non-empty

  /// vLLM's layout for a parallel configuration: group g checks
  /// rank_namespaces(parallel, tp_replication_factor(spec_g, parallel)).
  static StoreLayout for_parallel(const Config& config, StoreKeyFormat format,
                                  const ParallelLayout& parallel = {});
};

enum class RemotePlan : std::uint8_t { one_round, multi_round };

struct RemoteOptions {
  RemotePlan plan = RemotePlan::one_round;
  /// multi_round: at most this many rounds (>= 2); the last one asks every candidate left.
  int max_rounds = 6;
};

/// What a remote lookup asked.
struct RemoteStats {
  int rounds = 0;
  std::int64_t keys_asked = 0;        ///< store keys over all rounds (namespaces included)
  std::int64_t candidates_asked = 0;  ///< distinct (group, digest) pairs asked
  std::int64_t candidates_total = 0;  ///< one_round: (request, group, hash) candidates before
                                      ///< deduplication; multi_round: those of round 1
  std::vector<std::int64_t> keys_per_round;
};

class RemoteLookup {
 public:
  /// Batch mode: find_longest_cache_hits semantics (max_lengths, apply_eagle) against the store.
  /// The batch is validated (Coordinator::validate_batch) and copied.
  static RemoteLookup batch(const Coordinator& coordinator, const StoreLayout& layout,
                            const LookupBatch& batch, const RemoteOptions& options = {});

  /// vLLM's worker-side lookup for each request: token_len = align_lookup_length(num_tokens);
  /// 0 when there are no hashes or token_len <= 0; else the hit at token_len, and when that hit
  /// reaches num_tokens, the hit at align_lookup_length(num_tokens - 1) (0 if that is <= 0), so
  /// the last token is recomputed. Request r owns digests [offsets[r], offsets[r+1]) and needs
  /// num_tokens[r] >= 0 and align_lookup_length(num_tokens[r]) <= n_r * H.
  static RemoteLookup worker(const Coordinator& coordinator, const StoreLayout& layout,
                             span<const BlockDigest> digests, span<const std::int64_t> offsets,
                             span<const std::int64_t> num_tokens,
                             const RemoteOptions& options = {});

  RemoteLookup(RemoteLookup&&) noexcept;
  RemoteLookup& operator=(RemoteLookup&&) noexcept;
  RemoteLookup(const RemoteLookup&) = delete;
  RemoteLookup& operator=(const RemoteLookup&) = delete;
  ~RemoteLookup();

  /// Whether every answer needed is in; then no keys are pending.
  bool done() const noexcept;
  /// The keys of the current round (deduplicated; namespaces of one candidate are adjacent).
  const std::vector<std::string>& pending_keys() const noexcept;
  /// The store's answers to pending_keys(), one per key: 1 is present, anything else (0, a
  /// negative error code) absent, as vLLM reads them. Runs the next round's planning. Throws
  /// InvalidArgument for a wrong count (nothing changes then) or when already done.
  void answer(span<const std::int64_t> results);

  const RemoteStats& stats() const noexcept;

  /// Batch mode, when done: the CPU engine's answer (equal to find_longest_cache_hits against
  /// the set of present keys of the candidate set).
  BatchLookupResult result() const;
  /// Batch mode, when done: the GPU engine's answer through its presence-table path.
  BatchLookupResult result(const gpu::BatchLookupEngine& engine) const;
  /// When done: the presence table of gpu.hpp's layout (one byte per request, group id and hash
  /// index; 1 where a candidate is present).
  std::vector<std::uint8_t> presence_table() const;
  /// Worker mode, when done: the hit length per request.
  std::vector<std::int64_t> hit_lengths() const;

 private:
  struct Impl;
  explicit RemoteLookup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// One batch_is_exist: an answer per key (1 = present).
using BatchIsExist = std::function<std::vector<std::int64_t>(const std::vector<std::string>&)>;

/// Drives a batch-mode RemoteLookup with `exist` and returns its CPU result.
BatchLookupResult remote_lookup(const Coordinator& coordinator, const StoreLayout& layout,
                                const LookupBatch& batch, const BatchIsExist& exist,
                                const RemoteOptions& options = {}, RemoteStats* stats = nullptr);

/// Drives a worker-mode RemoteLookup with `exist` and returns the hit lengths.
std::vector<std::int64_t> worker_lookup(
    const Coordinator& coordinator, const StoreLayout& layout, span<const BlockDigest> digests,
    span<const std::int64_t> offsets, span<const std::int64_t> num_tokens,
    const BatchIsExist& exist, const RemoteOptions& options = {}, RemoteStats* stats = nullptr);

}  // namespace prefixhit
