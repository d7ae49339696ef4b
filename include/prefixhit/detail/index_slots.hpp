// The slot logic of the block indexes, written once for the CPU BlockIndex and the CUDA
// DeviceBlockIndex (PREFIXHIT_HD), so that the CPU tests exercise exactly what the kernels run.
//
// Layout shared by both indexes (docs/design/device-index.md, "One line per probe"):
//   headers[bucket]  64 bytes, one cache line: the 12 slots' tags (kEmptyTag, kTombstoneTag,
//                    kBusyTag = GPU insert in flight, or a live tag), 4 spare bytes, and the 12
//                    slots' meta words (the packed namespace, group id and digest width)
//   digests[slot]    32 bytes: the full block digest; slot = bucket * kBucketSlots + lane
// One header line decides a miss (tag and meta); a hit reads the header and the digest. Inserts
// fill a bucket from the key's preferred lane (bits of its hash), so a lookup can request most
// hits' digest lines together with the header: one round trip, not two.
// A key's probe sequence visits buckets b0, b0+s, b0+2s, ... (mod the power-of-two bucket count)
// with an odd stride s (double hashing), so it visits every bucket once. A lookup stops at the
// first bucket that still has an empty slot. A hit needs an equal tag, an equal meta word and all
// 32 digest bytes equal: the tag is only a filter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/slot_hash.hpp"
#include "prefixhit/types.hpp"

#if !PREFIXHIT_DEVICE_CODE && defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace prefixhit::detail {

inline constexpr int kBucketSlots = 12;
/// The lanes of a match mask that are slots (the header's 4 spare tag bytes are never slots).
inline constexpr std::uint32_t kBucketLanes = (1U << kBucketSlots) - 1;
/// Group ids a block index accepts: 0 .. kIndexMaxGroups-1.
inline constexpr int kIndexMaxGroups = kMaxGroups;
inline constexpr std::uint32_t kIndexMaxNamespace = (1U << 24) - 1;

inline constexpr std::uint8_t kEmptyTag = 0x00;
inline constexpr std::uint8_t kTombstoneTag = 0x01;
/// A GPU inserter claimed the slot and is writing it; never stored by the CPU index.
inline constexpr std::uint8_t kBusyTag = 0x02;
inline constexpr std::uint8_t kFirstLiveTag = 0x03;

/// A key as the slot logic sees it: its digest as four little-endian words and its meta word
/// (held in 64 bits so that copying a SlotKey never reads a half-written word: a 4-byte store
/// followed by an 8-byte load of the struct stalls store forwarding on x86).
struct SlotKey {
  std::uint64_t w[4];
  std::uint64_t meta;
};

/// A bucket's header, one 64-byte line: what a probe reads first. Tag bytes 12-15 are spare
/// (zero, and masked out of every match), so the tags read as two 8-byte words or one 16-byte
/// vector; the GPU claims and publishes a slot with a CAS on the 32-bit word holding its tag.
struct alignas(64) BucketHeader {
  std::uint8_t tags[16];
  std::uint32_t metas[kBucketSlots];
};
static_assert(sizeof(BucketHeader) == 64, "a bucket header is one cache line");

/// Where a key goes: its hash, tag, home bucket, probe stride and preferred lane.
struct SlotPlace {
  std::uint64_t hash;
  std::uint64_t bucket;
  std::uint64_t stride;
  std::uint8_t tag;
  std::uint8_t lane;
};

PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool valid_namespace(std::uint32_t ns) {
  return ns <= kIndexMaxNamespace;
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool valid_group(std::int64_t group_id) {
  return group_id >= 0 && group_id < kIndexMaxGroups;
}

/// The digest width's code in a meta word: 0 = 32 bytes (so that words written before widths
/// existed keep their meaning), 1 = 16 bytes, 2 = 8 bytes. Callers validate the width first.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t digest_width_code(std::size_t digest_size) {
  return digest_size == 16 ? 1U : digest_size == 8 ? 2U : 0U;
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::size_t digest_size_of_code(std::uint32_t code) {
  return code == 1U ? 16 : code == 2U ? 8 : 32;
}

/// (namespace, group id, digest width) in one word: ns in the top 24 bits, the width code in
/// bits 5-6 and the group id (< kIndexMaxGroups = 32) in bits 0-4. Callers validate all three
/// first, so distinct triples never share a word, and keys of different widths never match.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t pack_meta(std::uint32_t ns, int group_id,
                                                           std::uint32_t width_code = 0) {
  static_assert(kIndexMaxGroups <= 32, "group ids must fit in the meta word's low 5 bits");
  return (ns << 8) | ((width_code & 3U) << 5) | (static_cast<std::uint32_t>(group_id) & 0x1FU);
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t meta_namespace(std::uint32_t meta) {
  return meta >> 8;
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int meta_group(std::uint32_t meta) {
  return static_cast<int>(meta & 0x1FU);
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::size_t meta_digest_size(std::uint32_t meta) {
  return digest_size_of_code((meta >> 5) & 3U);
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE SlotKey make_slot_key(const BlockDigest& digest,
                                                         std::uint32_t meta) {
  SlotKey key;
  std::memcpy(key.w, &digest, sizeof(key.w));  // BlockDigest is exactly its 32 bytes
  key.meta = meta;
  return key;
}

/// The slot hash (detail/slot_hash.hpp) of a key.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t slot_hash(const SlotKey& key,
                                                           const IndexHashKey& secret) {
  return slot_hash_bytes(key.w, static_cast<std::uint32_t>(key.meta), secret);
}

/// slot_hash of a digest where it lies: the CPU lookups hash a caller's digest without first
/// copying it into a SlotKey.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t digest_slot_hash(const BlockDigest& digest,
                                                                  std::uint32_t meta,
                                                                  const IndexHashKey& secret) {
  return slot_hash_bytes(&digest, meta, secret);  // exactly its 32 bytes
}

/// The 8-bit fingerprint: the top hash byte mapped onto the live range [3, 255], so it is never
/// the empty, tombstone or busy marker. (constexpr: the CPU lookups tabulate it by top byte.)
PREFIXHIT_HD PREFIXHIT_FORCEINLINE constexpr std::uint8_t tag_of(std::uint64_t hash) {
  const std::uint32_t top = static_cast<std::uint32_t>(hash >> 56);
  return static_cast<std::uint8_t>(kFirstLiveTag + ((top * (256U - kFirstLiveTag)) >> 8));
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool is_live_tag(std::uint8_t tag) {
  return tag >= kFirstLiveTag;
}

/// The lane a key is stored in when its bucket has that lane free (first_lane_from): hash bits
/// 24-31 mapped onto [0, kBucketSlots). A lookup prefetches this lane's digest line together with
/// the header, so a hit usually needs one round trip to memory, not the header's and then the
/// digest's. Only a hint: the tags and the full compare still decide.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int preferred_lane(std::uint64_t hash) {
  return static_cast<int>((((hash >> 24) & 0xFFU) * kBucketSlots) >> 8);
}

/// `bucket_mask` = bucket count - 1 (a power of two). The home bucket uses the low hash bits,
/// the preferred lane bits 24-31, the stride the bits from 32 up and the tag the top byte, so
/// the four are independent for tables below 2^24 buckets.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE SlotPlace place_of(std::uint64_t hash,
                                                      std::uint64_t bucket_mask) {
  SlotPlace place;
  place.hash = hash;
  place.bucket = hash & bucket_mask;
  place.stride = ((hash >> 32) | 1U) & bucket_mask;
  if (place.stride == 0) {
    place.stride = 1;  // one-bucket table
  }
  place.tag = tag_of(hash);
  place.lane = static_cast<std::uint8_t>(preferred_lane(hash));
  return place;
}

/// The i-th bucket of the probe sequence that starts at `place`.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t probe_bucket(const SlotPlace& place,
                                                              std::uint64_t i,
                                                              std::uint64_t bucket_mask) {
  return (place.bucket + i * place.stride) & bucket_mask;
}

/// Byte-parallel equality over 8 tags: bit j of the result is set iff byte j of `tags` == `tag`.
/// Exact (no false positives), branch-free and portable: the scalar twin of SSE2 / warp ballot.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t match_byte8(std::uint64_t tags, std::uint8_t tag) {
  constexpr std::uint64_t kLow7 = 0x7F7F7F7F7F7F7F7FULL;
  const std::uint64_t x = tags ^ (0x0101010101010101ULL * tag);
  // High bit of each byte set iff that byte of x is zero.
  const std::uint64_t zero_bytes = ~(((x & kLow7) + kLow7) | x | kLow7);
  // Gather the 8 high bits into the low byte.
  return static_cast<std::uint32_t>(((zero_bytes >> 7) * 0x0102040810204080ULL) >> 56);
}

/// The 16 tag bytes of one bucket header (12 slots, 4 spare) as two little-endian words.
struct BucketTags {
  std::uint64_t w[2];
};

PREFIXHIT_HD PREFIXHIT_FORCEINLINE BucketTags load_bucket_tags(const BucketHeader* header) {
  BucketTags t;
  std::memcpy(t.w, header->tags, sizeof(t.w));
  return t;
}

/// Bit j set iff slot j of the bucket holds `tag` (j < kBucketSlots; spare bytes never match).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint32_t match_bucket(const BucketTags& t,
                                                              std::uint8_t tag) {
  return (match_byte8(t.w[0], tag) | (match_byte8(t.w[1], tag) << 8)) & kBucketLanes;
}

/// The reference twin of match_bucket and of the warp path: one "lane" per slot, as a warp
/// ballot over kBucketSlots lanes computes it. Tests check that every fast path agrees with it.
PREFIXHIT_HD inline std::uint32_t match_bucket_by_lanes(const BucketHeader* header,
                                                        std::uint8_t tag) {
  std::uint32_t mask = 0;
  for (int lane = 0; lane < kBucketSlots; ++lane) {
    mask |= static_cast<std::uint32_t>(header->tags[lane] == tag) << lane;
  }
  return mask;
}

#if !PREFIXHIT_DEVICE_CODE && defined(__SSE2__)
/// The lanes whose tag equals the byte that `needle` holds in every position: one 16-byte SSE2
/// compare. Host only.
inline std::uint32_t match_bucket_needle_sse2(const BucketHeader* header, __m128i needle) {
  const __m128i tags = _mm_load_si128(reinterpret_cast<const __m128i*>(header->tags));
  return static_cast<std::uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(tags, needle))) & kBucketLanes;
}

/// The CPU fast path of match_bucket. Host only.
inline std::uint32_t match_bucket_sse2(const BucketHeader* header, std::uint8_t tag) {
  return match_bucket_needle_sse2(header, _mm_set1_epi8(static_cast<char>(tag)));
}
#endif

/// The slot of lane `lane` of bucket `bucket`, and back.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t slot_of(std::uint64_t bucket, int lane) {
  return bucket * kBucketSlots + static_cast<std::uint64_t>(lane);
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t bucket_of_slot(std::uint64_t slot) {
  return slot / kBucketSlots;
}
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int lane_of_slot(std::uint64_t slot) {
  return static_cast<int>(slot % kBucketSlots);
}

/// Index of the lowest set bit (mask != 0).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int lowest_bit(std::uint32_t mask) {
#if PREFIXHIT_DEVICE_CODE
  return __ffs(static_cast<int>(mask)) - 1;
#else
  return __builtin_ctz(mask);
#endif
}

/// The lane of `lanes` (lanes != 0) an insert takes, from the key's preferred lane `start`:
/// `start` itself, else the other lane of its digest line (lanes 2j and 2j+1 share one), else the
/// first set lane after `start`, wrapping around. A lookup prefetches the preferred lane's line
/// with the header, so the line partner first puts about 83% of keys there at load 0.6, not 77%
/// (74% and 68% at 0.8). A function of the lanes alone, so that two inserts of one key (GPU
/// threads of one batch) still race for the same lane.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int first_lane_from(std::uint32_t lanes, int start) {
  const std::uint32_t line = lanes & (3U << static_cast<unsigned int>(start & ~1));
  if (line != 0) {
    return (lanes >> static_cast<unsigned int>(start)) & 1U ? start : lowest_bit(line);
  }
  const std::uint32_t at_or_after = lanes & (~0U << static_cast<unsigned int>(start));
  return lowest_bit(at_or_after != 0 ? at_or_after : lanes);
}

/// Full key compare against a stored digest (as four words) and meta word.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool slot_words_equal(const SlotKey& key,
                                                         const std::uint64_t (&stored)[4],
                                                         std::uint32_t stored_meta) {
  return ((key.w[0] ^ stored[0]) | (key.w[1] ^ stored[1]) | (key.w[2] ^ stored[2]) |
          (key.w[3] ^ stored[3]) | (key.meta ^ stored_meta)) == 0;
}

/// Full key compare: all 32 digest bytes and the meta word (namespace and group id).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool slot_key_equal(const SlotKey& key,
                                                       const BlockDigest& stored_digest,
                                                       std::uint32_t stored_meta) {
  std::uint64_t s[4];
  std::memcpy(s, &stored_digest, sizeof(s));
  return slot_words_equal(key, s, stored_meta);
}

/// How find_slot_with reads the table: plain loads, the same on host and device. The device
/// index supplies its own policy (vector loads through the read-only cache) with the same
/// meaning, so the probe loop itself exists once.
struct PlainSlotLoads {
  PREFIXHIT_HD static PREFIXHIT_FORCEINLINE BucketTags tags(const BucketHeader* header) {
    return load_bucket_tags(header);
  }
  PREFIXHIT_HD static PREFIXHIT_FORCEINLINE std::uint32_t meta(const BucketHeader* header,
                                                               int lane) {
    return header->metas[lane];
  }
  PREFIXHIT_HD static PREFIXHIT_FORCEINLINE void digest(const BlockDigest* digest,
                                                        std::uint64_t (&out)[4]) {
    std::memcpy(out, digest, sizeof(out));
  }
};

/// Looks a key up in a table without concurrent writers (headers and digests as above).
/// Returns the slot or -1. Probes at most every bucket once. A candidate needs an equal tag and
/// an equal meta word, both in the header line, before its digest line is read.
template <class Loads>
PREFIXHIT_HD inline std::int64_t find_slot_with(const BucketHeader* headers,
                                                const BlockDigest* digests,
                                                std::uint64_t bucket_mask, const SlotKey& key,
                                                const SlotPlace& place) {
  for (std::uint64_t i = 0; i <= bucket_mask; ++i) {
    const std::uint64_t bucket = probe_bucket(place, i, bucket_mask);
    const BucketHeader* header = headers + bucket;
    const BucketTags t = Loads::tags(header);
    for (std::uint32_t c = match_bucket(t, place.tag); c != 0; c &= c - 1) {
      const int lane = lowest_bit(c);
      const std::uint32_t stored_meta = Loads::meta(header, lane);
      if (stored_meta != key.meta) {
        continue;  // decided by the header line alone
      }
      const std::uint64_t slot = slot_of(bucket, lane);
      std::uint64_t stored[4];
      Loads::digest(digests + slot, stored);
      if (slot_words_equal(key, stored, stored_meta)) {
        return static_cast<std::int64_t>(slot);
      }
    }
    if (match_bucket(t, kEmptyTag) != 0) {
      return -1;  // no key lies beyond the first bucket with an empty slot
    }
  }
  return -1;
}

PREFIXHIT_HD inline std::int64_t find_slot(const BucketHeader* headers, const BlockDigest* digests,
                                           std::uint64_t bucket_mask, const SlotKey& key,
                                           const SlotPlace& place) {
  return find_slot_with<PlainSlotLoads>(headers, digests, bucket_mask, key, place);
}

/// What an erase writes into a found slot. A bucket that still has an empty slot has never been
/// full since the last rehash (inserts only fill slots, and this rule never empties a slot of a
/// full bucket), so no probe sequence continues past it and the slot can become empty again;
/// otherwise it becomes a tombstone, which keeps the later keys of a sequence reachable.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint8_t erased_tag(const BucketTags& bucket) {
  return match_bucket(bucket, kEmptyTag) != 0 ? kEmptyTag : kTombstoneTag;
}

}  // namespace prefixhit::detail
