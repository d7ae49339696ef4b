// The resident BlockIndex answers lookups exactly as the caller's own set does, on fresh random
// configurations, stores and requests every run, in single and batch lookups.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::copy_store;
using testing::random_config;
using testing::random_hashes;
using testing::random_max_length;
using testing::random_store;
using testing::seed_note;
using testing::test_seed;

TEST(ResidentIndex, LookupsEqualTheCallersSet) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const auto hashes = random_hashes(rng, rng() % 90);
    const KeySet store = random_store(rng, config, hashes);
    BlockIndex index;
    const auto ns = static_cast<Namespace>(rng() % 1000);
    copy_store(store, config, hashes, index, ns);
    // The same digests in a neighbouring namespace must not change anything.
    copy_store(random_store(rng, config, hashes), config, hashes, index, ns + 1);
    const std::int64_t max_len =
        random_max_length(rng, static_cast<std::int64_t>(hashes.size()), config.hash_block_size);
    const bool apply_eagle = rng() % 3 != 0;
    try {
      const LookupResult expected = c.find_longest_cache_hit(hashes, max_len, store, apply_eagle);
      const LookupResult actual =
          c.find_longest_cache_hit(hashes, max_len, index.view(ns), apply_eagle);
      ++compared;
      ASSERT_EQ(actual.hit_length, expected.hit_length) << "trial " << trial;
      for (std::size_t g = 0; g < expected.groups.size(); ++g) {
        EXPECT_EQ(actual.groups[g].num_blocks, expected.groups[g].num_blocks);
        EXPECT_EQ(actual.groups[g].num_placeholders, expected.groups[g].num_placeholders);
      }
      // Batch of the same request twice through the index.
      std::vector<BlockDigest> digests = hashes;
      digests.insert(digests.end(), hashes.begin(), hashes.end());
      const auto n = static_cast<std::int64_t>(hashes.size());
      const std::vector<std::int64_t> offsets{0, n, 2 * n};
      const std::vector<std::int64_t> max_lengths{max_len, max_len};
      const std::vector<std::uint8_t> eagle{static_cast<std::uint8_t>(apply_eagle),
                                            static_cast<std::uint8_t>(apply_eagle)};
      LookupBatch batch;
      batch.digests = digests;
      batch.offsets = offsets;
      batch.max_lengths = max_lengths;
      batch.apply_eagle = eagle;
      const BatchLookupResult both = c.find_longest_cache_hits(batch, index.view(ns));
      EXPECT_EQ(both.hit_lengths[0], expected.hit_length);
      EXPECT_EQ(both.hit_lengths[1], expected.hit_length);
    } catch (const Error& e) {
      // A finder error depends on the configuration alone, so the index must raise it too.
      EXPECT_THROW(c.find_longest_cache_hit(hashes, max_len, index.view(ns), apply_eagle), Error)
          << e.what();
    }
  }
  EXPECT_GT(compared, 50);
}

}  // namespace
}  // namespace prefixhit
