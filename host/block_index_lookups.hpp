// The read side of the CPU BlockIndex (internal to host/block_index*.cpp): the table with its
// hash secret, and the lookup pipelines over the slot logic shared with the GPU index
// (detail/index_slots.hpp). A lookup prefetches a key's header line (on large tables with its
// preferred lane's digest line), decides on its tags and meta words, then prefetches the
// candidate's digest line (already on its way for most keys). BlockIndex::Impl
// (host/block_index_impl.hpp) adds the writes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "host/block_index_table.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::cpu_index {

/// A table and its reads. Lookups share the index's lock; nothing here writes.
struct TableLookups {
  Table table;
  /// The per-index secret of the slot hash (index_slots.hpp), drawn from the index's seed.
  detail::IndexHashKey hash_key{};

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
    const std::uint32_t c = candidates_of(table.headers.get() + bucket, tag, meta);
    if (c != 0) {
      prefetch(table.digests.get() + detail::slot_of(bucket, __builtin_ctz(c)));
    }
    return c;
  }

  /// Prefetches a key's home bucket header and its preferred lane's digest line together: a key
  /// inserted while that lane was free (most keys) is then found in one round trip to memory.
  template <Into kInto = Into::l1>
  void prefetch_home(std::uint64_t hash) const {
    prefetch_bucket<kInto>(hash & table.bucket_mask, hash);
  }

  /// Prefetches a bucket's header and the digest line of the key's preferred lane there: inserts
  /// take that lane first in every bucket of a key's sequence, not only its home.
  template <Into kInto = Into::l1>
  void prefetch_bucket(std::uint64_t bucket, std::uint64_t hash) const {
    prefetch<kInto>(table.headers.get() + bucket);
    prefetch<kInto>(table.digests.get() + detail::slot_of(bucket, detail::preferred_lane(hash)));
  }

  /// Matches the home header (in cache) and prefetches the first candidate's digest line. A key
  /// with no candidate in a full home bucket continues its sequence: its second bucket is
  /// prefetched the same way, so that the compare stage does not wait two round trips for it.
  std::uint32_t match_and_prefetch(std::uint64_t hash, std::uint32_t meta) const {
    const std::uint64_t bucket = hash & table.bucket_mask;
    const std::uint32_t c = prefetch_candidate(bucket, detail::tag_of(hash), meta);
    if (c == 0 && match_tags(table.headers.get() + bucket, detail::kEmptyTag) == 0) {
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
      if (digest_equal(*key.digest, home[__builtin_ctz(c)])) {
        return true;
      }
    }
    if (match_tags(table.headers.get() + bucket, detail::kEmptyTag) != 0) {
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
  /// its first tag match's digest line (the caller's digest is read again, from cache). The tag
  /// needle comes from a table (match_hash_tag) and each answer is a byte, packed into the
  /// result bits at the end: 5% less time from cache than tag_of's arithmetic and a bit set per
  /// key (docs/perf/cpu.md, twenty-third round).
  ///
  /// kLag: 8 gives each stage's line time to come from the L3 or memory (12 was slower from
  /// cache, 16 no better from memory). From the L2 (a table of kShortLagMaxBytes or less) 4 takes
  /// 3% less time (fewer keys in each window's fill and drain), where a table of 56 MiB took
  /// 2-3% more with it (docs/perf/cpu.md, twenty-third round).
  template <int kLag, class KeyAt>
  std::uint64_t lookup_window(int count, const KeyAt& key_at) const {
    struct Stage {
      std::uint64_t hash;
      const BlockDigest* first;  // null: the first tag match's meta word differs
    };
    Stage stage[64];
    alignas(16) std::uint8_t found[64];  // 0xFF found, 0 not (a byte: one store per key)
    const detail::BucketHeader* headers = table.headers.get();
    const auto hash_stage = [&](int k) {
      stage[k].hash = hash_of(key_at(k));
      prefetch(headers + (stage[k].hash & table.bucket_mask));
    };
    const auto match_stage = [&](int k) {
      const std::uint64_t bucket = stage[k].hash & table.bucket_mask;
      const std::uint32_t c = match_hash_tag(headers + bucket, stage[k].hash);
      const BlockDigest* first = nullptr;
      if (c != 0) {
        const int lane = __builtin_ctz(c);
        if (headers[bucket].metas[lane] == key_at(k).meta) {
          first = table.digests.get() + detail::slot_of(bucket, lane);
          prefetch(first);
        }
      }
      stage[k].first = first;
    };
    const auto compare_stage = [&](int k) {
      const KeyRef key = key_at(k);
      const bool first_is_key =
          stage[k].first != nullptr && digest_equal(*key.digest, *stage[k].first);
      found[k] = first_is_key || full_answer(key, stage[k].hash) ? 0xFF : 0;
    };
#if defined(__SSE2__)
    // pack_found reads whole 16-byte groups: zero the group holding found[count] first, so that
    // its bytes past count read as zero (for 64 keys group 0, which the stages overwrite). One
    // store: a fill after the stages was a call to memset per window.
    _mm_store_si128(reinterpret_cast<__m128i*>(found + (count & ~15 & 63)), _mm_setzero_si128());
#endif
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
    return pack_found(found, count);
  }

  /// Bit k set iff found[k] (0xFF or 0) is set, for k < count <= 64. With SSE2, the bytes of
  /// found's last 16-byte group past count must be zero.
  static std::uint64_t pack_found(const std::uint8_t* found, int count) {
    std::uint64_t bits = 0;
#if defined(__SSE2__)
    const std::ptrdiff_t end = (count + 15) & ~15;  // whole 16-byte groups
    for (std::ptrdiff_t g = 0; g < end; g += 16) {
      const __m128i bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(found + g));
      bits |= static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm_movemask_epi8(bytes))) << g;
    }
#else
    for (int k = 0; k < count; ++k) {
      bits |= static_cast<std::uint64_t>(found[k] != 0) << k;
    }
#endif
    return bits;
  }

  /// home_answer from the hash alone: the candidates (tag and meta word) matched again.
  bool full_answer(const KeyRef& key, std::uint64_t hash) const {
    const std::uint64_t bucket = hash & table.bucket_mask;
    return home_answer(key, hash,
                       candidates_of(table.headers.get() + bucket, detail::tag_of(hash), key.meta));
  }

  /// The largest table whose windows run their stages 4 keys apart (lookup_window): one whose
  /// probed lines a lookup finds in the L2 for the most part.
  static constexpr std::uint64_t kShortLagMaxBytes = std::uint64_t{16} << 20;

  /// lookup_window with the stage distance for this table's size.
  template <class KeyAt>
  std::uint64_t lookup_window(int count, const KeyAt& key_at) const {
    return detail::table_bytes_of_slots(table.slots()) <= kShortLagMaxBytes
               ? lookup_window<4>(count, key_at)
               : lookup_window<8>(count, key_at);
  }

  /// Keys per stage of lookup_stream. 16 made short lookups (79 keys) faster than the per-key
  /// pipeline; 32 and 64 made them slower, their one or two chunks waiting round trips in turn.
  static constexpr std::size_t kStreamChunk = 16;

  /// Answers the keys key_at(0 .. n-1) (KeyRef) through emit(i, found), in order, as a software
  /// pipeline over chunks of kStreamChunk keys: in period p chunk p+2 is hashed (its home
  /// headers and preferred lanes' digest lines requested into the L2, and chunk p+3's caller
  /// digests prefetched), chunk p+1's home lines are pulled into the L1, chunk p's headers are
  /// matched on tags and meta words (the first candidate's digest line prefetched, the same line
  /// for most keys; for a full home bucket with no candidate, the second bucket's two lines),
  /// and chunk p-1 is compared. A miss needs only the header line (and costs one wasted digest
  /// line).
  ///
  /// Why the home lines go to the L2 first: a prefetch into the L1 holds one of its few miss
  /// buffers (16 on recent Intel cores) for a whole memory round trip, and a chunk's hashing
  /// loop asks for 48-64 lines; into the L2 more misses wait at once (the bench's limit reads a
  /// hit's lines 1.1-1.3x as fast that way), and the pull into the L1 a period later mostly
  /// hits the L2. Two threads over one at 10.1M keys went from 1.72-1.80x to 1.93-2.00x, and
  /// 61.6M-key single lookups took about 4% less (docs/perf/cpu.md, twenty-second round).
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
    constexpr std::size_t kSlots = 4 * kChunk;  // holds chunks p-1 .. p+2; a power of two
    static_assert((kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");
    std::uint64_t hashes[kSlots];
    std::uint32_t candidates[kSlots];
    const std::size_t chunks = (n + kChunk - 1) / kChunk;
    const auto end_of = [&](std::size_t c) { return std::min(n, (c + 1) * kChunk); };
    const auto hash_chunk = [&](std::size_t c) {
      for (std::size_t k = c * kChunk, e = end_of(c); k < e; ++k) {
        if (k + kChunk < n) {
          prefetch_digest(key_at(k + kChunk).digest);
        }
        const std::uint64_t hash = hash_of(key_at(k));
        hashes[k % kSlots] = hash;
        prefetch_home<Into::l2>(hash);
      }
    };
    const auto pull_chunk = [&](std::size_t c) {
      for (std::size_t k = c * kChunk, e = end_of(c); k < e; ++k) {
        prefetch_home(hashes[k % kSlots]);
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
      prefetch_digest(key_at(k).digest);
    }
    hash_chunk(0);
    if (chunks > 1) {
      hash_chunk(1);
    }
    for (std::size_t p = 0; p <= chunks; ++p) {
      if (p + 2 < chunks) {
        hash_chunk(p + 2);
      }
      if (p + 1 < chunks) {
        pull_chunk(p + 1);
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
};

}  // namespace prefixhit::cpu_index
