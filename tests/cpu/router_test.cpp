// Router mode: the residency index against a model, and per-worker scores against W independent
// single-store lookups (one KeySet per worker) on random configurations of every finder kind.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"
#include "tests/common/router_cases.hpp"
#include "tests/cpu/test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_config;
using testing::random_hashes;
using testing::random_max_length;
using testing::seed_note;
using testing::test_seed;

using testing::router::derive;
using testing::router::Holdings;
using testing::router::random_holdings;
using testing::router::Request;

TEST(Router, ScoresEqualIndependentLookupsPerWorker) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const int workers = std::vector<int>{1, 2, 5, 64, 65, 130}[rng() % 6];
    const int tiers = 1 + static_cast<int>(rng() % 2);
    ResidencyIndex residency(ResidencyOptions{workers, tiers, 64, 0});
    std::vector<KeySet> stores(static_cast<std::size_t>(workers));
    std::vector<KeySet> tier0(static_cast<std::size_t>(workers));  // what tier_mask 1 sees
    std::vector<Request> requests(1 + rng() % 3);
    for (Request& req : requests) {
      req.hashes = random_hashes(rng, rng() % 70);
      const std::size_t n = req.hashes.size();
      req.max_length = random_max_length(rng, static_cast<std::int64_t>(n), config.hash_block_size);
      req.eagle = rng() % 4 != 0;
      const Holdings base = random_holdings(rng, config, n);
      for (int w = 0; w < workers; ++w) {
        const Holdings mine = derive(rng, base, config, n);
        for (const auto& [gid, idx] : mine) {
          const int tier = static_cast<int>(rng() % static_cast<std::uint64_t>(tiers));
          residency.insert(static_cast<WorkerId>(w), 0, gid, {&req.hashes[idx], 1},
                           BlockDigest::kSize, tier);
          stores[static_cast<std::size_t>(w)].insert(gid, req.hashes[idx]);
          if (tier == 0) {
            tier0[static_cast<std::size_t>(w)].insert(gid, req.hashes[idx]);
          }
        }
      }
    }
    // Noise: another namespace and another worker's keys must not leak in.
    if (!requests[0].hashes.empty()) {
      residency.insert(0, 7, 0, {&requests[0].hashes[0], 1});
    }
    std::vector<BlockDigest> digests;
    std::vector<std::int64_t> offsets{0};
    std::vector<std::int64_t> max_lengths;
    std::vector<std::uint8_t> eagle;
    for (const Request& req : requests) {
      digests.insert(digests.end(), req.hashes.begin(), req.hashes.end());
      offsets.push_back(static_cast<std::int64_t>(digests.size()));
      max_lengths.push_back(req.max_length);
      eagle.push_back(req.eagle ? 1 : 0);
    }
    const LookupBatch batch{digests, offsets, max_lengths, eagle};
    for (const std::uint32_t tier_mask : {~0U, 1U}) {
      const std::vector<KeySet>& truth = tier_mask == 1U ? tier0 : stores;
      // The reference: one single-store lookup per worker; the first error thrown, if any.
      std::optional<ErrorKind> expected_error;
      std::vector<std::vector<LookupResult>> expected(requests.size());
      for (std::size_t r = 0; r < requests.size() && !expected_error; ++r) {
        for (int w = 0; w < workers && !expected_error; ++w) {
          try {
            expected[r].push_back(
                c.find_longest_cache_hit(requests[r].hashes, requests[r].max_length,
                                         truth[static_cast<std::size_t>(w)], requests[r].eagle));
          } catch (const Error& e) {
            expected_error = e.kind();
          }
        }
      }
      ScoreOptions options;
      options.tier_mask = tier_mask;
      options.num_threads = 1 + static_cast<int>(rng() % 2);
      if (expected_error) {
        try {
          (void)score_workers(c, batch, residency, options);
          ADD_FAILURE() << "trial " << trial << ": expected " << to_string(*expected_error);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), *expected_error) << e.what();
        }
        continue;
      }
      const RouterScores scores = score_workers(c, batch, residency, options);
      ASSERT_EQ(scores.num_workers, workers);
      for (std::size_t r = 0; r < requests.size(); ++r) {
        for (int w = 0; w < workers; ++w) {
          const LookupResult got = scores.result(r, w);
          const LookupResult& want = expected[r][static_cast<std::size_t>(w)];
          ASSERT_EQ(got.hit_length, want.hit_length)
              << "trial " << trial << " request " << r << " worker " << w;
          ASSERT_EQ(got.groups.size(), want.groups.size());
          for (std::size_t g = 0; g < want.groups.size(); ++g) {
            ASSERT_EQ(got.groups[g].num_blocks, want.groups[g].num_blocks)
                << "trial " << trial << " request " << r << " worker " << w << " group " << g;
            ASSERT_EQ(got.groups[g].num_placeholders, want.groups[g].num_placeholders)
                << "trial " << trial << " request " << r << " worker " << w << " group " << g;
          }
          ++compared;
        }
      }
      EXPECT_LE(scores.classes, requests.size() * static_cast<std::size_t>(workers));
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(Router, IdenticalWorkersShareOneClass) {
  Config config;
  config.hash_block_size = 16;
  config.groups = {GroupSpec::full_attention(16), GroupSpec::sliding_window_attention(16, 32)};
  const Coordinator c(config);
  std::mt19937_64 rng(1);
  const auto hashes = random_hashes(rng, 40);
  ResidencyIndex residency(ResidencyOptions{200, 1, 64, 0});
  for (WorkerId w = 0; w < 200; ++w) {
    residency.insert(w, 0, 0, hashes);
    residency.insert(w, 0, 1, hashes);
  }
  const std::vector<std::int64_t> offsets{0, 40};
  const std::vector<std::int64_t> max_lengths{640};
  const RouterScores s = score_workers(c, LookupBatch{hashes, offsets, max_lengths, {}}, residency);
  EXPECT_EQ(s.classes, 1U);
  for (int w = 0; w < 200; ++w) {
    EXPECT_EQ(s.result(0, w).hit_length, 640);
  }
}

TEST(Router, ResidencyMatchesAModel) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const int workers = 70;
  const int tiers = 2;
  ResidencyIndex index(ResidencyOptions{workers, tiers, 64, 0});
  const auto keys = random_hashes(rng, 300);
  std::map<std::tuple<int, std::size_t>, std::set<int>> model;  // (group, key) -> columns
  for (int step = 0; step < 4000; ++step) {
    const auto w = static_cast<WorkerId>(rng() % workers);
    const int tier = static_cast<int>(rng() % tiers);
    const int group = static_cast<int>(rng() % 3);
    const std::size_t k = rng() % keys.size();
    const int column = static_cast<int>(w) * tiers + tier;
    const auto op = rng() % 100;
    if (op < 60) {
      const bool fresh = model[{group, k}].insert(column).second;
      EXPECT_EQ(index.insert(w, 0, group, {&keys[k], 1}, BlockDigest::kSize, tier),
                fresh ? 1U : 0U);
    } else if (op < 97) {
      const bool had = model[{group, k}].erase(column) != 0;
      EXPECT_EQ(index.erase(w, 0, group, {&keys[k], 1}, BlockDigest::kSize, tier), had ? 1U : 0U);
    } else {
      index.clear_worker(w);
      for (auto& [key, cols] : model) {
        for (int t = 0; t < tiers; ++t) {
          cols.erase(static_cast<int>(w) * tiers + t);
        }
      }
    }
    if (step % 500 == 0 || step == 3999) {
      std::size_t live = 0;
      std::size_t pairs = 0;
      for (const auto& [key, cols] : model) {
        live += cols.empty() ? 0 : 1;
        pairs += cols.size();
        for (int worker = 0; worker < workers; ++worker) {
          const bool t0 = cols.count(worker * tiers) != 0;
          const bool t1 = cols.count(worker * tiers + 1) != 0;
          const auto& [g, ki] = key;
          ASSERT_EQ(index.contains(static_cast<WorkerId>(worker), 0, g, keys[ki]), t0 || t1);
          ASSERT_EQ(
              index.contains(static_cast<WorkerId>(worker), 0, g, keys[ki], BlockDigest::kSize, 2U),
              t1);
        }
      }
      EXPECT_EQ(index.size(), live);
      EXPECT_EQ(index.memory().pairs, pairs);
    }
  }
}

TEST(Router, ClearWorkerDropsEverythingAndSharesSets) {
  std::mt19937_64 rng(2);
  const auto keys = random_hashes(rng, 5000);
  ResidencyIndex index(ResidencyOptions{128, 1, 64, 0});
  for (WorkerId w = 0; w < 128; ++w) {
    index.insert(w, 3, 1, keys);
  }
  const ResidencyMemory m = index.memory();
  EXPECT_EQ(m.keys, 5000U);
  EXPECT_EQ(m.pairs, 5000U * 128);
  EXPECT_EQ(m.worker_sets, 1U);  // one shared set, not 128 copies per key
  EXPECT_LT(m.bytes_per_pair_beyond_key(), 1.0);
  for (WorkerId w = 0; w < 127; ++w) {
    index.all_blocks_cleared(w);
  }
  EXPECT_EQ(index.size(), 5000U);
  EXPECT_FALSE(index.contains(5, 3, 1, keys[0]));
  EXPECT_TRUE(index.contains(127, 3, 1, keys[0]));
  index.clear_worker(127);
  EXPECT_EQ(index.size(), 0U);
  EXPECT_EQ(index.memory().pairs, 0U);
  // Dead keys come back on insert, and a later growth sweeps the rest.
  EXPECT_EQ(index.insert(9, 3, 1, {keys.data(), 10}), 10U);
  EXPECT_EQ(index.size(), 10U);
  const auto more = random_hashes(rng, 20000);
  index.insert(4, 3, 1, more);
  EXPECT_EQ(index.size(), 20010U);
  EXPECT_TRUE(index.contains(9, 3, 1, keys[3]));
  EXPECT_FALSE(index.contains(9, 3, 1, keys[30]));
}

TEST(Router, BadInputIsRefusedAndAppliesNothing) {
  ResidencyIndex index(ResidencyOptions{4, 1, 64, 0});
  std::mt19937_64 rng(3);
  auto keys = random_hashes(rng, 3);
  EXPECT_THROW(index.insert(4, 0, 0, keys), InvalidArgument);
  EXPECT_THROW(index.insert(0, 0, 0, keys, 32, 1), InvalidArgument);
  EXPECT_THROW(index.insert(0, kMaxNamespace + 1, 0, keys), InvalidArgument);
  EXPECT_THROW(index.insert(0, 0, -1, keys), InvalidArgument);
  EXPECT_THROW(index.insert(0, 0, 0, keys, 8), InvalidArgument);  // bytes past the width
  EXPECT_THROW(index.clear_worker(9), InvalidArgument);
  EXPECT_EQ(index.size(), 0U);
  EXPECT_THROW(ResidencyIndex(ResidencyOptions{0, 1, 64, 0}), InvalidArgument);
  EXPECT_THROW(ResidencyIndex(ResidencyOptions{2, 5, 64, 0}), InvalidArgument);

  Config config;
  config.hash_block_size = 16;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator c(config);
  const std::vector<std::int64_t> offsets{0, 3};
  const std::vector<std::int64_t> bad_length{-1};
  EXPECT_THROW(score_workers(c, LookupBatch{keys, offsets, bad_length, {}}, index),
               InvalidArgument);
  const std::vector<std::int64_t> ok{48};
  const RouterScores s = score_workers(c, LookupBatch{keys, offsets, ok, {}}, index);
  EXPECT_THROW(s.result(1, 0), InvalidArgument);
  EXPECT_THROW(s.result(0, 4), InvalidArgument);
  EXPECT_THROW(top_k_workers(s, 0), InvalidArgument);
  const std::vector<double> short_load{1.0};
  EXPECT_THROW(top_k_workers(s, 1, short_load), InvalidArgument);
}

TEST(Router, TopKBreaksTiesByLoadThenId) {
  RouterScores s;
  s.num_requests = 1;
  s.num_workers = 5;
  s.num_groups = 1;
  s.hit_lengths = {16, 32, 32, 0, 32};
  const std::vector<double> load{0.0, 0.5, 0.2, 0.0, 0.2};
  EXPECT_EQ(top_k_workers(s, 3, load), (std::vector<std::int32_t>{2, 4, 1}));
  EXPECT_EQ(top_k_workers(s, 2), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(top_k_workers(s, 7), (std::vector<std::int32_t>{1, 2, 4, 0, 3, -1, -1}));
}

}  // namespace
}  // namespace prefixhit

namespace prefixhit {
namespace {

EventKey event_key(std::uint8_t fill, int group, std::uint8_t width = 32) {
  EventKey k;
  for (std::size_t b = 0; b < width; ++b) {
    k.bytes[b] = static_cast<std::uint8_t>(fill + b);
  }
  k.digest_size = width;
  k.group_id = group;
  return k;
}

TEST(Router, WorkerSinksFeedTheResidencyIndex) {
  ResidencyIndex index(ResidencyOptions{3, 2, 64, 0});
  WorkerResidencySink w0(index, 0);
  WorkerResidencySink w2(index, 2, 1);
  const std::vector<EventKey> keys{event_key(1, 0), event_key(2, 1, 8), event_key(3, 0, 16)};
  w0.insert(4, keys);
  w2.insert(4, {keys.data(), 2});
  EXPECT_EQ(w0.size(), 3U);
  EXPECT_EQ(w2.size(), 2U);
  EXPECT_EQ(index.size(), 3U);
  EXPECT_TRUE(index.contains(0, 4, 1, to_index_digest(keys[1]), 8));
  EXPECT_FALSE(index.contains(0, 4, 1, to_index_digest(keys[1]), 32));  // width is in the key
  EXPECT_TRUE(index.contains(2, 4, 0, to_index_digest(keys[0]), 32, 2U));
  EXPECT_FALSE(index.contains(2, 4, 0, to_index_digest(keys[0]), 32, 1U));
  w0.erase(4, keys);
  EXPECT_EQ(w0.size(), 0U);
  EXPECT_EQ(index.size(), 2U);
  // A bad key anywhere in the call applies nothing.
  std::vector<EventKey> bad = keys;
  bad.push_back(event_key(9, kMaxGroups));
  EXPECT_THROW(w0.insert(4, bad), InvalidArgument);
  EXPECT_EQ(w0.size(), 0U);
  EXPECT_EQ(index.size(), 2U);
  EXPECT_THROW(WorkerResidencySink(index, 3), InvalidArgument);
  EXPECT_THROW(WorkerResidencySink(index, 0, 2), InvalidArgument);
}

}  // namespace
}  // namespace prefixhit
