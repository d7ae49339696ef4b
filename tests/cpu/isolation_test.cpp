// Tenant isolation and "no false hits", end to end: Coordinator::find_longest_cache_hit over
// BlockIndex::view(ns). Identical digests in two namespaces and two groups never leak; keys built
// to collide with stored keys in the index's tag and home bucket (using the shared slot logic of
// detail/index_slots.hpp and the index's own seed) but differing in the namespace, the group or a
// single 8-byte word of the digest never report a hit. Also: a bulk insert past max_capacity
// throws CapacityExceeded and changes nothing, and erasing absent keys is harmless.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_digest;
using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

using Key = std::tuple<Namespace, int, BlockDigest>;

std::set<Key> contents(const BlockIndex& index) {
  std::set<Key> out;
  index.for_each([&](Namespace ns, int g, const BlockDigest& d) { out.emplace(ns, g, d); });
  return out;
}

/// One full-attention group with B = H = 16: the hit is 16 tokens per leading present hash.
Coordinator single_group() {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 16;
  c.groups = {GroupSpec::full_attention(16)};
  return Coordinator(c);
}

/// Two groups with equal specs, merged into one spec group: a hit needs the key in both.
Coordinator two_merged_groups() {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 16;
  c.groups = {GroupSpec::full_attention(16), GroupSpec::full_attention(16)};
  return Coordinator(c);
}

/// A full-attention group and a sliding-window group (FA(32) + SWA(16, w=32)), S = 32.
Coordinator hybrid() {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 32;
  c.groups = {GroupSpec::full_attention(32), GroupSpec::sliding_window_attention(16, 32)};
  return Coordinator(c);
}

std::int64_t hit(const Coordinator& c, const std::vector<BlockDigest>& hashes,
                 const ExistenceSource& store) {
  const auto n = static_cast<std::int64_t>(hashes.size());
  return c.find_longest_cache_hit(hashes, n * c.config().hash_block_size, store).hit_length;
}

std::vector<BlockDigest> chunk_keys_of(const Coordinator& c, const std::vector<BlockDigest>& hashes,
                                       int g) {
  return c.chunk_keys(hashes, c.config().groups[static_cast<std::size_t>(g)].block_size);
}

/// Every (group, hash) key a store written for the whole prompt holds.
void store_all(BlockIndex& index, Namespace ns, const Coordinator& c,
               const std::vector<BlockDigest>& hashes) {
  for (int g = 0; g < c.num_groups(); ++g) {
    const std::vector<BlockDigest> keys = chunk_keys_of(c, hashes, g);
    index.insert(ns, g, keys);
  }
}

/// Where the slot logic puts (digest, ns, group) in `index`'s table.
detail::SlotPlace place(const BlockIndex& index, const BlockDigest& d, Namespace ns, int group) {
  const detail::IndexHashKey secret = detail::make_hash_key(index.hash_seed());
  const std::uint64_t buckets = index.capacity() / detail::kBucketSlots;
  return detail::place_of(
      detail::slot_hash(detail::make_slot_key(d, detail::pack_meta(ns, group)), secret),
      buckets - 1);
}

bool same_place(const detail::SlotPlace& a, const detail::SlotPlace& b) {
  return a.bucket == b.bucket && a.tag == b.tag;
}

/// A table that never grows, so that crafted (bucket, tag) places stay valid.
BlockIndex fixed_table(std::mt19937_64& rng, std::size_t slots) {
  BlockIndexOptions options;
  options.initial_capacity = slots;
  options.max_capacity = slots;
  options.max_load_factor = 0.9;
  options.seed = rng() | 1U;
  return BlockIndex(options);
}

TEST(Isolation, IdenticalDigestsInTwoNamespacesNeverLeak) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const Coordinator& c : {single_group(), hybrid()}) {
    const std::vector<BlockDigest> hashes = random_hashes(rng, 32);
    const std::int64_t full = 32 * 16;
    BlockIndex index;
    const Namespace tenant_a = 7;
    const Namespace tenant_b = 8;
    store_all(index, tenant_a, c, hashes);
    EXPECT_EQ(hit(c, hashes, index.view(tenant_a)), full);
    EXPECT_EQ(hit(c, hashes, index.view(tenant_b)), 0) << "tenant b sees tenant a's prompt";
    EXPECT_EQ(hit(c, hashes, index.view(kMaxNamespace)), 0);
    // Tenant b stores only the first 4 hash blocks of the same prompt (identical digests).
    const std::vector<BlockDigest> prefix(hashes.begin(), hashes.begin() + 4);
    store_all(index, tenant_b, c, prefix);
    EXPECT_EQ(hit(c, hashes, index.view(tenant_b)), 64);
    EXPECT_EQ(hit(c, hashes, index.view(tenant_a)), full);
    // Erasing tenant a's keys does not touch tenant b's identical ones.
    for (int g = 0; g < c.num_groups(); ++g) {
      const std::vector<BlockDigest> keys = chunk_keys_of(c, hashes, g);
      index.erase(tenant_a, g, keys);
    }
    EXPECT_EQ(hit(c, hashes, index.view(tenant_a)), 0);
    EXPECT_EQ(hit(c, hashes, index.view(tenant_b)), 64);
  }
}

TEST(Isolation, IdenticalDigestsInTwoGroupsNeverStandInForEachOther) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = two_merged_groups();
  const std::vector<BlockDigest> hashes = random_hashes(rng, 16);
  BlockIndex index;
  index.insert(3, 0, hashes);
  EXPECT_EQ(hit(c, hashes, index.view(3)), 0) << "group 0's keys answered for group 1";
  const std::vector<BlockDigest> first_five(hashes.begin(), hashes.begin() + 5);
  index.insert(3, 1, first_five);
  EXPECT_EQ(hit(c, hashes, index.view(3)), 5 * 16);
  // Group ids outside the configuration hold the same digests: they can never matter.
  index.insert(3, 5, hashes);
  EXPECT_EQ(hit(c, hashes, index.view(3)), 5 * 16);
}

/// Digests stored in namespace 1 and, in namespace 2, the same digests chosen so that each lands
/// in the same bucket with the same tag: only the namespace in the meta word tells them apart.
TEST(Isolation, NamespaceTwinsWithTheSameTagAndBucketNeverHit) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = single_group();
  BlockIndex index = fixed_table(rng, 4 * detail::kBucketSlots);
  ASSERT_EQ(index.capacity(), 48U);
  std::vector<BlockDigest> chain;
  while (chain.size() < 12) {
    const BlockDigest d = random_digest(rng);
    if (same_place(place(index, d, 1, 0), place(index, d, 2, 0))) {
      chain.push_back(d);
    }
  }
  index.insert(1, 0, chain);
  EXPECT_EQ(hit(c, chain, index.view(1)), 12 * 16);
  EXPECT_EQ(hit(c, chain, index.view(2)), 0) << "a namespace twin reported a hit";
  for (const BlockDigest& d : chain) {
    EXPECT_FALSE(index.contains(2, 0, d));
  }
}

TEST(Isolation, GroupTwinsWithTheSameTagAndBucketNeverHit) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = two_merged_groups();
  BlockIndex index = fixed_table(rng, 4 * detail::kBucketSlots);
  std::vector<BlockDigest> chain;
  while (chain.size() < 12) {
    const BlockDigest d = random_digest(rng);
    if (same_place(place(index, d, 6, 0), place(index, d, 6, 1))) {
      chain.push_back(d);
    }
  }
  index.insert(6, 0, chain);
  EXPECT_EQ(hit(c, chain, index.view(6)), 0) << "group 0 answered for its group-1 twin";
  index.insert(6, 1, chain);
  EXPECT_EQ(hit(c, chain, index.view(6)), 12 * 16);
}

/// For each stored key and each of its four 8-byte words, a twin differing only in that word (in
/// one or two bytes) with the same bucket and tag: a compare that skipped any word would hit.
TEST(Isolation, DigestTwinsDifferingInOneWordNeverHit) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = single_group();
  BlockIndex index = fixed_table(rng, 4 * detail::kBucketSlots);
  const std::vector<BlockDigest> stored = random_hashes(rng, 8);
  index.insert(9, 0, stored);
  ASSERT_EQ(hit(c, stored, index.view(9)), 8 * 16);
  int twins = 0;
  for (std::size_t k = 0; k < stored.size(); ++k) {
    const detail::SlotPlace home = place(index, stored[k], 9, 0);
    for (std::size_t word = 0; word < 4; ++word) {
      // Vary bytes 8*word + (0, 1) of the word: 65535 candidates, ~1/(4*253) collide.
      bool found = false;
      for (std::uint32_t v = 1; v < 65536 && !found; ++v) {
        BlockDigest twin = stored[k];
        const std::size_t lo = 8 * word + rng() % 7;
        twin.bytes[lo] ^= static_cast<std::uint8_t>(v & 0xFFU);
        twin.bytes[lo + 1] ^= static_cast<std::uint8_t>(v >> 8);
        if (twin == stored[k] || !same_place(place(index, twin, 9, 0), home)) {
          continue;
        }
        found = true;
        ++twins;
        EXPECT_FALSE(index.contains(9, 0, twin)) << "key " << k << " word " << word;
        // The twin in the middle of an otherwise stored chain cuts the hit exactly there.
        std::vector<BlockDigest> request = stored;
        request[k] = twin;
        EXPECT_EQ(hit(c, request, index.view(9)), static_cast<std::int64_t>(k) * 16)
            << "key " << k << " word " << word << ": the twin was taken for the stored key";
      }
    }
  }
  EXPECT_GE(twins, 24) << "too few twins found to test every word";
}

TEST(Isolation, ABulkInsertPastMaxCapacityChangesNothing) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = single_group();
  BlockIndexOptions options;
  options.initial_capacity = 48;
  options.max_capacity = 48;  // 4 buckets at load factor 0.8: at most 38 keys
  BlockIndex index(options);
  const std::vector<BlockDigest> first = random_hashes(rng, 30);
  ASSERT_EQ(index.insert(0, 0, first), 30U);
  const std::set<Key> before = contents(index);
  const std::vector<BlockDigest> more = random_hashes(rng, 20);
  try {
    index.insert(0, 0, more);
    ADD_FAILURE() << "20 more keys fit under max_capacity 48";
  } catch (const CapacityExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("max_capacity"), std::string::npos) << e.what();
  }
  EXPECT_EQ(contents(index), before) << "a failed bulk insert applied some keys";
  EXPECT_EQ(hit(c, first, index.view(0)), 30 * 16);
  EXPECT_EQ(hit(c, more, index.view(0)), 0);
  // Per-key group ids: the same all-or-nothing rule.
  std::vector<std::int32_t> groups(more.size(), 1);
  EXPECT_THROW(index.insert(0, groups, more), CapacityExceeded);
  EXPECT_EQ(contents(index), before);
  // Re-inserting present keys plus a few new ones that fit still works.
  std::vector<BlockDigest> mixed = first;
  mixed.insert(mixed.end(), more.begin(), more.begin() + 5);
  EXPECT_EQ(index.insert(0, 0, mixed), 5U);
  EXPECT_EQ(index.size(), 35U);
}

TEST(Isolation, AnUnboundedIndexGrowsAndLosesNoKey) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = single_group();
  BlockIndexOptions options;
  options.initial_capacity = 32;
  BlockIndex index(options);
  std::vector<std::vector<BlockDigest>> prompts;
  for (int p = 0; p < 200; ++p) {
    prompts.push_back(random_hashes(rng, 64));
    index.insert(static_cast<Namespace>(p % 3), 0, prompts.back());
  }
  EXPECT_EQ(index.size(), 200U * 64U);
  EXPECT_GT(index.capacity(), 200U * 64U);
  for (int p = 0; p < 200; ++p) {
    ASSERT_EQ(
        hit(c, prompts[static_cast<std::size_t>(p)], index.view(static_cast<Namespace>(p % 3))),
        64 * 16)
        << "prompt " << p;
  }
}

TEST(Isolation, ErasingAbsentKeysIsHarmless) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator c = single_group();
  BlockIndex index;
  const std::vector<BlockDigest> hashes = random_hashes(rng, 24);
  index.insert(1, 0, hashes);
  const std::set<Key> before = contents(index);
  const std::vector<BlockDigest> never = random_hashes(rng, 50);
  EXPECT_EQ(index.erase(1, 0, never), 0U);   // never inserted
  EXPECT_EQ(index.erase(2, 0, hashes), 0U);  // other namespace
  EXPECT_EQ(index.erase(1, 3, hashes), 0U);  // other group
  EXPECT_EQ(index.erase(1, 0, span<const BlockDigest>()), 0U);
  EXPECT_EQ(contents(index), before);
  EXPECT_EQ(hit(c, hashes, index.view(1)), 24 * 16);
  // Erasing one present key twice: the second time is a no-op; the hit stops right there.
  const std::vector<BlockDigest> tenth{hashes[10]};
  EXPECT_EQ(index.erase(1, 0, tenth), 1U);
  EXPECT_EQ(index.erase(1, 0, tenth), 0U);
  EXPECT_EQ(hit(c, hashes, index.view(1)), 10 * 16);
  EXPECT_EQ(index.size(), 23U);
}

}  // namespace
}  // namespace prefixhit
