// The coordinator: merges groups into spec groups, spreads the EAGLE flag, and answers lookups,
// load masks, store masks and lookup masks exactly as the reference does (SEMANTICS.md).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

/// Many lookups at once. Request r owns digests [offsets[r], offsets[r+1]).
struct LookupBatch {
  span<const BlockDigest> digests;
  span<const std::int64_t> offsets;      ///< num_requests + 1 entries, non-decreasing, from 0
  span<const std::int64_t> max_lengths;  ///< one per request, 0 <= max_length <= 2^40
  span<const std::uint8_t> apply_eagle;  ///< one per request, or empty for "true" everywhere

  std::size_t num_requests() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
};

struct BatchOptions {
  int num_threads = 0;  ///< at most: 0, every hardware thread; 1, the calling thread only
  /// Workers start only for work worth them: one per this many seconds of work (up to
  /// num_threads), the work judged by earlier batches' pace (thread seconds per hash, kept per
  /// process) or, before there is one, by timing this batch's first requests on the calling
  /// thread. A worker costs a wake-up (workers are kept in a process-wide pool; 5-45 us,
  /// 18-70 us when a thread must start) and its share of the batch loses the overlap of one
  /// probe stream. 0: always num_threads. A worker that finishes spins for its next job for
  /// PREFIXHIT_WORKER_SPIN_US microseconds (environment, 0 to 1000000; default 100) before it
  /// parks, so back-to-back batches skip the wake-up; 0 parks at once (cores shared with other
  /// processes). A bad value fails every batch with num_threads other than 1, InvalidArgument.
  double min_seconds_per_worker = 250e-6;
};

/// Results of a batch, laid out for a runtime to read directly: row r, column g is request r's
/// list for group id g in compact form (see GroupHit).
struct BatchLookupResult {
  std::size_t num_requests = 0;
  int num_groups = 0;
  std::vector<std::int64_t> hit_lengths;       ///< [num_requests]
  std::vector<std::int64_t> num_blocks;        ///< [num_requests * num_groups]
  std::vector<std::int64_t> num_placeholders;  ///< [num_requests * num_groups]

  /// Request r's result, equal to the one-by-one call.
  LookupResult request(std::size_t r) const;
};

/// The (group id, key) pairs one lookup reads, for a store that is remote: the runtime asks its
/// store about all of them in one batch and hands the answers to PlanAnswers.
/// The plan follows the lookup mask: full attention, chunked local and Mamba groups contribute
/// every block up to max_length (and, with partial hits, every hash their fine-grained probes
/// read); window groups only the chunks their lookup mask keeps, extended to floor(max_length/B)
/// so that the EAGLE peek chunk past the aligned length is included. Keys outside the plan count
/// as absent, which is what a store written through store_mask holds.
struct KeyPlan {
  std::int64_t num_hashes = 0;
  std::vector<std::int32_t> group_ids;     ///< per entry
  std::vector<std::int64_t> hash_indices;  ///< per entry: the key is hashes[hash_index]
  std::vector<BlockDigest> keys;           ///< per entry

  /// The width of `keys`: the coordinator's Config::digest_size.
  std::size_t digest_size = BlockDigest::kSize;

  std::size_t size() const noexcept { return keys.size(); }
};

/// The store's answers to a KeyPlan: present[i] says whether plan entry i is in the store.
/// The answers keep the plan's keys: a lookup whose hashes differ from them at a planned index
/// (answers of one request used for another) throws InvalidArgument instead of a false hit.
/// Its digest width is the plan's.
class PlanAnswers final : public ExistenceSource {
 public:
  PlanAnswers(const KeyPlan& plan, span<const std::uint8_t> present, int num_groups);
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override;
  std::size_t digest_size() const noexcept override { return digest_size_; }

 private:
  std::int64_t num_hashes_;
  int num_groups_;
  std::size_t digest_size_;
  std::vector<std::uint8_t> table_;    ///< [group][hash index]
  std::vector<BlockDigest> keys_;      ///< [hash index]: the plan's key there
  std::vector<std::uint8_t> planned_;  ///< [hash index]: 1 if the plan reads that index
};

class Coordinator {
 public:
  /// Validates the configuration (SEMANTICS.md 1.1) and plans the spec groups. Throws
  /// InvalidConfig naming the offending field or rule. Sizes (block sizes, windows, chunks, H, S,
  /// R) must be at most 2^40 tokens, which keeps all length arithmetic free of overflow.
  explicit Coordinator(Config config);

  const Config& config() const noexcept { return config_; }
  int num_groups() const noexcept { return static_cast<int>(config_.groups.size()); }
  /// Spec groups after merging, sorting and the EAGLE fallback, in processing order.
  const std::vector<SpecGroup>& spec_groups() const noexcept { return spec_groups_; }
  /// Sorted member ids of EAGLE-flagged spec groups.
  const std::vector<int>& eagle_group_ids() const noexcept { return eagle_group_ids_; }
  bool enable_partial_hash_hits() const noexcept { return plan_.partial; }
  Semantics semantics() const noexcept { return config_.semantics; }
  /// A: H with partial hits, else S.
  std::int64_t lookup_alignment() const noexcept { return plan_.alignment; }
  /// The device-copyable plan the finders (CPU and CUDA) run on.
  const detail::LookupPlan& plan() const noexcept { return plan_; }

  /// floor(length / A) * A.
  std::int64_t align_lookup_length(std::int64_t length) const noexcept;

  /// Keys of the blocks of a group with `block_size` (SEMANTICS.md 1.2): the last hash of each
  /// whole block. Throws InvalidArgument unless block_size is a positive multiple of H, or when
  /// a key is not of Config::digest_size's width.
  std::vector<BlockDigest> chunk_keys(span<const BlockDigest> hashes,
                                      std::int64_t block_size) const;

  /// The longest prefix hit for one request (SEMANTICS.md 5). Throws InvalidArgument unless
  /// 0 <= max_length <= 2^40, or the finder error kinds of SEMANTICS.md 4. A max_length past
  /// the hashes behaves as in the reference: full attention stops at the last hash; a window,
  /// chunked-local or Mamba finder that would index past the hash list throws InvalidArgument.
  /// Digest width: `store` must hold keys of Config::digest_size (ExistenceSource::digest_size),
  /// and every hash the lookup reads must be of that width (zero bytes past it), else
  /// InvalidArgument naming the store's width or the hash.
  LookupResult find_longest_cache_hit(span<const BlockDigest> hashes, std::int64_t max_length,
                                      const ExistenceSource& store, bool apply_eagle = true) const;

  /// Which blocks of an already-decided hit to read (SEMANTICS.md 6).
  LookupResult load_mask(span<const BlockDigest> hashes, std::int64_t token_len) const;
  LookupResult load_mask(std::int64_t num_hashes, std::int64_t token_len) const;

  /// Which chunks of each group a save of tokens [start_token, aligned_token_len) writes
  /// (SEMANTICS.md 7). Throws UnalignedLength unless aligned_token_len is a multiple of A, and
  /// InvalidArgument for negative lengths or a mask longer than 2^28 chunks. num_prompt_tokens
  /// must not be negative under pr49069; vllm-0.33 takes any value >= -2^40 (the reference
  /// floors the boundaries, SEMANTICS.md 11.7).
  std::vector<ChunkMask> store_mask(std::int64_t aligned_token_len, std::int64_t start_token = 0,
                                    std::optional<std::int64_t> num_prompt_tokens = {}) const;
  /// store_mask with start_token 0, no retention interval and no prompt length.
  std::vector<ChunkMask> lookup_mask(std::int64_t aligned_token_len) const;

  /// The keys one lookup may read, for a remote store (see KeyPlan).
  KeyPlan key_plan(span<const BlockDigest> hashes, std::int64_t max_length) const;

  /// Many lookups against one store, spread over threads. Each result equals the one-by-one
  /// call; the first failing request's error is thrown, naming the request.
  BatchLookupResult find_longest_cache_hits(const LookupBatch& batch, const ExistenceSource& store,
                                            const BatchOptions& options = {}) const;

  /// Checks a batch's shape (offsets, lengths, max_lengths) and throws InvalidArgument naming
  /// the first problem. Shared by every backend.
  void validate_batch(const LookupBatch& batch) const;

 private:
  std::vector<ChunkMask> masks(std::int64_t aligned_len, std::int64_t start_token,
                               std::optional<std::int64_t> num_prompt_tokens,
                               std::optional<std::int64_t> retention_interval, bool store) const;

  Config config_;
  std::vector<SpecGroup> spec_groups_;
  std::vector<int> eagle_group_ids_;
  std::vector<std::uint8_t> is_eagle_group_;
  detail::LookupPlan plan_{};
};

}  // namespace prefixhit
