// The resident CPU block index: open addressing over 12-slot buckets, each with a 64-byte header
// line of tags and meta words, using the slot logic shared with the GPU index
// (detail/index_slots.hpp).
#include "prefixhit/block_index.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <shared_mutex>
#include <string>
#include <vector>

#include "host/probes.hpp"
#include "host/scratch_pool.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace prefixhit {

namespace detail {
namespace {
std::atomic<std::uint64_t> g_planned_lookup_min_bytes{kPlannedLookupMinBytes};
}  // namespace

std::uint64_t planned_lookup_min_bytes() noexcept {
  return g_planned_lookup_min_bytes.load(std::memory_order_relaxed);
}
void set_planned_lookup_min_bytes(std::uint64_t bytes) noexcept {
  g_planned_lookup_min_bytes.store(bytes, std::memory_order_relaxed);
}
}  // namespace detail

static_assert(kMaxNamespace == detail::kIndexMaxNamespace, "namespace width must agree");

namespace {

using detail::kBucketSlots;
using detail::SlotKey;
using detail::SlotPlace;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

template <class T>
using AlignedArray = std::unique_ptr<T, FreeDeleter>;

/// 64-byte aligned storage for `count` elements; throws CapacityExceeded when it cannot be had.
/// Arrays of 2 MiB or more are 2 MiB aligned and asked to use huge pages: a probe of a large
/// table then costs a cache miss without a page walk on top (issue 14).
template <class T>
AlignedArray<T> allocate_aligned(std::uint64_t count, const char* what) {
  constexpr std::uint64_t kHugePage = std::uint64_t{1} << 21;
  const std::uint64_t align = count * sizeof(T) >= kHugePage ? kHugePage : 64;
  const std::uint64_t bytes = ((count * sizeof(T)) + align - 1) & ~(align - 1);
  void* p = bytes == 0 ? nullptr
                       : std::aligned_alloc(static_cast<std::size_t>(align),
                                            static_cast<std::size_t>(bytes));
  if (p == nullptr) {
    throw CapacityExceeded("BlockIndex: cannot allocate " + std::to_string(bytes) + " bytes for " +
                           what);
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHugePage) {
    madvise(p, static_cast<std::size_t>(bytes), MADV_HUGEPAGE);  // a hint: failure is harmless
  }
#endif
  return AlignedArray<T>(static_cast<T*>(p));
}

/// One table generation: the layout of index_slots.hpp (bucket headers, digests apart).
struct Table {
  std::uint64_t buckets = 0;  // a power of two
  std::uint64_t bucket_mask = 0;
  AlignedArray<detail::BucketHeader> headers;
  AlignedArray<BlockDigest> digests;

  std::uint64_t slots() const { return detail::slots_of_buckets(buckets); }
};

/// Every slot empty (the spare tag bytes and the meta words zero too).
void clear_headers(Table& t) {
  static_assert(detail::kEmptyTag == 0, "a zeroed header is an empty bucket");
  std::memset(static_cast<void*>(t.headers.get()), 0,
              static_cast<std::size_t>(t.buckets * sizeof(detail::BucketHeader)));
}

Table allocate_table(std::uint64_t buckets) {
  Table t;
  t.buckets = buckets;
  t.bucket_mask = buckets - 1;
  const std::uint64_t slots = detail::slots_of_buckets(buckets);
  t.headers = allocate_aligned<detail::BucketHeader>(buckets, "bucket headers");
  t.digests = allocate_aligned<BlockDigest>(slots, "digests");
  clear_headers(t);
  return t;
}

/// Bit j set iff slot j of the bucket holds `tag` (SSE2 where available, else the SWAR twin).
inline std::uint32_t match_tags(const detail::BucketHeader* header, std::uint8_t tag) {
#if defined(__SSE2__)
  return detail::match_bucket_sse2(header, tag);
#else
  return detail::match_bucket(detail::load_bucket_tags(header), tag);
#endif
}

/// Lanes whose tag and meta word both equal the key's: the slots whose digest a hit must
/// compare. The header line alone rules out the others.
inline std::uint32_t candidates_of(const detail::BucketHeader* header, std::uint8_t tag,
                                   const SlotKey& key) {
  std::uint32_t c = match_tags(header, tag);
  for (std::uint32_t m = c; m != 0; m &= m - 1) {
    const int lane = __builtin_ctz(m);
    if (header->metas[lane] != key.meta) {
      c &= ~(1U << lane);
    }
  }
  return c;
}

inline void prefetch(const void* p) {
  __builtin_prefetch(p, 0, 3);
}

std::uint64_t random_seed() {
  std::uint64_t seed = 0;
  try {
    std::random_device device;
    seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {
    seed = static_cast<std::uint64_t>(
        std::chrono::high_resolution_clock::now().time_since_epoch().count());
  }
  return seed == 0 ? 0x6A09E667F3BCC909ULL : seed;
}

void validate_key_owner(Namespace ns, std::int64_t group_id, const char* call) {
  if (!detail::valid_namespace(ns)) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": namespace " + std::to_string(ns) +
                          " exceeds the 24-bit maximum " + std::to_string(kMaxNamespace));
  }
  if (!detail::valid_group(group_id)) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": group id " +
                          std::to_string(group_id) + " is outside [0, " +
                          std::to_string(kMaxGroups) + ")");
  }
}

void validate_group_ids(Namespace ns, span<const std::int32_t> group_ids, std::size_t keys,
                        const char* call) {
  if (group_ids.size() != keys) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": " +
                          std::to_string(group_ids.size()) + " group ids for " +
                          std::to_string(keys) + " keys");
  }
  validate_key_owner(ns, 0, call);
  for (std::size_t i = 0; i < group_ids.size(); ++i) {
    if (!detail::valid_group(group_ids[i])) {
      throw InvalidArgument(std::string("BlockIndex::") + call + ": group_ids[" +
                            std::to_string(i) + "] = " + std::to_string(group_ids[i]) +
                            " is outside [0, " + std::to_string(kMaxGroups) + ")");
    }
  }
}

bool slot_key_less(const SlotKey& a, const SlotKey& b) {
  for (int i = 0; i < 4; ++i) {
    if (a.w[i] != b.w[i]) {
      return a.w[i] < b.w[i];
    }
  }
  return a.meta < b.meta;
}

bool slot_key_same(const SlotKey& a, const SlotKey& b) {
  return a.w[0] == b.w[0] && a.w[1] == b.w[1] && a.w[2] == b.w[2] && a.w[3] == b.w[3] &&
         a.meta == b.meta;
}

template <class ImplPtr>
auto& live_impl(const ImplPtr& impl) {
  if (!impl) {
    throw InvalidArgument("BlockIndex: this index was moved from");
  }
  return *impl;
}

}  // namespace

struct BlockIndex::Impl {
  BlockIndexOptions options;
  std::uint64_t seed = 0;
  detail::IndexHashKey hash_key{};
  std::uint64_t max_buckets = 0;

  mutable std::shared_mutex mutex;
  Table table;
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

  SlotPlace place(const SlotKey& key) const {
    return detail::place_of(detail::slot_hash(key, hash_key), table.bucket_mask);
  }

  std::int64_t find(const SlotKey& key) const {
    return detail::find_slot(table.headers.get(), table.digests.get(), table.bucket_mask, key,
                             place(key));
  }

  /// The home-bucket answer of a key whose header line is in cache: found, or not found and
  /// decided (the bucket has an empty slot), or undecided (a full bucket: the key may lie
  /// further along its sequence, find_slot follows it).
  bool home_answer(const SlotKey& key, const SlotPlace& p, std::uint32_t candidates) const {
    const detail::BucketHeader* header = table.headers.get() + p.bucket;
    const BlockDigest* digests = table.digests.get();
    for (std::uint32_t c = candidates; c != 0; c &= c - 1) {
      const int lane = __builtin_ctz(c);
      if (detail::slot_key_equal(key, digests[detail::slot_of(p.bucket, lane)],
                                 header->metas[lane])) {
        return true;
      }
    }
    if (match_tags(header, detail::kEmptyTag) == 0) {
      return detail::find_slot(table.headers.get(), digests, table.bucket_mask, key, p) >= 0;
    }
    return false;
  }

  /// Prefetches the digest line of a key's first candidate in its home bucket (header in cache).
  std::uint32_t match_and_prefetch(const SlotKey& key, const SlotPlace& p) const {
    const std::uint32_t c = candidates_of(table.headers.get() + p.bucket, p.tag, key);
    if (c != 0) {
      prefetch(table.digests.get() + detail::slot_of(p.bucket, __builtin_ctz(c)));
    }
    return c;
  }

  /// Answers up to 64 keys: hashes them all, prefetches their home bucket headers, then the
  /// digest of the first candidate of each, then compares; bit k of the result is key k's answer.
  template <class KeyAt>
  std::uint64_t lookup_window(int count, const KeyAt& key_at) const {
    SlotKey keys[64];
    SlotPlace places[64];
    std::uint32_t candidates[64];
    const detail::BucketHeader* headers = table.headers.get();
    for (int k = 0; k < count; ++k) {
      keys[k] = key_at(k);
      places[k] = place(keys[k]);
      prefetch(headers + places[k].bucket);
    }
    for (int k = 0; k < count; ++k) {
      candidates[k] = match_and_prefetch(keys[k], places[k]);
    }
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      bits |= static_cast<std::uint64_t>(home_answer(keys[k], places[k], candidates[k])) << k;
    }
    return bits;
  }

  /// Answers the keys key_at(0 .. n-1) through emit(i, found), in order, as a software
  /// pipeline (AMAC-style): in step i the caller's digest of key i+kLead is prefetched, key i is
  /// hashed and its home bucket's header line prefetched, key i-kTagAhead's header is matched
  /// (tag and meta) and its first candidate's digest line prefetched, and key i-kLead is
  /// compared. Stages a fixed distance apart keep a steady number of misses in flight (about
  /// kTagAhead + kSlotAhead lines); a miss usually needs only the header line.
  template <class KeyAt, class Prefetch, class Emit>
  void lookup_stream(std::size_t n, const KeyAt& key_at, const Prefetch& prefetch_source,
                     const Emit& emit) const {
    constexpr std::size_t kTagAhead = 10;   // header requested this many keys before its match
    constexpr std::size_t kSlotAhead = 10;  // digest requested this many keys before compare
    constexpr std::size_t kLead = kTagAhead + kSlotAhead;
    constexpr std::size_t kRing = 32;  // > kLead, a power of two
    static_assert(kLead < kRing, "ring too small");
    struct Pending {
      SlotKey key;
      SlotPlace place;
      std::uint32_t candidates;
    };
    Pending ring[kRing];
    const detail::BucketHeader* headers = table.headers.get();
    for (std::size_t i = 0; i < n + kLead; ++i) {
      // Stage 0: the caller's digest of a key further ahead (often out of cache too).
      if (i + kLead < n) {
        prefetch_source(i + kLead);
      }
      // Stage 1: hash key i, prefetch its home bucket's header.
      if (i < n) {
        Pending& p = ring[i % kRing];
        p.key = key_at(i);
        p.place = place(p.key);
        prefetch(headers + p.place.bucket);
      }
      // Stage 2: match key i-kTagAhead's header, prefetch its first candidate's digest.
      if (i >= kTagAhead && i - kTagAhead < n) {
        Pending& p = ring[(i - kTagAhead) % kRing];
        p.candidates = match_and_prefetch(p.key, p.place);
      }
      // Stage 3: compare key i-kLead against its candidates.
      if (i >= kLead) {
        const std::size_t k = i - kLead;
        const Pending& p = ring[k % kRing];
        emit(k, home_answer(p.key, p.place, p.candidates));
      }
    }
  }

  template <class KeyAt>
  void lookup_many(std::size_t n, const KeyAt& key_at, const BlockDigest* sources,
                   std::uint8_t* out) const {
    lookup_stream(
        n, key_at, [&](std::size_t i) { prefetch(sources + i); },
        [&](std::size_t i, bool found) { out[i] = found ? 1 : 0; });
  }

  /// Writes a key into lane `lane` of `bucket`: meta and digest, then the tag.
  static void store_slot(Table& t, std::uint64_t bucket, int lane, const SlotKey& key,
                         std::uint8_t tag, const BlockDigest& digest) {
    detail::BucketHeader& header = t.headers.get()[bucket];
    header.metas[lane] = static_cast<std::uint32_t>(key.meta);
    t.digests.get()[detail::slot_of(bucket, lane)] = digest;
    header.tags[lane] = tag;
  }

  /// Places a key known to be absent into the first free slot of its sequence (rehash).
  static void place_new(Table& t, const SlotKey& key, const SlotPlace& p,
                        const BlockDigest& digest) {
    for (std::uint64_t i = 0; i <= t.bucket_mask; ++i) {
      const std::uint64_t bucket = detail::probe_bucket(p, i, t.bucket_mask);
      const std::uint32_t empty = match_tags(t.headers.get() + bucket, detail::kEmptyTag);
      if (empty != 0) {
        store_slot(t, bucket, __builtin_ctz(empty), key, p.tag, digest);
        return;
      }
    }
  }

  /// Rebuilds into `buckets` buckets, dropping tombstones. Leaves everything as it was when the
  /// allocation fails (CapacityExceeded).
  void rehash(std::uint64_t buckets) {
    Table next = allocate_table(buckets);
    for (std::uint64_t b = 0; b < table.buckets; ++b) {
      const detail::BucketHeader& header = table.headers.get()[b];
      for (int lane = 0; lane < kBucketSlots; ++lane) {
        if (detail::is_live_tag(header.tags[lane])) {
          const BlockDigest& digest = table.digests.get()[detail::slot_of(b, lane)];
          const SlotKey key = detail::make_slot_key(digest, header.metas[lane]);
          place_new(next, key, detail::place_of(detail::slot_hash(key, hash_key), next.bucket_mask),
                    digest);
        }
      }
    }
    table = std::move(next);
    tombstones = 0;
  }

  /// Inserts one key at its precomputed place; returns whether it was new. The caller
  /// guarantees a free slot exists.
  bool insert_one(const SlotKey& key, const SlotPlace& p, const BlockDigest& digest) {
    if (detail::find_slot(table.headers.get(), table.digests.get(), table.bucket_mask, key, p) >=
        0) {
      return false;
    }
    // Absent: take the first tombstone or empty slot of the sequence (the sequence up to the
    // first bucket with an empty slot, which find_slot has just read).
    for (std::uint64_t i = 0; i <= table.bucket_mask; ++i) {
      const std::uint64_t bucket = detail::probe_bucket(p, i, table.bucket_mask);
      detail::BucketHeader& header = table.headers.get()[bucket];
      const std::uint32_t reusable =
          match_tags(&header, detail::kTombstoneTag) | match_tags(&header, detail::kEmptyTag);
      if (reusable != 0) {
        const int lane = __builtin_ctz(reusable);
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

  /// Makes room for `n` keys (KeyAt(i) -> SlotKey), growing or purging tombstones as needed;
  /// throws CapacityExceeded, with nothing changed, when the new keys cannot fit.
  template <class KeyAt>
  void reserve_for(std::size_t n, const KeyAt& key_at) {
    const double mlf = options.max_load_factor;
    const std::uint64_t limit = detail::load_limit(table.slots(), mlf);
    if (live + tombstones + n <= limit) {
      return;  // fits even if every key is new
    }
    // Keys absent from the table bound the new keys from above (in-batch duplicates count
    // more than once); an insert takes at most that many free slots.
    std::vector<SlotKey> missing;
    for (std::size_t i = 0; i < n; ++i) {
      const SlotKey key = key_at(i);
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
      std::sort(missing.begin(), missing.end(), slot_key_less);
      const std::uint64_t distinct = static_cast<std::uint64_t>(
          std::unique(missing.begin(), missing.end(), slot_key_same) - missing.begin());
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
    // In chunks: hash and prefetch the home buckets, then prefetch (for writing) the slot each
    // key will most likely take, then insert. Overlaps the cache misses of a chunk.
    constexpr std::size_t kChunk = 32;
    SlotKey keys[kChunk];
    SlotPlace places[kChunk];
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
        std::uint32_t likely = candidates_of(header, places[k].tag, keys[k]);
        if (likely == 0) {
          likely = match_tags(header, detail::kEmptyTag);
        }
        if (likely != 0) {
          __builtin_prefetch(
              table.digests.get() + detail::slot_of(places[k].bucket, __builtin_ctz(likely)), 1, 3);
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
    constexpr std::size_t kTagAhead = 10;
    constexpr std::size_t kSlotAhead = 10;
    constexpr std::size_t kLead = kTagAhead + kSlotAhead;
    constexpr std::size_t kRing = 32;  // > kLead, a power of two
    static_assert(kLead < kRing, "ring too small");
    struct Pending {
      SlotKey key;
      SlotPlace place;
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
        match_and_prefetch(p.key, p.place);
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

BlockIndex::BlockIndex() : BlockIndex(BlockIndexOptions{}) {}

BlockIndex::BlockIndex(const BlockIndexOptions& options) : impl_(std::make_unique<Impl>()) {
  // A factor so small that no table holds one key would make every insert grow forever.
  if (!(options.max_load_factor >= kMinMaxLoadFactor && options.max_load_factor <= 0.95)) {
    throw InvalidArgument("BlockIndexOptions.max_load_factor must be in [" +
                          std::to_string(kMinMaxLoadFactor) + ", 0.95], got " +
                          std::to_string(options.max_load_factor));
  }
  if (options.max_capacity != 0 && options.max_capacity < static_cast<std::size_t>(kBucketSlots)) {
    throw InvalidArgument("BlockIndexOptions.max_capacity must be 0 (unbounded) or at least " +
                          std::to_string(kBucketSlots) + " slots, got " +
                          std::to_string(options.max_capacity));
  }
  // Slot counts near 2^64 overflow the bucket arithmetic; no machine holds 2^40 slots anyway.
  if (static_cast<std::uint64_t>(options.max_capacity) > kMaxIndexSlots) {
    throw InvalidArgument("BlockIndexOptions.max_capacity must be at most 2^40 slots (" +
                          std::to_string(kMaxIndexSlots) + "; 0 is unbounded), got " +
                          std::to_string(options.max_capacity));
  }
  // A request for more slots than any machine holds is a mistake, not a reason to wrap around
  // to a tiny table.
  constexpr std::uint64_t kMaxInitialSlots = kMaxIndexSlots;
  if (static_cast<std::uint64_t>(options.initial_capacity) > kMaxInitialSlots) {
    throw CapacityExceeded("BlockIndex cannot allocate " +
                           std::to_string(options.initial_capacity) +
                           " slots: initial_capacity is above the 2^40-slot limit");
  }
  impl_->options = options;
  impl_->seed = options.seed != 0 ? options.seed : random_seed();
  impl_->hash_key = detail::make_hash_key(impl_->seed);
  impl_->max_buckets = detail::max_buckets_for(options.max_capacity);
  impl_->table = allocate_table(detail::buckets_for_slots(
      static_cast<std::uint64_t>(options.initial_capacity), impl_->max_buckets));
  impl_->publish_counts();
}

BlockIndex::~BlockIndex() = default;
BlockIndex::BlockIndex(BlockIndex&&) noexcept = default;
BlockIndex& BlockIndex::operator=(BlockIndex&&) noexcept = default;

std::size_t BlockIndex::insert(Namespace ns, int group_id, span<const BlockDigest> keys,
                               std::size_t digest_size) {
  validate_key_owner(ns, group_id, "insert");
  check_digests(keys, digest_size, "BlockIndex::insert: keys");
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  return live_impl(impl_).insert_many(
      keys.size(), [&](std::size_t i) { return detail::make_slot_key(keys[i], meta); },
      keys.data());
}

std::size_t BlockIndex::insert(Namespace ns, span<const std::int32_t> group_ids,
                               span<const BlockDigest> keys, std::size_t digest_size) {
  validate_group_ids(ns, group_ids, keys.size(), "insert");
  check_digests(keys, digest_size, "BlockIndex::insert: keys");
  const std::uint32_t code = detail::digest_width_code(digest_size);
  return live_impl(impl_).insert_many(
      keys.size(),
      [&](std::size_t i) {
        return detail::make_slot_key(keys[i], detail::pack_meta(ns, group_ids[i], code));
      },
      keys.data());
}

std::size_t BlockIndex::erase(Namespace ns, int group_id, span<const BlockDigest> keys,
                              std::size_t digest_size) {
  validate_key_owner(ns, group_id, "erase");
  check_digests(keys, digest_size, "BlockIndex::erase: keys");
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  return live_impl(impl_).erase_many(
      keys.size(), [&](std::size_t i) { return detail::make_slot_key(keys[i], meta); });
}

std::size_t BlockIndex::erase(Namespace ns, span<const std::int32_t> group_ids,
                              span<const BlockDigest> keys, std::size_t digest_size) {
  validate_group_ids(ns, group_ids, keys.size(), "erase");
  check_digests(keys, digest_size, "BlockIndex::erase: keys");
  const std::uint32_t code = detail::digest_width_code(digest_size);
  return live_impl(impl_).erase_many(keys.size(), [&](std::size_t i) {
    return detail::make_slot_key(keys[i], detail::pack_meta(ns, group_ids[i], code));
  });
}

void BlockIndex::contains(Namespace ns, int group_id, span<const BlockDigest> keys,
                          std::uint8_t* out, std::size_t digest_size) const {
  validate_key_owner(ns, group_id, "contains");
  check_digests(keys, digest_size, "BlockIndex::contains: keys");
  if (keys.empty()) {
    return;
  }
  if (out == nullptr) {
    throw InvalidArgument("BlockIndex::contains: out is null for " + std::to_string(keys.size()) +
                          " keys");
  }
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  impl.lookup_many(
      keys.size(), [&](std::size_t i) { return detail::make_slot_key(keys[i], meta); }, keys.data(),
      out);
}

void BlockIndex::contains(Namespace ns, span<const std::int32_t> group_ids,
                          span<const BlockDigest> keys, std::uint8_t* out,
                          std::size_t digest_size) const {
  validate_group_ids(ns, group_ids, keys.size(), "contains");
  check_digests(keys, digest_size, "BlockIndex::contains: keys");
  if (keys.empty()) {
    return;
  }
  if (out == nullptr) {
    throw InvalidArgument("BlockIndex::contains: out is null for " + std::to_string(keys.size()) +
                          " keys");
  }
  const std::uint32_t code = detail::digest_width_code(digest_size);
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  impl.lookup_many(
      keys.size(),
      [&](std::size_t i) {
        return detail::make_slot_key(keys[i], detail::pack_meta(ns, group_ids[i], code));
      },
      keys.data(), out);
}

bool BlockIndex::contains(Namespace ns, int group_id, const BlockDigest& key,
                          std::size_t digest_size) const {
  validate_key_owner(ns, group_id, "contains");
  check_digests(span<const BlockDigest>(&key, 1), digest_size, "BlockIndex::contains: key");
  const SlotKey slot_key = detail::make_slot_key(
      key, detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size)));
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  return impl.find(slot_key) >= 0;
}

std::size_t BlockIndex::size() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->live_mirror.load(std::memory_order_relaxed)) : 0;
}

std::size_t BlockIndex::capacity() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->capacity_mirror.load(std::memory_order_relaxed))
               : 0;
}

std::size_t BlockIndex::used_slots() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->used_mirror.load(std::memory_order_relaxed)) : 0;
}

void BlockIndex::clear() {
  Impl& impl = live_impl(impl_);
  std::unique_lock<std::shared_mutex> lock(impl.mutex);
  clear_headers(impl.table);
  impl.live = 0;
  impl.tombstones = 0;
  impl.publish_counts();
}

const BlockIndexOptions& BlockIndex::options() const noexcept {
  static const BlockIndexOptions kMovedFrom{};
  return impl_ ? impl_->options : kMovedFrom;
}

std::uint64_t BlockIndex::hash_seed() const noexcept {
  return impl_ ? impl_->seed : 0;
}

void BlockIndex::for_each(
    const std::function<void(Namespace, int, const BlockDigest&)>& visit) const {
  for_each_key([&](Namespace ns, int group_id, std::size_t /*digest_size*/,
                   const BlockDigest& key) { visit(ns, group_id, key); });
}

void BlockIndex::for_each_key(
    const std::function<void(Namespace, int, std::size_t, const BlockDigest&)>& visit) const {
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  const Table& t = impl.table;
  for (std::uint64_t b = 0; b < t.buckets; ++b) {
    const detail::BucketHeader& header = t.headers.get()[b];
    for (int lane = 0; lane < kBucketSlots; ++lane) {
      if (detail::is_live_tag(header.tags[lane])) {
        const std::uint32_t meta = header.metas[lane];
        visit(detail::meta_namespace(meta), detail::meta_group(meta),
              detail::meta_digest_size(meta), t.digests.get()[detail::slot_of(b, lane)]);
      }
    }
  }
}

std::uint64_t BlockIndex::View::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                                      std::int64_t step, int count) const {
  if (count <= 0 || hashes == nullptr || !detail::valid_group(group_id) ||
      !detail::valid_namespace(ns_) || !BlockDigest::valid_size(digest_size_) || !index_->impl_) {
    return 0;  // such a key can never have been inserted
  }
  const Impl& impl = *index_->impl_;
  const std::uint32_t meta =
      detail::pack_meta(ns_, group_id, detail::digest_width_code(digest_size_));
  const int n = count > 64 ? 64 : count;
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  return impl.lookup_window(
      n, [&](int k) { return detail::make_slot_key(hashes[first + k * step], meta); });
}

bool BlockIndex::View::prefers_probe_many() const noexcept {
  if (!index_->impl_) {
    return false;
  }
  const std::uint64_t slots = index_->impl_->capacity_mirror.load(std::memory_order_relaxed);
  return detail::table_bytes_of_slots(slots) >= detail::planned_lookup_min_bytes();
}

void BlockIndex::View::probe_many(const ProbeWindow* windows, std::size_t n,
                                  std::uint64_t* out) const {
  std::fill(out, out + n, std::uint64_t{0});
  if (n == 0 || !detail::valid_namespace(ns_) || !BlockDigest::valid_size(digest_size_) ||
      !index_->impl_) {
    return;  // such a key can never have been inserted
  }
  const std::uint32_t width_code = detail::digest_width_code(digest_size_);
  // One key stream over all windows: the i-th key's digest, window and bit. A window with a bad
  // group id (or no hashes) contributes no keys and answers 0, as probe() does.
  struct KeyRef {
    const BlockDigest* digest;
    std::uint32_t meta;
    std::uint32_t window;
    std::uint32_t bit;
  };
  // Reused across calls and threads (a batch's workers are new threads on every call).
  static detail::ScratchPool<std::vector<KeyRef>> pool;
  const auto lease = pool.lease();
  std::vector<KeyRef>& refs = *lease;
  refs.clear();
  for (std::size_t w = 0; w < n; ++w) {
    const ProbeWindow& win = windows[w];
    if (win.hashes == nullptr || !detail::valid_group(win.group_id)) {
      continue;
    }
    const std::uint32_t meta = detail::pack_meta(ns_, win.group_id, width_code);
    const int count = win.count > 64 ? 64 : win.count;
    for (int k = 0; k < count; ++k) {
      refs.push_back(KeyRef{win.hashes + win.first + static_cast<std::int64_t>(k) * win.step, meta,
                            static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(k)});
    }
  }
  const Impl& impl = *index_->impl_;
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  impl.lookup_stream(
      refs.size(),
      [&](std::size_t i) { return detail::make_slot_key(*refs[i].digest, refs[i].meta); },
      [&](std::size_t i) { prefetch(refs[i].digest); },
      [&](std::size_t i, bool found) {
        out[refs[i].window] |= static_cast<std::uint64_t>(found) << refs[i].bit;
      });
}

}  // namespace prefixhit
