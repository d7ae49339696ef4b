// The CPU BlockIndex's implementation (internal to host/block_index.cpp): the table, its counts
// and lock, and the probe, insert and erase pipelines over the slot logic shared with the GPU
// index (detail/index_slots.hpp). A lookup prefetches a key's header line (on large tables with
// its preferred lane's digest line), decides on its tags and meta words, then prefetches the
// candidate's digest line (already on its way for most keys).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "host/block_index_table.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

struct BlockIndex::Impl {
  BlockIndexOptions options;
  std::uint64_t seed = 0;
  detail::IndexHashKey hash_key{};
  std::uint64_t max_buckets = 0;

  mutable std::shared_mutex mutex;
  cpu_index::Table table;
  std::uint64_t live = 0;
  std::uint64_t tombstones = 0;
  // Mirrors for the lock-free noexcept accessors.
  std::atomic<std::uint64_t> live_mirror{0};
  std::atomic<std::uint64_t> used_mirror{0};
  std::atomic<std::uint64_t> capacity_mirror{0};

  void publish_counts() {
    live_mirror.store(live, std::memory_order_relaxed);
    used_mirror.store(live + tombstones, std::memory_order_relaxed);
    capacity_mirror.store(table.slots(), std::memory_order_relaxed);
  }

  detail::SlotPlace place(const detail::SlotKey& key) const {
    return detail::place_of(detail::slot_hash(key, hash_key), table.bucket_mask);
  }

  std::int64_t find(const detail::SlotKey& key) const {
    return detail::find_slot(table.headers.get(), table.digests.get(), table.bucket_mask, key,
                             place(key));
  }

  /// A key to look up, by reference: the caller's digest where it lies and its meta word. The
  /// lookups keep this, not a copy of the key, between their stages.
  struct KeyRef {
    const BlockDigest* digest;
    std::uint32_t meta;
  };

  std::uint64_t hash_of(const KeyRef& key) const {
    return detail::digest_slot_hash(*key.digest, key.meta, hash_key);
  }

  /// Prefetches the digest line of a key's first candidate in its home bucket (header in cache);
  /// returns the candidates: the lanes whose tag and meta word equal the key's, the digests to
  /// compare.
  std::uint32_t prefetch_candidate(std::uint64_t bucket, std::uint8_t tag,
                                   std::uint32_t meta) const {
    const std::uint32_t c = cpu_index::candidates_of(table.headers.get() + bucket, tag, meta);
    if (c != 0) {
      cpu_index::prefetch(table.digests.get() + detail::slot_of(bucket, __builtin_ctz(c)));
    }
    return c;
  }

  /// Prefetches a key's home bucket header and its preferred lane's digest line together: a key
  /// inserted while that lane was free (most keys) is then found in one round trip to memory.
  void prefetch_home(std::uint64_t hash) const { prefetch_bucket(hash & table.bucket_mask, hash); }

  /// Prefetches a bucket's header and the digest line of the key's preferred lane there: inserts
  /// take that lane first in every bucket of a key's sequence, not only its home.
  void prefetch_bucket(std::uint64_t bucket, std::uint64_t hash) const {
    cpu_index::prefetch(table.headers.get() + bucket);
    cpu_index::prefetch(table.digests.get() +
                        detail::slot_of(bucket, detail::preferred_lane(hash)));
  }

  /// Matches the home header (in cache) and prefetches the first candidate's digest line. A key
  /// with no candidate in a full home bucket continues its sequence: its second bucket is
  /// prefetched the same way, so that the compare stage does not wait two round trips for it.
  std::uint32_t match_and_prefetch(std::uint64_t hash, std::uint32_t meta) const {
    const std::uint64_t bucket = hash & table.bucket_mask;
    const std::uint32_t c = prefetch_candidate(bucket, detail::tag_of(hash), meta);
    if (c == 0 && cpu_index::match_tags(table.headers.get() + bucket, detail::kEmptyTag) == 0) {
      prefetch_bucket(
          detail::probe_bucket(detail::place_of(hash, table.bucket_mask), 1, table.bucket_mask),
          hash);
    }
    return c;
  }

  /// The answer of a key from its hash and home-bucket candidates: found, or not found and
  /// decided (the home bucket has an empty slot, so no key lies further along its sequence), or
  /// undecided (a full bucket: find_slot follows the sequence). A candidate's meta word is known
  /// equal, so only its digest is compared. The empty-slot test waits for a miss: a hit, the
  /// common case, never needs it.
  bool home_answer(const KeyRef& key, std::uint64_t hash, std::uint32_t candidates) const {
    const std::uint64_t bucket = hash & table.bucket_mask;
    const BlockDigest* home = table.digests.get() + detail::slot_of(bucket, 0);
    for (std::uint32_t c = candidates; c != 0; c &= c - 1) {
      if (cpu_index::digest_equal(*key.digest, home[__builtin_ctz(c)])) {
        return true;
      }
    }
    if (cpu_index::match_tags(table.headers.get() + bucket, detail::kEmptyTag) != 0) {
      return false;
    }
    return detail::find_slot(table.headers.get(), table.digests.get(), table.bucket_mask,
                             detail::make_slot_key(*key.digest, key.meta),
                             detail::place_of(hash, table.bucket_mask)) >= 0;
  }

  /// Answers up to 64 keys (KeyAt(k) -> KeyRef); bit k of the result is key k's answer. Three
  /// stages per key: hash it and prefetch its home bucket header; match the header's tags and
  /// prefetch the digest of the first lane whose tag matches, if its meta word is the key's (the
  /// header is in cache then: a match stage checked both with 3% less time than a compare stage
  /// checking the meta word); compare. One loop runs them kLag
  /// keys apart (key k hashed, key k - kLag matched, key k - 2*kLag compared), so each stage's
  /// line had kLag keys of work to arrive, and the stages' instructions share the core instead
  /// of running as three loops in turn: 4-9% less time per lookup than the three loops, from
  /// cache and from memory alike (docs/perf/cpu.md, nineteenth round). This path is bound by
  /// instructions (a table in cache), so a key's common case is kept short: a hit is its first
  /// tag match, confirmed by that lane's meta word and digest; any other case (no tag match, a
  /// tag twin first) takes home_answer's full path. Between the stages a key is its hash and
  /// its first tag match's digest line (the caller's digest is read again, from cache).
  template <class KeyAt>
  std::uint64_t lookup_window(int count, const KeyAt& key_at) const {
    constexpr int kLag = 8;  // 4 and 8 even; 12 and 16 slower from cache
    std::uint64_t hashes[64];
    const BlockDigest* first_digest[64];  // null: the first tag match's meta word differs
    const detail::BucketHeader* headers = table.headers.get();
    std::uint64_t bits = 0;
    const auto hash_stage = [&](int k) {
      hashes[k] = hash_of(key_at(k));
      cpu_index::prefetch(headers + (hashes[k] & table.bucket_mask));
    };
    const auto match_stage = [&](int k) {
      const std::uint64_t bucket = hashes[k] & table.bucket_mask;
      const std::uint32_t c = cpu_index::match_tags(headers + bucket, detail::tag_of(hashes[k]));
      first_digest[k] = nullptr;
      if (c != 0) {
        const int lane = __builtin_ctz(c);
        if (headers[bucket].metas[lane] == key_at(k).meta) {
          first_digest[k] = table.digests.get() + detail::slot_of(bucket, lane);
          cpu_index::prefetch(first_digest[k]);
        }
      }
    };
    const auto compare_stage = [&](int k) {
      const KeyRef key = key_at(k);
      const bool first_is_key =
          first_digest[k] != nullptr && cpu_index::digest_equal(*key.digest, *first_digest[k]);
      if (first_is_key || full_answer(key, hashes[k])) {
        bits |= std::uint64_t{1} << k;
      }
    };
    const int a = std::min(count, kLag);
    const int b = std::min(count, 2 * kLag);
    int k = 0;
    for (; k < a; ++k) {
      hash_stage(k);
    }
    for (; k < b; ++k) {
      hash_stage(k);
      match_stage(k - kLag);
    }
    for (; k < count; ++k) {
      hash_stage(k);
      match_stage(k - kLag);
      compare_stage(k - 2 * kLag);
    }
    for (int m = std::max(count - kLag, 0); m < count; ++m) {
      match_stage(m);
    }
    for (int c = std::max(count - 2 * kLag, 0); c < count; ++c) {
      compare_stage(c);
    }
    return bits;
  }

  /// home_answer from the hash alone: the candidates (tag and meta word) matched again.
  bool full_answer(const KeyRef& key, std::uint64_t hash) const {
    const std::uint64_t bucket = hash & table.bucket_mask;
    return home_answer(
        key, hash,
        cpu_index::candidates_of(table.headers.get() + bucket, detail::tag_of(hash), key.meta));
  }

  // The erase pipeline (erase_many): a key's header is requested kTagAhead keys before it is
  // matched, its digest kSlotAhead keys before it is found; kRing holds them.
  static constexpr std::size_t kTagAhead = 16;
  static constexpr std::size_t kSlotAhead = 16;
  static constexpr std::size_t kLead = kTagAhead + kSlotAhead;
  static constexpr std::size_t kRing = 64;  // > kLead, a power of two
  static_assert(kLead < kRing, "ring too small");

  /// Keys per stage of lookup_stream. 16 made short lookups (79 keys) faster than the per-key
  /// pipeline; 32 and 64 made them slower, their one or two chunks waiting round trips in turn.
  static constexpr std::size_t kStreamChunk = 16;

  /// Answers the keys key_at(0 .. n-1) (KeyRef) through emit(i, found), in order, as a software
  /// pipeline over chunks of kStreamChunk keys: in period p chunk p+1 is hashed (its home
  /// headers and preferred lanes' digest lines prefetched, and chunk p+2's caller digests), chunk
  /// p's headers are matched on tags and meta words (the first candidate's digest line
  /// prefetched, the same line for most keys; for a full home bucket with no candidate, the second
  /// bucket's two lines), and chunk p-1 is compared. A miss needs only the header line (and costs
  /// one wasted digest line).
  ///
  /// Why each stage loops over a chunk instead of all stages running per key: on a table far
  /// larger than the caches a prefetch that finds no free miss buffer holds up retirement, so only
  /// the prefetches within the reorder window overlap. Per key the stages put about 130
  /// instructions between one key's home prefetches and the next key's; the hashing loop puts
  /// about 45. Single lookups on 61.6M keys took 12-15% less (docs/perf/cpu.md, fifteenth
  /// round). The caller digests are prefetched one key at a time inside the hashing loop: a
  /// separate burst of them per chunk lost half of long streams' digests before they were read.
  template <class KeyAt, class Emit>
  void lookup_stream(std::size_t n, const KeyAt& key_at, const Emit& emit) const {
    constexpr std::size_t kChunk = kStreamChunk;
    constexpr std::size_t kSlots = 4 * kChunk;  // holds chunks p-1 .. p+1; a power of two
    static_assert((kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");
    std::uint64_t hashes[kSlots];
    std::uint32_t candidates[kSlots];
    const std::size_t chunks = (n + kChunk - 1) / kChunk;
    const auto end_of = [&](std::size_t c) { return std::min(n, (c + 1) * kChunk); };
    const auto hash_chunk = [&](std::size_t c) {
      for (std::size_t k = c * kChunk, e = end_of(c); k < e; ++k) {
        if (k + kChunk < n) {
          cpu_index::prefetch_digest(key_at(k + kChunk).digest);
        }
        const std::uint64_t hash = hash_of(key_at(k));
        hashes[k % kSlots] = hash;
        prefetch_home(hash);
      }
    };
    const auto match_chunk = [&](std::size_t c) {
      for (std::size_t k = c * kChunk, e = end_of(c); k < e; ++k) {
        candidates[k % kSlots] = match_and_prefetch(hashes[k % kSlots], key_at(k).meta);
      }
    };
    const auto compare_chunk = [&](std::size_t c) {
      for (std::size_t k = c * kChunk, e = end_of(c); k < e; ++k) {
        emit(k, home_answer(key_at(k), hashes[k % kSlots], candidates[k % kSlots]));
      }
    };
    if (chunks == 0) {
      return;
    }
    // Chunk 0's caller digests are not prefetched by an earlier chunk: request them all at once,
    // so that its hashing waits one round trip, not one per key.
    for (std::size_t k = 0; k < end_of(0); ++k) {
      cpu_index::prefetch_digest(key_at(k).digest);
    }
    hash_chunk(0);
    for (std::size_t p = 0; p <= chunks; ++p) {
      if (p + 1 < chunks) {
        hash_chunk(p + 1);
      }
      if (p < chunks) {
        match_chunk(p);
      }
      if (p >= 1) {
        compare_chunk(p - 1);
      }
    }
  }

  template <class KeyAt>
  void lookup_many(std::size_t n, const KeyAt& key_at, std::uint8_t* out) const {
    lookup_stream(n, key_at, [&](std::size_t i, bool found) { out[i] = found ? 1 : 0; });
  }

  /// Writes a key into lane `lane` of `bucket`: meta and digest, then the tag.
  static void store_slot(cpu_index::Table& t, std::uint64_t bucket, int lane,
                         const detail::SlotKey& key, std::uint8_t tag, const BlockDigest& digest) {
    detail::BucketHeader& header = t.headers.get()[bucket];
    header.metas[lane] = static_cast<std::uint32_t>(key.meta);
    t.digests.get()[detail::slot_of(bucket, lane)] = digest;
    header.tags[lane] = tag;
  }

  /// Places a key known to be absent into the first free slot of its sequence (rehash).
  static void place_new(cpu_index::Table& t, const detail::SlotKey& key, const detail::SlotPlace& p,
                        const BlockDigest& digest) {
    for (std::uint64_t i = 0; i <= t.bucket_mask; ++i) {
      const std::uint64_t bucket = detail::probe_bucket(p, i, t.bucket_mask);
      const std::uint32_t empty =
          cpu_index::match_tags(t.headers.get() + bucket, detail::kEmptyTag);
      if (empty != 0) {
        store_slot(t, bucket, detail::first_lane_from(empty, p.lane), key, p.tag, digest);
        return;
      }
    }
  }

  /// Calls visit(bucket, lane, meta, digest) for every live slot of `t`, in slot order: the walk
  /// of a rehash, of for_each_key and of layout().
  template <class Visit>
  static void for_each_live_slot(const cpu_index::Table& t, const Visit& visit) {
    for (std::uint64_t b = 0; b < t.buckets; ++b) {
      const detail::BucketHeader& header = t.headers.get()[b];
      for (int lane = 0; lane < detail::kBucketSlots; ++lane) {
        if (detail::is_live_tag(header.tags[lane])) {
          visit(b, lane, header.metas[lane], t.digests.get()[detail::slot_of(b, lane)]);
        }
      }
    }
  }

  /// Rebuilds into `buckets` buckets, dropping tombstones. Leaves everything as it was when the
  /// allocation fails (CapacityExceeded).
  void rehash(std::uint64_t buckets) {
    cpu_index::Table next = cpu_index::allocate_table(buckets);
    for_each_live_slot(table, [&](std::uint64_t /*bucket*/, int /*lane*/, std::uint32_t meta,
                                  const BlockDigest& digest) {
      const detail::SlotKey key = detail::make_slot_key(digest, meta);
      place_new(next, key, detail::place_of(detail::slot_hash(key, hash_key), next.bucket_mask),
                digest);
    });
    table = std::move(next);
    tombstones = 0;
  }

  /// Inserts one key at its precomputed place; returns whether it was new. The caller
  /// guarantees a free slot exists.
  bool insert_one(const detail::SlotKey& key, const detail::SlotPlace& p,
                  const BlockDigest& digest) {
    if (detail::find_slot(table.headers.get(), table.digests.get(), table.bucket_mask, key, p) >=
        0) {
      return false;
    }
    // Absent: take the first tombstone or empty slot of the sequence (the sequence up to the
    // first bucket with an empty slot, which find_slot has just read).
    for (std::uint64_t i = 0; i <= table.bucket_mask; ++i) {
      const std::uint64_t bucket = detail::probe_bucket(p, i, table.bucket_mask);
      detail::BucketHeader& header = table.headers.get()[bucket];
      const std::uint32_t reusable = cpu_index::match_tags(&header, detail::kTombstoneTag) |
                                     cpu_index::match_tags(&header, detail::kEmptyTag);
      if (reusable != 0) {
        const int lane = detail::first_lane_from(reusable, p.lane);
        if (header.tags[lane] == detail::kTombstoneTag) {
          --tombstones;
        }
        store_slot(table, bucket, lane, key, p.tag, digest);
        ++live;
        return true;
      }
    }
    // reserve_for keeps the load below 100%, so this cannot happen; fail loudly, never drop.
    throw CapacityExceeded("BlockIndex::insert: no free slot found (internal error)");
  }

  /// Makes room for `n` keys (KeyAt(i) -> detail::SlotKey), growing or purging tombstones as
  /// needed; throws CapacityExceeded, with nothing changed, when the new keys cannot fit.
  template <class KeyAt>
  void reserve_for(std::size_t n, const KeyAt& key_at) {
    const double mlf = options.max_load_factor;
    const std::uint64_t limit = detail::load_limit(table.slots(), mlf);
    if (live + tombstones + n <= limit) {
      return;  // fits even if every key is new
    }
    // Keys absent from the table bound the new keys from above (in-batch duplicates count
    // more than once); an insert takes at most that many free slots.
    std::vector<detail::SlotKey> missing;
    for (std::size_t i = 0; i < n; ++i) {
      const detail::SlotKey key = key_at(i);
      if (find(key) < 0) {
        missing.push_back(key);
      }
    }
    if (live + tombstones + missing.size() <= limit) {
      return;
    }
    std::uint64_t buckets =
        detail::plan_buckets(live + missing.size(), table.buckets, max_buckets, mlf);
    if (buckets == 0) {
      // Only an exact count of distinct new keys can tell whether they fit.
      std::sort(missing.begin(), missing.end(), cpu_index::slot_key_less);
      const std::uint64_t distinct = static_cast<std::uint64_t>(
          std::unique(missing.begin(), missing.end(), cpu_index::slot_key_same) - missing.begin());
      buckets = detail::plan_buckets(live + distinct, table.buckets, max_buckets, mlf);
      if (buckets == 0) {
        throw CapacityExceeded(
            "BlockIndex::insert: " + std::to_string(distinct) + " new keys on top of " +
            std::to_string(live) + " would exceed the limit of " +
            std::to_string(detail::load_limit(detail::slots_of_buckets(max_buckets), mlf)) +
            " keys (max_capacity " + std::to_string(options.max_capacity) +
            " slots, max_load_factor " + std::to_string(mlf) + "); nothing was inserted");
      }
    }
    rehash(buckets);
  }

  template <class KeyAt>
  std::size_t insert_many(std::size_t n, const KeyAt& key_at, const BlockDigest* digests) {
    std::unique_lock<std::shared_mutex> lock(mutex);
    reserve_for(n, key_at);
    // In chunks: hash and cpu_index::prefetch the home buckets, then cpu_index::prefetch (for
    // writing) the slot each key will most likely take, then insert. Overlaps the cache misses of a
    // chunk.
    constexpr std::size_t kChunk = 32;
    detail::SlotKey keys[kChunk];
    detail::SlotPlace places[kChunk];
    std::size_t added = 0;
    const detail::BucketHeader* headers = table.headers.get();
    for (std::size_t start = 0; start < n; start += kChunk) {
      const std::size_t count = std::min(kChunk, n - start);
      for (std::size_t k = 0; k < count; ++k) {
        keys[k] = key_at(start + k);
        places[k] = place(keys[k]);
        __builtin_prefetch(headers + places[k].bucket, 1, 3);
      }
      for (std::size_t k = 0; k < count; ++k) {
        const detail::BucketHeader* header = headers + places[k].bucket;
        const std::uint32_t present = cpu_index::candidates_of(
            header, places[k].tag, static_cast<std::uint32_t>(keys[k].meta));
        const std::uint32_t empty = cpu_index::match_tags(header, detail::kEmptyTag);
        if ((present | empty) != 0) {
          const int lane = present != 0 ? __builtin_ctz(present)
                                        : detail::first_lane_from(empty, places[k].lane);
          __builtin_prefetch(table.digests.get() + detail::slot_of(places[k].bucket, lane), 1, 3);
        }
      }
      for (std::size_t k = 0; k < count; ++k) {
        added += insert_one(keys[k], places[k], digests[start + k]) ? 1U : 0U;
      }
    }
    publish_counts();
    return added;
  }

  /// Erases the keys key_at(0 .. n-1) in order, as a software pipeline like lookup_stream's:
  /// key i is hashed and its home bucket's header prefetched (for writing), key i-kTagAhead's
  /// header is matched and its first candidate's digest prefetched, and key i-kLead is found and
  /// erased. The last stage re-reads the header and probes exactly as find() does, so an erase
  /// earlier in the batch (a duplicate key, a bucket turned full of tombstones) is always seen:
  /// the earlier stages only warm the cache, they decide nothing.
  template <class KeyAt>
  std::size_t erase_many(std::size_t n, const KeyAt& key_at) {
    struct Pending {
      detail::SlotKey key;
      detail::SlotPlace place;
    };
    Pending ring[kRing];
    std::unique_lock<std::shared_mutex> lock(mutex);
    std::size_t removed = 0;
    detail::BucketHeader* headers = table.headers.get();
    const BlockDigest* digests = table.digests.get();
    for (std::size_t i = 0; i < n + kLead; ++i) {
      if (i < n) {
        Pending& p = ring[i % kRing];
        p.key = key_at(i);
        p.place = place(p.key);
        __builtin_prefetch(headers + p.place.bucket, 1, 3);
      }
      if (i >= kTagAhead && i - kTagAhead < n) {
        const Pending& p = ring[(i - kTagAhead) % kRing];
        prefetch_candidate(p.place.bucket, p.place.tag, static_cast<std::uint32_t>(p.key.meta));
      }
      if (i < kLead) {
        continue;
      }
      const Pending& p = ring[(i - kLead) % kRing];
      const std::int64_t found =
          detail::find_slot(headers, digests, table.bucket_mask, p.key, p.place);
      if (found < 0) {
        continue;
      }
      const auto slot = static_cast<std::uint64_t>(found);
      detail::BucketHeader& header = headers[detail::bucket_of_slot(slot)];
      const std::uint8_t erased = detail::erased_tag(detail::load_bucket_tags(&header));
      header.tags[detail::lane_of_slot(slot)] = erased;
      tombstones += erased == detail::kTombstoneTag ? 1U : 0U;
      --live;
      ++removed;
    }
    publish_counts();
    return removed;
  }
};

}  // namespace prefixhit
