// The shared slot logic of the CPU and GPU block indexes (detail/index_slots.hpp): key packing,
// seeded hashing, tags, bucket choice, probe sequences, the tag matchers and their scalar twin,
// the probe loop and the capacity policy. The GPU kernels run exactly these functions.
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/detail/index_capacity.hpp"

#include "host/block_index_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <set>
#include <vector>

namespace prefixhit::detail {
namespace {

std::uint64_t fresh_seed() {
  return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

BlockDigest random_digest(std::mt19937_64& rng) {
  BlockDigest d;
  for (auto& b : d.bytes) {
    b = static_cast<std::uint8_t>(rng());
  }
  return d;
}

TEST(IndexSlots, MetaPackingIsInjectiveOverValidKeys) {
  std::set<std::uint32_t> seen;
  for (std::uint32_t ns :
       {0U, 1U, 2U, 255U, 256U, 65535U, kIndexMaxNamespace - 1, kIndexMaxNamespace}) {
    for (int g = 0; g < kIndexMaxGroups; ++g) {
      const std::uint32_t meta = pack_meta(ns, g);
      EXPECT_TRUE(seen.insert(meta).second) << "ns " << ns << " group " << g;
      EXPECT_EQ(meta_namespace(meta), ns);
      EXPECT_EQ(meta_group(meta), g);
    }
  }
  EXPECT_TRUE(valid_namespace(kIndexMaxNamespace));
  EXPECT_FALSE(valid_namespace(kIndexMaxNamespace + 1));
  EXPECT_TRUE(valid_group(0));
  EXPECT_TRUE(valid_group(kIndexMaxGroups - 1));
  EXPECT_FALSE(valid_group(-1));
  EXPECT_FALSE(valid_group(kIndexMaxGroups));
  EXPECT_FALSE(valid_group(256));  // would alias the next namespace if it were packed
}

TEST(IndexSlots, TagsAreNeverMarkersAndCoverTheLiveRange) {
  std::set<int> tags;
  for (std::uint64_t top = 0; top < 256; ++top) {
    const std::uint8_t tag = tag_of(top << 56 | 0x00FFFFFFFFFFFFFFULL);
    EXPECT_TRUE(is_live_tag(tag)) << "top byte " << top;
    EXPECT_NE(tag, kEmptyTag);
    EXPECT_NE(tag, kTombstoneTag);
    EXPECT_NE(tag, kBusyTag);
    tags.insert(tag);
  }
  EXPECT_EQ(tags.size(), 256U - kFirstLiveTag);  // every live tag value is reachable
  EXPECT_EQ(*tags.begin(), kFirstLiveTag);
  EXPECT_EQ(*tags.rbegin(), 255);
}

TEST(IndexSlots, HashDependsOnEveryDigestBitTheMetaAndTheSeed) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const IndexHashKey key = make_hash_key(seed);
  const IndexHashKey other_key = make_hash_key(seed + 1);
  double flipped_total = 0;
  int flips = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const BlockDigest d = random_digest(rng);
    const SlotKey base = make_slot_key(d, pack_meta(7, 3));
    const std::uint64_t h = slot_hash(base, key);
    EXPECT_NE(h, slot_hash(base, other_key));
    for (int bit = 0; bit < 256; ++bit) {
      BlockDigest flipped = d;
      flipped.bytes[bit / 8] =
          static_cast<std::uint8_t>(flipped.bytes[bit / 8] ^ (1U << (bit % 8)));
      const std::uint64_t h2 =
          slot_hash(make_slot_key(flipped, static_cast<std::uint32_t>(base.meta)), key);
      ASSERT_NE(h, h2) << "digest bit " << bit;
      flipped_total += static_cast<double>(std::bitset<64>(h ^ h2).count());
      ++flips;
    }
    for (int bit = 0; bit < 32; ++bit) {
      const std::uint64_t h2 =
          slot_hash(make_slot_key(d, static_cast<std::uint32_t>(base.meta) ^ (1U << bit)), key);
      ASSERT_NE(h, h2) << "meta bit " << bit;
    }
  }
  // A good mixer flips about half of the 64 output bits for a one-bit input change.
  EXPECT_GT(flipped_total / flips, 24.0);
  EXPECT_LT(flipped_total / flips, 40.0);
}

TEST(IndexSlots, StructuredDigestsSpreadEvenlyOverBuckets) {
  // Digests that differ only in a counter word (what a flooding attempt without the seed would
  // try), or one digest under counting namespaces, still spread: no bucket gets far more than
  // its share. (A hash of two multiplies without a final mix failed this for a counter in word
  // 1: the high half of k * x barely moves as x steps.)
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const IndexHashKey key = make_hash_key(seed);
  constexpr std::uint64_t kBuckets = 1024;
  constexpr int kKeys = 64 * 1024;
  for (int word = 0; word <= 4; ++word) {  // 4: the counter is the namespace
    std::vector<int> load(kBuckets, 0);
    for (int i = 0; i < kKeys; ++i) {
      BlockDigest d;
      std::uint32_t meta = 0;
      if (word < 4) {
        const auto counter = static_cast<std::uint64_t>(i);
        std::memcpy(d.bytes.data() + 8 * word, &counter, sizeof(counter));
      } else {
        meta = pack_meta(static_cast<std::uint32_t>(i), 0);
      }
      ++load[place_of(slot_hash(make_slot_key(d, meta), key), kBuckets - 1).bucket];
    }
    const int max_load = *std::max_element(load.begin(), load.end());
    EXPECT_LT(max_load, 2 * kKeys / static_cast<int>(kBuckets)) << "counter in word " << word;
  }
}

TEST(IndexSlots, ProbeSequenceVisitsEveryBucketOnce) {
  std::mt19937_64 rng(fresh_seed());
  for (int log_buckets = 0; log_buckets <= 12; ++log_buckets) {
    const std::uint64_t buckets = std::uint64_t{1} << log_buckets;
    for (int trial = 0; trial < 8; ++trial) {
      const SlotPlace place = place_of(rng(), buckets - 1);
      ASSERT_LT(place.bucket, buckets);
      ASSERT_EQ(place.stride % 2 == 1 || buckets == 1, true);
      std::vector<bool> seen(buckets, false);
      for (std::uint64_t i = 0; i < buckets; ++i) {
        const std::uint64_t b = probe_bucket(place, i, buckets - 1);
        ASSERT_LT(b, buckets);
        ASSERT_FALSE(seen[b]) << "bucket " << b << " visited twice in a table of " << buckets;
        seen[b] = true;
      }
      EXPECT_EQ(probe_bucket(place, 0, buckets - 1), place.bucket);
    }
  }
}

TEST(IndexSlots, BucketHeaderIsOneLineOfTagsThenMetas) {
  EXPECT_EQ(sizeof(BucketHeader), 64U);
  EXPECT_EQ(alignof(BucketHeader), 64U);
  EXPECT_EQ(offsetof(BucketHeader, tags), 0U);
  EXPECT_EQ(offsetof(BucketHeader, metas), 16U);
  EXPECT_EQ(kBucketLanes, 0xFFFU);
  EXPECT_EQ(slot_of(3, 11), 47U);
  EXPECT_EQ(bucket_of_slot(47), 3U);
  EXPECT_EQ(lane_of_slot(47), 11);
  // 64 / 12 + 32 bytes per slot: 46.7 bytes per key at load 0.8, under the 48-byte budget.
  EXPECT_LE(static_cast<double>(table_bytes_of_slots(slots_of_buckets(1024))) /
                (0.8 * static_cast<double>(slots_of_buckets(1024))),
            48.0);
}

TEST(IndexSlots, TagMatchersAgreeWithTheLaneByLaneTwin) {
  std::mt19937_64 rng(fresh_seed());
  BucketHeader bucket{};
  for (int trial = 0; trial < 4000; ++trial) {
    // Few distinct values, so that matches are frequent; include the SWAR edge values. The
    // spare bytes get the same values: no matcher may report them as slots.
    const std::uint8_t palette[] = {
        0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF, static_cast<std::uint8_t>(rng())};
    for (auto& t : bucket.tags) {
      t = palette[rng() % (trial % 2 == 0 ? 9 : 3)];
    }
    for (auto& m : bucket.metas) {
      m = static_cast<std::uint32_t>(rng());  // never read by a tag matcher
    }
    for (int tag = 0; tag < 256; tag += (trial % 16 == 0 ? 1 : 37)) {
      const auto t = static_cast<std::uint8_t>(tag);
      const std::uint32_t expected = match_bucket_by_lanes(&bucket, t);
      ASSERT_EQ(expected & ~kBucketLanes, 0U);
      ASSERT_EQ(match_bucket(load_bucket_tags(&bucket), t), expected) << "tag " << tag;
#if defined(__SSE2__)
      ASSERT_EQ(match_bucket_sse2(&bucket, t), expected) << "tag " << tag;
#endif
    }
  }
  for (std::uint64_t word : {0x0ULL, ~0ULL, 0x8080808080808080ULL, 0x0100010001000100ULL}) {
    for (int tag = 0; tag < 256; ++tag) {
      std::uint8_t bytes[8];
      std::memcpy(bytes, &word, 8);
      std::uint32_t expected = 0;
      for (int j = 0; j < 8; ++j) {
        expected |= static_cast<std::uint32_t>(bytes[j] == tag) << j;
      }
      ASSERT_EQ(match_byte8(word, static_cast<std::uint8_t>(tag)), expected);
    }
  }
}

TEST(IndexSlots, CandidateMatchersAgreeWithALaneByLaneCheck) {
  // cpu_index::candidates_of (SSE2: tags and meta words of all lanes at once) and its portable
  // twin against the definition: lane j is a candidate iff its tag and its meta word both equal
  // the key's. Few distinct values make every combination frequent; the meta palette holds the
  // words whose sign a saturating pack could mangle.
  std::mt19937_64 rng(fresh_seed());
  BucketHeader bucket{};
  const std::uint32_t metas[] = {
      0U,          1U,          0x7FFFFFFFU,
      0x80000000U, 0xFFFFFFFFU, pack_meta(kIndexMaxNamespace, kIndexMaxGroups - 1, 2)};
  for (int trial = 0; trial < 4000; ++trial) {
    const std::uint8_t tags[] = {0x00, 0x03, 0x80, 0xFF, static_cast<std::uint8_t>(rng())};
    for (auto& t : bucket.tags) {
      t = tags[rng() % 5];  // the spare bytes too: they must never be reported
    }
    for (auto& m : bucket.metas) {
      m = metas[rng() % 6];
    }
    for (const std::uint8_t tag : tags) {
      for (const std::uint32_t meta : metas) {
        std::uint32_t expected = 0;
        for (int lane = 0; lane < kBucketSlots; ++lane) {
          expected |=
              static_cast<std::uint32_t>(bucket.tags[lane] == tag && bucket.metas[lane] == meta)
              << lane;
        }
        ASSERT_EQ(cpu_index::candidates_of(&bucket, tag, meta), expected)
            << "tag " << int{tag} << " meta " << meta;
        ASSERT_EQ(cpu_index::candidates_by_lanes(&bucket, tag, meta), expected)
            << "tag " << int{tag} << " meta " << meta;
      }
    }
  }
}

TEST(IndexSlots, TabulatedTagNeedleMatchesLikeTagOf) {
  // cpu_index::match_hash_tag (the window path's tag match, its needle from kTagNeedles) against
  // the definition, for every top byte of the hash (all 256 tags' sources) and random low bits,
  // over headers whose lanes hold that tag, its neighbours and the markers.
  std::mt19937_64 rng(fresh_seed());
  BucketHeader bucket{};
  for (std::uint64_t top = 0; top < 256; ++top) {
    const std::uint64_t needle = cpu_index::kTagNeedles.of_top[top];
    for (int byte = 0; byte < 8; ++byte) {
      ASSERT_EQ(static_cast<std::uint8_t>(needle >> (8 * byte)), tag_of(top << 56)) << top;
    }
    for (int trial = 0; trial < 64; ++trial) {
      const std::uint64_t hash = (top << 56) | (rng() >> 8);
      const std::uint8_t tag = tag_of(hash);
      const std::uint8_t palette[] = {tag, static_cast<std::uint8_t>(tag + 1),
                                      static_cast<std::uint8_t>(tag - 1), kEmptyTag,
                                      static_cast<std::uint8_t>(rng())};
      for (auto& t : bucket.tags) {
        t = palette[rng() % 5];  // the spare bytes too: they must never be reported
      }
      std::uint32_t expected = 0;
      for (int lane = 0; lane < kBucketSlots; ++lane) {
        expected |= static_cast<std::uint32_t>(bucket.tags[lane] == tag) << lane;
      }
      ASSERT_EQ(cpu_index::match_hash_tag(&bucket, hash), expected) << "top byte " << top;
      ASSERT_EQ(cpu_index::match_tags(&bucket, tag), expected) << "top byte " << top;
    }
  }
}

TEST(IndexSlots, CpuDigestCompareAgreesWithTheWordCompare) {
  // cpu_index::digest_equal (the CPU index's fast path: two 16-byte compares) against the shared
  // word compare, for equal digests and digests that differ in one byte, at every position. The
  // caller's digest lies at each offset a BlockDigest can have in a line (0, 8, ... 56 bytes:
  // unaligned for 16-byte loads, and from 40 on across two lines); the stored one is 32-byte
  // aligned, as a table slot is.
  std::mt19937_64 rng(fresh_seed());
  alignas(64) unsigned char caller[64 + sizeof(BlockDigest)];
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(32) BlockDigest digest;
    for (auto& b : digest.bytes) {
      b = static_cast<std::uint8_t>(rng() % (trial % 2 == 0 ? 256 : 2));
    }
    const auto* key_digest =
        new (caller + alignof(BlockDigest) * static_cast<std::size_t>(trial % 8))
            BlockDigest(digest);
    const SlotKey key = make_slot_key(digest, static_cast<std::uint32_t>(rng()));
    ASSERT_TRUE(cpu_index::digest_equal(*key_digest, digest));
    ASSERT_TRUE(slot_key_equal(key, digest, static_cast<std::uint32_t>(key.meta)));
    for (std::size_t i = 0; i < digest.bytes.size(); ++i) {
      alignas(32) BlockDigest other = digest;
      other.bytes[i] = static_cast<std::uint8_t>(other.bytes[i] ^ (1U << (rng() % 8)));
      ASSERT_EQ(cpu_index::digest_equal(*key_digest, other),
                slot_key_equal(key, other, static_cast<std::uint32_t>(key.meta)))
          << "byte " << i;
      ASSERT_FALSE(cpu_index::digest_equal(*key_digest, other)) << "byte " << i;
    }
  }
}

/// A small table built by hand with the shared functions, as both indexes lay it out.
struct HandTable {
  explicit HandTable(std::uint64_t buckets)
      : mask(buckets - 1), headers(buckets), digests(slots_of_buckets(buckets)) {}

  void put(const SlotKey& key, const BlockDigest& digest, const IndexHashKey& hk) {
    const SlotPlace p = place_of(slot_hash(key, hk), mask);
    for (std::uint64_t i = 0; i <= mask; ++i) {
      const std::uint64_t bucket = probe_bucket(p, i, mask);
      BucketHeader& header = headers[bucket];
      const std::uint32_t empty = match_bucket(load_bucket_tags(&header), kEmptyTag);
      if (empty != 0) {
        const int lane = first_lane_from(empty, p.lane);
        header.tags[lane] = p.tag;
        header.metas[lane] = static_cast<std::uint32_t>(key.meta);
        digests[slot_of(bucket, lane)] = digest;
        return;
      }
    }
    FAIL() << "hand table full";
  }
  std::int64_t find(const SlotKey& key, const IndexHashKey& hk) const {
    return find_slot(headers.data(), digests.data(), mask, key, place_of(slot_hash(key, hk), mask));
  }
  std::uint8_t& tag(std::int64_t slot) {
    return headers[bucket_of_slot(static_cast<std::uint64_t>(slot))]
        .tags[lane_of_slot(static_cast<std::uint64_t>(slot))];
  }

  std::uint64_t mask;
  std::vector<BucketHeader> headers;  // value-initialised: every slot empty
  std::vector<BlockDigest> digests;
};

TEST(IndexSlots, CollidingTagAndBucketNeverGiveAFalseHit) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const IndexHashKey hk = make_hash_key(seed);
  constexpr std::uint64_t kBuckets = 4;
  // Find many pairs of distinct digests with the same (bucket, tag) under this secret.
  std::vector<std::vector<BlockDigest>> by_place(kBuckets * 256);
  int pairs = 0;
  for (int i = 0; i < 20000 && pairs < 40; ++i) {
    const BlockDigest d = random_digest(rng);
    const SlotPlace p = place_of(slot_hash(make_slot_key(d, pack_meta(1, 0)), hk), kBuckets - 1);
    auto& same = by_place[p.bucket * 256 + p.tag];
    same.push_back(d);
    pairs += same.size() == 2 ? 1 : 0;
  }
  ASSERT_GE(pairs, 10);
  HandTable table(kBuckets);
  std::vector<BlockDigest> stored;
  std::vector<BlockDigest> absent;
  for (const auto& same : by_place) {
    if (same.size() >= 2) {
      stored.push_back(same[0]);
      absent.push_back(same[1]);
    }
  }
  for (const auto& d : stored) {
    table.put(make_slot_key(d, pack_meta(1, 0)), d, hk);
  }
  for (std::size_t i = 0; i < stored.size(); ++i) {
    EXPECT_GE(table.find(make_slot_key(stored[i], pack_meta(1, 0)), hk), 0);
    // Same tag and bucket, different digest: absent.
    EXPECT_LT(table.find(make_slot_key(absent[i], pack_meta(1, 0)), hk), 0);
    // Same digest, other namespace or group: absent.
    EXPECT_LT(table.find(make_slot_key(stored[i], pack_meta(2, 0)), hk), 0);
    EXPECT_LT(table.find(make_slot_key(stored[i], pack_meta(1, 1)), hk), 0);
  }
  // Force the compare itself: a key whose stored tag and place are copied, digest off by one bit.
  for (const auto& d : stored) {
    for (int byte : {0, 15, 31}) {
      BlockDigest near = d;
      near.bytes[byte] = static_cast<std::uint8_t>(near.bytes[byte] ^ 1U);
      EXPECT_FALSE(slot_key_equal(make_slot_key(near, pack_meta(1, 0)), d, pack_meta(1, 0)));
    }
    EXPECT_TRUE(slot_key_equal(make_slot_key(d, pack_meta(1, 0)), d, pack_meta(1, 0)));
    EXPECT_FALSE(slot_key_equal(make_slot_key(d, pack_meta(1, 0)), d, pack_meta(0, 0)));
  }
}

TEST(IndexSlots, FindSlotFollowsFullBucketsAndStopsAtEmptyOnes) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const IndexHashKey hk = make_hash_key(seed);
  // Two buckets, 22 of 24 slots: overflow from full home buckets must stay findable.
  HandTable table(2);
  std::vector<BlockDigest> keys;
  for (int i = 0; i < 22; ++i) {
    keys.push_back(random_digest(rng));
    table.put(make_slot_key(keys.back(), 5), keys.back(), hk);
  }
  for (const auto& d : keys) {
    EXPECT_GE(table.find(make_slot_key(d, 5), hk), 0);
  }
  for (int i = 0; i < 100; ++i) {
    EXPECT_LT(table.find(make_slot_key(random_digest(rng), 5), hk), 0);
  }
  // Tombstones keep later keys reachable; an all-tombstone-or-live table ends after one pass.
  for (std::size_t i = 0; i < keys.size(); i += 2) {
    const std::int64_t slot = table.find(make_slot_key(keys[i], 5), hk);
    ASSERT_GE(slot, 0);
    const BucketHeader& header = table.headers[bucket_of_slot(static_cast<std::uint64_t>(slot))];
    table.tag(slot) = erased_tag(load_bucket_tags(&header));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(table.find(make_slot_key(keys[i], 5), hk) >= 0, i % 2 == 1) << "key " << i;
  }
}

// The lane itself, then the other lane of its digest line, then a scan from it, wrapping.
TEST(IndexSlots, FirstLaneFromTakesThePreferredLineFirstThenScans) {
  for (std::uint32_t lanes = 1; lanes <= kBucketLanes; ++lanes) {
    for (int start = 0; start < kBucketSlots; ++start) {
      const int partner = start ^ 1;
      int expected = (lanes >> start) & 1U ? start : (lanes >> partner) & 1U ? partner : -1;
      for (int k = 0; k < kBucketSlots && expected < 0; ++k) {
        const int lane = (start + k) % kBucketSlots;
        expected = (lanes >> lane) & 1U ? lane : -1;
      }
      ASSERT_EQ(first_lane_from(lanes, start), expected) << "lanes " << lanes << " start " << start;
    }
  }
}

TEST(IndexSlots, PreferredLaneCoversEveryLaneEvenlyFromItsOwnBits) {
  int per_lane[kBucketSlots] = {};
  for (std::uint64_t byte = 0; byte < 256; ++byte) {
    const int lane = preferred_lane(byte << 24);
    ASSERT_GE(lane, 0);
    ASSERT_LT(lane, kBucketSlots);
    ++per_lane[lane];
  }
  for (int lane = 0; lane < kBucketSlots; ++lane) {
    EXPECT_GE(per_lane[lane], 256 / kBucketSlots) << "lane " << lane;
    EXPECT_LE(per_lane[lane], 256 / kBucketSlots + 1) << "lane " << lane;
  }
  // Bits 24-31 alone: not the home bucket's (low), the stride's (32 up) or the tag's (top byte).
  std::mt19937_64 rng(fresh_seed());
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t hash = rng();
    ASSERT_EQ(preferred_lane(hash), preferred_lane(hash & 0xFF000000ULL));
    ASSERT_EQ(place_of(hash, (std::uint64_t{1} << 20) - 1).lane, preferred_lane(hash));
  }
}

/// A lookup prefetches a key's header and its preferred lane's digest line together. Inserts take
/// the preferred lane, else the other lane of its line, else the next free lane, so at the
/// index's load limit most keys lie in that line, and a hit needs one round trip (about 74%
/// here; 68% when inserts scanned on from the preferred lane, 16% with the lowest free lane).
TEST(IndexSlots, MostKeysLieInTheDigestLineTheirLookupPrefetches) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const IndexHashKey hk = make_hash_key(seed);
  constexpr std::uint64_t kBuckets = 1U << 12;
  HandTable table(kBuckets);
  std::vector<BlockDigest> keys;
  for (std::uint64_t i = 0; i < load_limit(slots_of_buckets(kBuckets), 0.8); ++i) {
    keys.push_back(random_digest(rng));
    table.put(make_slot_key(keys.back(), 3), keys.back(), hk);
  }
  std::size_t in_line = 0;
  for (const auto& d : keys) {
    const SlotKey key = make_slot_key(d, 3);
    const SlotPlace p = place_of(slot_hash(key, hk), kBuckets - 1);
    const std::int64_t slot = table.find(key, hk);
    ASSERT_GE(slot, 0);
    // 12 digests of 32 bytes per bucket: six whole lines, lanes 2j and 2j+1 share one.
    in_line += static_cast<std::uint64_t>(slot) / 2 == slot_of(p.bucket, p.lane) / 2 ? 1U : 0U;
  }
  EXPECT_GT(static_cast<double>(in_line) / static_cast<double>(keys.size()), 0.71)
      << in_line << " of " << keys.size() << " keys in their prefetched line";
}

TEST(IndexSlots, ErasedTagIsEmptyOnlyInBucketsThatStillHaveAnEmptySlot) {
  BucketHeader bucket{};  // spare tag bytes zero, as in a table: they must not count as empty
  std::fill(bucket.tags, bucket.tags + kBucketSlots, std::uint8_t{9});
  EXPECT_EQ(erased_tag(load_bucket_tags(&bucket)), kTombstoneTag);
  bucket.tags[11] = kTombstoneTag;
  EXPECT_EQ(erased_tag(load_bucket_tags(&bucket)), kTombstoneTag);
  bucket.tags[7] = kEmptyTag;
  EXPECT_EQ(erased_tag(load_bucket_tags(&bucket)), kEmptyTag);
}

TEST(IndexSlots, CapacityPolicy) {
  EXPECT_EQ(load_limit(1000, 0.8), 800U);
  EXPECT_EQ(buckets_for_keys(0, 0.8), 1U);
  EXPECT_EQ(buckets_for_keys(9, 0.8), 1U);  // 12 slots hold 9 keys at 0.8
  EXPECT_EQ(buckets_for_keys(10, 0.8), 2U);
  EXPECT_EQ(buckets_for_keys(100'000'000, 0.8), std::uint64_t{1} << 24);
  EXPECT_EQ(max_buckets_for(12), 1U);
  EXPECT_EQ(max_buckets_for(47), 2U);
  EXPECT_EQ(max_buckets_for(48), 4U);
  EXPECT_EQ(max_buckets_for(0), std::uint64_t{1} << 58);
  EXPECT_EQ(buckets_for_slots(0, 1024), 1U);
  EXPECT_EQ(buckets_for_slots(12, 1024), 1U);
  EXPECT_EQ(buckets_for_slots(13, 1024), 2U);
  EXPECT_EQ(buckets_for_slots(1000, 1024), 128U);
  EXPECT_EQ(buckets_for_slots(1000, 64), 64U);
  // Growth doubles at least; a same-size plan drops tombstones; over the maximum: 0.
  EXPECT_EQ(plan_buckets(12, 1, 1024, 0.8), 2U);
  EXPECT_EQ(plan_buckets(120, 1, 1024, 0.8), 16U);
  EXPECT_EQ(plan_buckets(20, 4, 1024, 0.8), 4U);
  EXPECT_EQ(plan_buckets(30, 2, 4, 0.8), 4U);
  EXPECT_EQ(plan_buckets(12, 1, 2, 0.8), 2U);
  EXPECT_EQ(plan_buckets(80, 1, 4, 0.8), 0U);
  EXPECT_EQ(plan_buckets(30, 1, 3, 0.8), 0U);
}

}  // namespace
}  // namespace prefixhit::detail
