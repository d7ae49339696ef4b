// The CPU BlockIndex against a std::unordered_set model, on fresh random inputs each run (the
// seed is printed with every failure): insert, erase, re-insert, in-batch duplicates, crafted
// tag/bucket collisions, namespaces and groups, growth, max_capacity, tombstone churn, errors and
// concurrent readers and writers.
#include "prefixhit/block_index.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {
namespace {

std::uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

BlockDigest random_digest(std::mt19937_64& rng) {
  BlockDigest d;
  for (int w = 0; w < 4; ++w) {
    const std::uint64_t word = rng();
    std::memcpy(d.bytes.data() + 8 * w, &word, 8);
  }
  return d;
}

struct ModelKey {
  Namespace ns;
  int group;
  BlockDigest digest;
  friend bool operator==(const ModelKey& a, const ModelKey& b) {
    return a.ns == b.ns && a.group == b.group && a.digest == b.digest;
  }
};

struct ModelKeyHash {
  std::size_t operator()(const ModelKey& k) const {
    std::uint64_t w = 0;
    std::memcpy(&w, k.digest.bytes.data(), 8);
    return static_cast<std::size_t>(w ^ (std::uint64_t{k.ns} << 8) ^
                                    static_cast<std::uint64_t>(k.group));
  }
};

using Model = std::unordered_set<ModelKey, ModelKeyHash>;

span<const BlockDigest> all(const std::vector<BlockDigest>& v) {
  return span<const BlockDigest>(v.data(), v.size());
}

/// Checks every key of `probe` (and the model's keys) against the model with all read paths.
void expect_matches_model(const BlockIndex& index, const Model& model,
                          const std::vector<BlockDigest>& probe,
                          const std::vector<Namespace>& namespaces, int groups) {
  ASSERT_EQ(index.size(), model.size());
  std::vector<std::uint8_t> out(probe.size(), 0xCD);
  for (Namespace ns : namespaces) {
    for (int g = 0; g < groups; ++g) {
      index.contains(ns, g, all(probe), out.data());
      for (std::size_t i = 0; i < probe.size(); ++i) {
        const bool expected = model.count(ModelKey{ns, g, probe[i]}) != 0;
        ASSERT_EQ(out[i], expected ? 1 : 0) << "ns " << ns << " group " << g << " key " << i;
        ASSERT_EQ(index.contains(ns, g, probe[i]), expected);
      }
      // View::probe over windows with positive and negative steps.
      const BlockIndex::View view = index.view(ns);
      const auto n = static_cast<std::int64_t>(probe.size());
      for (std::int64_t first = 0; first + 8 <= n; first += 61) {
        for (std::int64_t step : {std::int64_t{1}, std::int64_t{3}}) {
          const int count =
              static_cast<int>(std::min<std::int64_t>(64, (n - 1 - first) / step + 1));
          const std::uint64_t bits = view.probe(g, probe.data(), first, step, count);
          for (int k = 0; k < count; ++k) {
            const bool expected =
                model.count(ModelKey{ns, g, probe[static_cast<std::size_t>(first + k * step)]}) !=
                0;
            ASSERT_EQ(((bits >> k) & 1U) != 0, expected)
                << "window at " << first << " step " << step << " k " << k;
          }
          const std::int64_t last = n - 1 - first;
          const int back = static_cast<int>(std::min<std::int64_t>(64, last / step + 1));
          const std::uint64_t back_bits = view.probe(g, probe.data(), last, -step, back);
          for (int k = 0; k < back; ++k) {
            const bool expected =
                model.count(ModelKey{ns, g, probe[static_cast<std::size_t>(last - k * step)]}) != 0;
            ASSERT_EQ(((back_bits >> k) & 1U) != 0, expected);
          }
        }
      }
    }
  }
  // for_each visits exactly the model.
  Model visited;
  index.for_each([&](Namespace ns, int g, const BlockDigest& d) {
    EXPECT_TRUE(visited.insert(ModelKey{ns, g, d}).second) << "visited twice";
  });
  EXPECT_EQ(visited.size(), model.size());
  for (const auto& k : visited) {
    EXPECT_EQ(model.count(k), 1U);
  }
}

TEST(BlockIndex, RandomOperationsMatchAnUnorderedSet) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed) + " (rerun with it to reproduce)");
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 32;  // start tiny: force many rehashes
  options.seed = rng() | 1U;
  BlockIndex index(options);
  Model model;
  const std::vector<Namespace> namespaces = {0, 1, kMaxNamespace};
  constexpr int kGroups = 3;
  std::vector<BlockDigest> universe;
  for (int i = 0; i < 3000; ++i) {
    universe.push_back(random_digest(rng));
  }
  for (int round = 0; round < 40; ++round) {
    const Namespace ns = namespaces[rng() % namespaces.size()];
    const int group = static_cast<int>(rng() % kGroups);
    std::vector<BlockDigest> batch;
    const std::size_t batch_size = rng() % 400;
    for (std::size_t i = 0; i < batch_size; ++i) {
      batch.push_back(universe[rng() % universe.size()]);  // duplicates within and across batches
    }
    if (rng() % 3 != 0) {
      std::size_t expected_new = 0;
      for (const auto& d : batch) {
        expected_new += model.insert(ModelKey{ns, group, d}).second ? 1 : 0;
      }
      ASSERT_EQ(index.insert(ns, group, all(batch)), expected_new) << "round " << round;
    } else {
      std::size_t expected_removed = 0;
      for (const auto& d : batch) {
        expected_removed += model.erase(ModelKey{ns, group, d});
      }
      ASSERT_EQ(index.erase(ns, group, all(batch)), expected_removed) << "round " << round;
    }
    ASSERT_EQ(index.size(), model.size());
    ASSERT_LE(static_cast<double>(index.used_slots()),
              options.max_load_factor * static_cast<double>(index.capacity()) + 1e-9);
  }
  std::vector<BlockDigest> probe(universe.begin(), universe.begin() + 600);
  for (int i = 0; i < 200; ++i) {
    probe.push_back(random_digest(rng));  // never inserted
  }
  expect_matches_model(index, model, probe, namespaces, kGroups + 1);
}

TEST(BlockIndex, PerKeyGroupIdsMatchTheModel) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndex index;
  Model model;
  std::vector<BlockDigest> keys;
  std::vector<std::int32_t> groups;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back(i % 7 == 0 && i > 0 ? keys[static_cast<std::size_t>(i - 1)]
                                       : random_digest(rng));
    groups.push_back(static_cast<std::int32_t>(rng() % kMaxGroups));
  }
  std::size_t expected_new = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    expected_new += model.insert(ModelKey{9, groups[i], keys[i]}).second ? 1 : 0;
  }
  EXPECT_EQ(index.insert(9, span<const std::int32_t>(groups.data(), groups.size()), all(keys)),
            expected_new);
  std::vector<std::uint8_t> out(keys.size());
  std::vector<std::int32_t> shifted(groups);
  for (auto& g : shifted) {
    g = (g + 1) % kMaxGroups;
  }
  index.contains(9, span<const std::int32_t>(shifted.data(), shifted.size()), all(keys),
                 out.data());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(out[i], model.count(ModelKey{9, shifted[i], keys[i]}) ? 1 : 0);
  }
  std::size_t expected_removed = 0;
  for (std::size_t i = 0; i < keys.size(); i += 2) {
    expected_removed += model.erase(ModelKey{9, groups[i], keys[i]});
  }
  std::vector<BlockDigest> half_keys;
  std::vector<std::int32_t> half_groups;
  for (std::size_t i = 0; i < keys.size(); i += 2) {
    half_keys.push_back(keys[i]);
    half_groups.push_back(groups[i]);
  }
  EXPECT_EQ(index.erase(9, span<const std::int32_t>(half_groups.data(), half_groups.size()),
                        all(half_keys)),
            expected_removed);
  EXPECT_EQ(index.size(), model.size());
}

TEST(BlockIndex, SameDigestInTwoNamespacesAndTwoGroupsStaysSeparate) {
  std::mt19937_64 rng(fresh_seed());
  BlockIndex index;
  std::vector<BlockDigest> keys;
  for (int i = 0; i < 100; ++i) {
    keys.push_back(random_digest(rng));
  }
  EXPECT_EQ(index.insert(1, 0, all(keys)), 100U);
  EXPECT_EQ(index.insert(2, 0, all(keys)), 100U);  // same digests, other tenant: new keys
  EXPECT_EQ(index.insert(1, 5, all(keys)), 100U);  // same digests, other group: new keys
  EXPECT_EQ(index.size(), 300U);
  EXPECT_EQ(index.erase(2, 0, all(keys)), 100U);
  std::vector<std::uint8_t> out(keys.size());
  index.contains(2, 0, all(keys), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "erased tenant still visible";
  index.contains(1, 0, all(keys), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 100);
  index.contains(3, 0, all(keys), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "a namespace never written sees keys";
  index.contains(1, 6, all(keys), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0);
  EXPECT_EQ(index.view(2).probe(0, keys.data(), 0, 1, 64), 0U);
  EXPECT_EQ(index.view(1).probe(5, keys.data(), 0, 1, 64), ~std::uint64_t{0});
}

TEST(BlockIndex, KeysCollidingOnTagAndBucketAreNotConfused) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 4 * detail::kBucketSlots;
  options.max_capacity = 4 * detail::kBucketSlots;  // stays at 4 buckets: crafted places hold
  options.max_load_factor = 0.9;                    // 43 keys: the stored keys and their twins
  options.seed = rng() | 1U;
  BlockIndex index(options);
  ASSERT_EQ(index.capacity(), 48U);
  const detail::IndexHashKey hk = detail::make_hash_key(index.hash_seed());
  const std::uint32_t meta = detail::pack_meta(4, 2);
  // Pairs of distinct digests with the same home bucket and tag under this index's secret.
  std::vector<std::vector<BlockDigest>> by_place(4 * 256);
  std::vector<BlockDigest> stored;
  std::vector<BlockDigest> twins;
  for (int i = 0; i < 50000 && stored.size() < 20; ++i) {
    const BlockDigest d = random_digest(rng);
    const detail::SlotPlace p =
        detail::place_of(detail::slot_hash(detail::make_slot_key(d, meta), hk), 3);
    auto& same = by_place[p.bucket * 256 + p.tag];
    same.push_back(d);
    if (same.size() == 2) {
      stored.push_back(same[0]);
      twins.push_back(same[1]);
    }
  }
  ASSERT_GE(stored.size(), 20U);
  EXPECT_EQ(index.insert(4, 2, all(stored)), stored.size());
  std::vector<std::uint8_t> out(twins.size());
  index.contains(4, 2, all(twins), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "a tag/bucket twin was reported present";
  index.contains(4, 2, all(stored), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(stored.size()));
  // The same digest in another namespace whose (bucket, tag) collides with the stored key's.
  int namespace_twins = 0;
  for (const BlockDigest& d : stored) {
    const detail::SlotPlace home =
        detail::place_of(detail::slot_hash(detail::make_slot_key(d, meta), hk), 3);
    for (Namespace ns = 5; ns < 20000; ++ns) {
      const detail::SlotPlace p = detail::place_of(
          detail::slot_hash(detail::make_slot_key(d, detail::pack_meta(ns, 2)), hk), 3);
      if (p.bucket == home.bucket && p.tag == home.tag) {
        EXPECT_FALSE(index.contains(ns, 2, d)) << "namespace " << ns << " sees namespace 4's key";
        ++namespace_twins;
        break;
      }
    }
  }
  EXPECT_GE(namespace_twins, 10);
  // Erasing the twins (absent) is harmless; inserting them adds them as distinct keys.
  EXPECT_EQ(index.erase(4, 2, all(twins)), 0U);
  EXPECT_EQ(index.insert(4, 2, all(twins)), twins.size());
  EXPECT_EQ(index.erase(4, 2, all(stored)), stored.size());
  index.contains(4, 2, all(twins), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(twins.size()));
}

TEST(BlockIndex, GrowsUnderLoadAndKeepsEveryKey) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 32;
  BlockIndex index(options);
  std::vector<BlockDigest> keys;
  std::size_t last_capacity = index.capacity();
  int growths = 0;
  for (int batch = 0; batch < 50; ++batch) {
    std::vector<BlockDigest> fresh;
    for (int i = 0; i < 4000; ++i) {
      fresh.push_back(random_digest(rng));
    }
    ASSERT_EQ(index.insert(0, batch % kMaxGroups, all(fresh)), fresh.size());
    keys.insert(keys.end(), fresh.begin(), fresh.end());
    growths += index.capacity() > last_capacity ? 1 : 0;
    last_capacity = index.capacity();
    ASSERT_LE(static_cast<double>(index.size()), 0.8 * static_cast<double>(index.capacity()));
  }
  EXPECT_GE(growths, 5);
  EXPECT_EQ(index.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(index.contains(0, static_cast<int>(i / 4000) % kMaxGroups, keys[i])) << "key " << i;
  }
}

TEST(BlockIndex, MaxCapacityRejectsWholeBatchesAndChangesNothing) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 64;
  options.max_capacity = 1000;    // 768 slots (64 buckets of 12) at most
  options.max_load_factor = 0.5;  // 384 keys at most
  BlockIndex index(options);
  std::vector<BlockDigest> first;
  for (int i = 0; i < 378; ++i) {
    first.push_back(random_digest(rng));
  }
  ASSERT_EQ(index.insert(1, 0, all(first)), 378U);
  EXPECT_EQ(index.capacity(), 768U);
  std::vector<BlockDigest> too_many;
  for (int i = 0; i < 7; ++i) {
    too_many.push_back(random_digest(rng));
  }
  EXPECT_THROW(index.insert(1, 0, all(too_many)), CapacityExceeded);
  EXPECT_EQ(index.size(), 378U);
  std::vector<std::uint8_t> out(too_many.size());
  index.contains(1, 0, all(too_many), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "a rejected batch left keys behind";
  // A batch far larger than the room left, but with only 6 distinct new keys, fits exactly.
  std::vector<BlockDigest> mostly_old(first);
  for (int rep = 0; rep < 20; ++rep) {
    mostly_old.insert(mostly_old.end(), too_many.begin(), too_many.begin() + 6);
  }
  EXPECT_EQ(index.insert(1, 0, all(mostly_old)), 6U);
  EXPECT_EQ(index.size(), 384U);
  try {
    index.insert(1, 0, span<const BlockDigest>(too_many.data() + 6, 1));
    FAIL() << "expected CapacityExceeded";
  } catch (const CapacityExceeded& e) {
    EXPECT_NE(std::string(e.what()).find("max_capacity"), std::string::npos) << e.what();
  }
  // Erasing makes room again; churn at the limit never loses a key or throws.
  EXPECT_EQ(index.erase(1, 0, span<const BlockDigest>(first.data(), 100)), 100U);
  for (int round = 0; round < 50; ++round) {
    std::vector<BlockDigest> churn;
    for (int i = 0; i < 100; ++i) {
      churn.push_back(random_digest(rng));
    }
    ASSERT_EQ(index.insert(1, 1, all(churn)), 100U) << "round " << round;
    ASSERT_EQ(index.erase(1, 1, all(churn)), 100U);
  }
  EXPECT_EQ(index.size(), 284U);
  EXPECT_EQ(index.capacity(), 768U);
  for (std::size_t i = 100; i < first.size(); ++i) {
    ASSERT_TRUE(index.contains(1, 0, first[i]));
  }
}

TEST(BlockIndex, TombstoneChurnDoesNotGrowTheTable) {
  std::mt19937_64 rng(fresh_seed());
  BlockIndexOptions options;
  options.initial_capacity = 4096;
  BlockIndex index(options);
  const std::size_t capacity = index.capacity();
  std::vector<BlockDigest> resident;
  for (int i = 0; i < 2000; ++i) {
    resident.push_back(random_digest(rng));
  }
  index.insert(0, 0, all(resident));
  for (int round = 0; round < 200; ++round) {
    std::vector<BlockDigest> churn;
    for (int i = 0; i < 500; ++i) {
      churn.push_back(random_digest(rng));
    }
    ASSERT_EQ(index.insert(0, 1, all(churn)), 500U);
    ASSERT_EQ(index.erase(0, 1, all(churn)), 500U);
  }
  EXPECT_EQ(index.capacity(), capacity);
  EXPECT_EQ(index.size(), resident.size());
  std::vector<std::uint8_t> out(resident.size());
  index.contains(0, 0, all(resident), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(resident.size()));
}

TEST(BlockIndex, BadArgumentsThrowTypedErrorsAndApplyNothing) {
  BlockIndex index;
  std::mt19937_64 rng(fresh_seed());
  std::vector<BlockDigest> keys = {random_digest(rng), random_digest(rng)};
  EXPECT_THROW(index.insert(kMaxNamespace + 1, 0, all(keys)), InvalidArgument);
  EXPECT_THROW(index.insert(0, -1, all(keys)), InvalidArgument);
  EXPECT_THROW(index.insert(0, kMaxGroups, all(keys)), InvalidArgument);
  EXPECT_THROW(index.erase(0, 99, all(keys)), InvalidArgument);
  std::uint8_t out[2];
  EXPECT_THROW(index.contains(0, 32, all(keys), out), InvalidArgument);
  EXPECT_THROW(index.contains(0, 0, all(keys), nullptr), InvalidArgument);
  EXPECT_THROW(index.contains(kMaxNamespace + 1, 0, keys[0]), InvalidArgument);
  std::vector<std::int32_t> groups = {0, 40};
  EXPECT_THROW(index.insert(0, span<const std::int32_t>(groups.data(), groups.size()), all(keys)),
               InvalidArgument);
  std::vector<std::int32_t> short_groups = {0};
  EXPECT_THROW(index.insert(0, span<const std::int32_t>(short_groups.data(), 1), all(keys)),
               InvalidArgument);
  EXPECT_EQ(index.size(), 0U) << "a rejected call applied keys";
  // The hot-path probe never throws: a bad group or namespace simply holds nothing.
  EXPECT_EQ(index.view(0).probe(-3, keys.data(), 0, 1, 2), 0U);
  EXPECT_EQ(index.view(kMaxNamespace + 1).probe(0, keys.data(), 0, 1, 2), 0U);
  BlockIndexOptions bad;
  bad.max_load_factor = 0.0;
  EXPECT_THROW(BlockIndex{bad}, InvalidArgument);
  bad.max_load_factor = 0.96;
  EXPECT_THROW(BlockIndex{bad}, InvalidArgument);
  bad.max_load_factor = 0.8;
  bad.max_capacity = detail::kBucketSlots - 1;
  EXPECT_THROW(BlockIndex{bad}, InvalidArgument);
  // Erasing absent keys, empty batches and clear are harmless.
  EXPECT_EQ(index.erase(0, 0, all(keys)), 0U);
  EXPECT_EQ(index.insert(0, 0, span<const BlockDigest>()), 0U);
  index.insert(0, 0, all(keys));
  index.clear();
  EXPECT_EQ(index.size(), 0U);
  EXPECT_FALSE(index.contains(0, 0, keys[0]));
  // A moved-from index fails cleanly.
  BlockIndex moved = std::move(index);
  EXPECT_THROW(index.insert(0, 0, all(keys)), InvalidArgument);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.insert(0, 0, all(keys)), 2U);
}

// Most keys lie in the digest line a lookup prefetches with their header (about 74% at load 0.8;
// 16% if inserts took the lowest free lane), after direct inserts, after the rehashes of growth
// and after erases and re-inserts: layout() checks the index itself, not the shared rule alone.
TEST(BlockIndex, MostKeysLieInTheDigestLineTheirLookupPrefetches) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 12 << 12;
  options.seed = seed | 1U;
  BlockIndex index(options);
  const auto expect_most_in_line = [&](const char* when) {
    const BlockIndex::Layout layout = index.layout();
    EXPECT_EQ(layout.keys, index.size()) << when;
    EXPECT_LE(layout.in_prefetched_line, layout.in_home_bucket) << when;
    EXPECT_LE(layout.in_home_bucket + layout.in_second_bucket, layout.keys) << when;
    EXPECT_GT(static_cast<double>(layout.in_prefetched_line),
              0.5 * static_cast<double>(layout.keys))
        << when << ": " << layout.in_prefetched_line << " of " << layout.keys;
  };
  std::vector<BlockDigest> keys;
  const auto insert_up_to = [&](std::size_t n) {
    std::vector<BlockDigest> batch;
    while (keys.size() < n) {
      keys.push_back(random_digest(rng));
      batch.push_back(keys.back());
    }
    index.insert(0, static_cast<int>(rng() % 4), batch);
  };
  const std::size_t capacity = index.capacity();
  insert_up_to(static_cast<std::size_t>(0.8 * static_cast<double>(capacity)) - 1);
  ASSERT_EQ(index.capacity(), capacity);  // at the load limit, not grown
  expect_most_in_line("at load 0.8");
  insert_up_to(static_cast<std::size_t>(1.5 * static_cast<double>(capacity)));
  ASSERT_GT(index.capacity(), capacity);
  expect_most_in_line("after growth");
  std::vector<BlockDigest> erased(keys.begin(),
                                  keys.begin() + static_cast<std::ptrdiff_t>(keys.size() / 3));
  for (int group = 0; group < 4; ++group) {
    index.erase(0, group, erased);
  }
  keys.erase(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(erased.size()));
  insert_up_to(keys.size() + erased.size());
  expect_most_in_line("after erases and re-inserts");
  // An empty index: nothing to count.
  EXPECT_EQ(BlockIndex().layout().keys, 0U);
}

TEST(BlockIndex, SeedZeroDrawsARandomSeed) {
  BlockIndex a;
  BlockIndex b;
  EXPECT_NE(a.hash_seed(), 0U);
  EXPECT_NE(a.hash_seed(), b.hash_seed());
  BlockIndexOptions fixed;
  fixed.seed = 1234;
  EXPECT_EQ(BlockIndex(fixed).hash_seed(), 1234U);
}

TEST(BlockIndex, NamesTheSlotHashFormItWasBuiltWith) {
#if PREFIXHIT_SLOT_HASH_AESNI
  EXPECT_STREQ(BlockIndex::slot_hash_form(), "aes-ni");
#elif PREFIXHIT_SLOT_HASH_ARM_AES
  EXPECT_STREQ(BlockIndex::slot_hash_form(), "armv8-aes");
#else
  EXPECT_STREQ(BlockIndex::slot_hash_form(), "table");
#endif
}

TEST(BlockIndex, ConcurrentReadersAndWritersSeeWholeBatches) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 64;  // writers force rehashes while readers read
  BlockIndex index(options);
  std::vector<BlockDigest> stable;
  for (int i = 0; i < 1000; ++i) {
    stable.push_back(random_digest(rng));
  }
  index.insert(0, 0, all(stable));
  constexpr int kWriters = 2;
  constexpr int kReaders = 2;
  constexpr int kRounds = 3000;
  // Each writer owns its keys: pairs inserted and erased together in one bulk call.
  std::vector<std::vector<BlockDigest>> owned(kWriters);
  for (auto& keys : owned) {
    for (int i = 0; i < 64; ++i) {
      keys.push_back(random_digest(rng));
    }
  }
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<long> reads{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < kRounds; ++round) {
        if (index.insert(1, w, all(owned[w])) != owned[w].size()) {
          failures.fetch_add(1);
        }
        if (index.erase(1, w, all(owned[w])) != owned[w].size()) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      std::vector<std::uint8_t> out(64);
      while (!stop.load()) {
        for (int w = 0; w < kWriters; ++w) {
          // One bulk call sees a writer's batch entirely or not at all.
          index.contains(1, w, all(owned[w]), out.data());
          const auto present = std::count(out.begin(), out.end(), 1);
          if (present != 0 && present != 64) {
            failures.fetch_add(1);
          }
          const std::uint64_t bits = index.view(1).probe(w, owned[w].data(), 0, 1, 64);
          if (bits != 0 && bits != ~std::uint64_t{0}) {
            failures.fetch_add(1);
          }
        }
        if (index.view(0).probe(0, stable.data(), 100, 1, 64) != ~std::uint64_t{0}) {
          failures.fetch_add(1);  // a stable key vanished during a rehash
        }
        reads.fetch_add(1);
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) {
    threads[static_cast<std::size_t>(w)].join();
  }
  stop.store(true);
  for (std::size_t t = kWriters; t < threads.size(); ++t) {
    threads[t].join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(index.size(), stable.size());
  std::vector<std::uint8_t> out(stable.size());
  index.contains(0, 0, all(stable), out.data());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(stable.size()));
}

TEST(BlockIndexOptionsCheck, AbsurdInitialCapacityIsAnErrorNotATinyTable) {
  BlockIndexOptions options;
  options.initial_capacity = std::numeric_limits<std::size_t>::max();
  EXPECT_THROW(BlockIndex{options}, CapacityExceeded);
  options.initial_capacity = 1000;
  const BlockIndex sized(options);
  EXPECT_GE(sized.capacity(), 1000U);
}

}  // namespace
}  // namespace prefixhit
