// BlockIndex::erase's software pipeline (several keys in flight, each found and erased a fixed
// distance after it is hashed) against a std::set model: random inserts and erases over a small
// key pool, so that batches hold duplicates, absent keys, keys of the same bytes in another
// group or width, and erases of keys an earlier erase of the same batch already removed. Tiny
// tables at a high load factor fill whole buckets, so erases leave tombstones and probes run
// past the home bucket. Batch sizes straddle the pipeline's depth.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <iostream>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::seed_note;
using testing::test_seed;

/// (group, width, digest bytes): one key of namespace 0.
using ModelKey = std::tuple<int, std::size_t, std::array<std::uint8_t, 32>>;

struct PoolKey {
  int group;
  std::size_t width;
  BlockDigest digest;
};

std::vector<PoolKey> make_pool(std::mt19937_64& rng, std::size_t n) {
  std::vector<PoolKey> pool;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t h = rng();
    const int group = static_cast<int>(rng() % 3);
    switch (rng() % 3) {
      case 0:
        pool.push_back({group, 8, BlockDigest::from_int_hash(h)});
        break;
      case 1: {
        BlockDigest d{};
        for (std::size_t b = 0; b < 16; ++b) {
          d.bytes[b] = static_cast<std::uint8_t>(rng());
        }
        pool.push_back({group, 16, d});
        break;
      }
      default: {
        BlockDigest d{};
        for (auto& b : d.bytes) {
          b = static_cast<std::uint8_t>(rng());
        }
        pool.push_back({group, 32, d});
      }
    }
    // The same bytes under another group: a distinct key that must survive the first's erase.
    if (rng() % 4 == 0) {
      PoolKey twin = pool.back();
      twin.group = (twin.group + 1) % 3;
      pool.push_back(twin);
    }
  }
  return pool;
}

TEST(BlockIndexErasePipeline, MatchesSetModelOnRandomInsertsAndErases) {
  const std::uint64_t seed = test_seed();
  std::cout << "seed " << seed << " (" << seed_note(seed) << ")\n";
  std::mt19937_64 rng(seed);
  const std::size_t batch_sizes[] = {0, 1, 2, 9, 10, 11, 19, 20, 21, 31, 32, 33, 64, 257, 1500};
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(seed_note(seed) + ", round " + std::to_string(round));
    BlockIndexOptions options;
    options.initial_capacity = 64;                          // two buckets: full buckets early
    options.max_load_factor = round % 2 == 0 ? 0.95 : 0.5;  // tombstones vs growth
    options.seed = rng() | 1U;
    BlockIndex index(options);
    std::set<ModelKey> model;
    const std::vector<PoolKey> pool = make_pool(rng, 64 + rng() % 2000);
    auto key_of = [](const PoolKey& k) { return ModelKey{k.group, k.width, k.digest.bytes}; };
    for (int step = 0; step < 60; ++step) {
      const std::size_t n = batch_sizes[rng() % std::size(batch_sizes)];
      const bool insert = rng() % 5 < 2;
      const bool one_group = rng() % 2 == 0;
      const std::size_t width = std::size_t{8} << (rng() % 3);
      const int group = static_cast<int>(rng() % 3);
      std::vector<BlockDigest> digests;
      std::vector<std::int32_t> groups;
      std::vector<ModelKey> batch;
      for (std::size_t i = 0; i < n * 4 && digests.size() < n; ++i) {
        const PoolKey& k = pool[rng() % pool.size()];
        if (k.width != width || (one_group && k.group != group)) {
          continue;
        }
        digests.push_back(k.digest);
        groups.push_back(k.group);
        batch.push_back(key_of(k));
        if (rng() % 8 == 0) {  // a duplicate within the batch
          digests.push_back(k.digest);
          groups.push_back(k.group);
          batch.push_back(key_of(k));
        }
      }
      std::size_t expected = 0;
      for (const ModelKey& k : batch) {
        expected += insert ? (model.insert(k).second ? 1U : 0U) : model.erase(k);
      }
      std::size_t got = 0;
      if (insert) {
        got = one_group ? index.insert(0, group, span<const BlockDigest>(digests), width)
                        : index.insert(0, span<const std::int32_t>(groups),
                                       span<const BlockDigest>(digests), width);
      } else {
        got = one_group ? index.erase(0, group, span<const BlockDigest>(digests), width)
                        : index.erase(0, span<const std::int32_t>(groups),
                                      span<const BlockDigest>(digests), width);
      }
      ASSERT_EQ(got, expected) << (insert ? "insert" : "erase") << " of " << digests.size()
                               << " keys at step " << step;
      ASSERT_EQ(index.size(), model.size()) << "step " << step;
    }
    // Every pool key answers as the model says, and the index holds nothing else.
    for (const PoolKey& k : pool) {
      ASSERT_EQ(index.contains(0, k.group, k.digest, k.width), model.count(key_of(k)) == 1);
    }
    std::set<ModelKey> seen;
    index.for_each_key([&](Namespace ns, int g, std::size_t w, const BlockDigest& d) {
      EXPECT_EQ(ns, 0U);
      seen.insert(ModelKey{g, w, d.bytes});
    });
    EXPECT_EQ(seen, model);
  }
}

}  // namespace
}  // namespace prefixhit
