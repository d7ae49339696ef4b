// The CPU BlockIndex's implementation (internal to host/block_index.cpp): its options, counts and
// lock, and the insert, erase and rehash pipelines over the slot logic shared with the GPU index
// (detail/index_slots.hpp). The table and the lookups that read it are its base,
// cpu_index::TableLookups (host/block_index_lookups.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "host/block_index_lookups.hpp"
#include "host/block_index_table.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

struct BlockIndex::Impl : cpu_index::TableLookups {
  BlockIndexOptions options;
  std::uint64_t seed = 0;
  std::uint64_t max_buckets = 0;

  mutable std::shared_mutex mutex;
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

  // The erase pipeline (erase_many): a key's header is requested kTagAhead keys before it is
  // matched, its digest kSlotAhead keys before it is found; kRing holds them.
  static constexpr std::size_t kTagAhead = 16;
  static constexpr std::size_t kSlotAhead = 16;
  static constexpr std::size_t kLead = kTagAhead + kSlotAhead;
  static constexpr std::size_t kRing = 64;  // > kLead, a power of two
  static_assert(kLead < kRing, "ring too small");

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
