// Property tests on fresh random inputs every run: the batch API equals one-by-one calls, the
// invariants of every lookup hold, load_mask equals a lookup against a full store, and a key
// plan answered by the store gives the lookup the store would.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/errors.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::expect_same;
using testing::random_config;
using testing::random_hashes;
using testing::random_max_length;
using testing::random_store;
using testing::seed_note;
using testing::test_seed;

/// Either a lookup result or the error kind it raised.
struct Outcome {
  std::optional<LookupResult> result;
  ErrorKind error = ErrorKind::ok;
};

Outcome lookup(const Coordinator& c, const std::vector<BlockDigest>& hashes, std::int64_t max_len,
               const ExistenceSource& store, bool apply_eagle) {
  Outcome out;
  try {
    out.result = c.find_longest_cache_hit(hashes, max_len, store, apply_eagle);
  } catch (const Error& e) {
    out.error = e.kind();
  }
  return out;
}

TEST(Properties, LookupInvariantsHold) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int lookups = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const std::int64_t a = c.lookup_alignment();
    const auto hashes = random_hashes(rng, rng() % 80);
    const auto n = static_cast<std::int64_t>(hashes.size());
    const KeySet store = random_store(rng, config, hashes);
    const std::int64_t max_len = random_max_length(rng, n, config.hash_block_size);
    const Outcome o = lookup(c, hashes, max_len, store, rng() % 4 != 0);
    if (!o.result) {
      continue;
    }
    ++lookups;
    const LookupResult& r = *o.result;
    EXPECT_GE(r.hit_length, 0);
    EXPECT_LE(r.hit_length, max_len);
    EXPECT_EQ(detail::floor_mod(r.hit_length, a), 0) << "hit not aligned to " << a;
    ASSERT_EQ(r.groups.size(), config.groups.size());
    for (std::size_t g = 0; g < config.groups.size(); ++g) {
      const GroupHit& hit = r.groups[g];
      const std::int64_t b = config.groups[g].block_size;
      EXPECT_GE(hit.num_placeholders, 0);
      EXPECT_LE(hit.num_placeholders, hit.num_blocks);
      // No list reaches past the block holding the last token below max_length.
      EXPECT_LE(hit.num_blocks, detail::ceil_div(max_len, b)) << "group " << g;
      EXPECT_EQ(r.mask(static_cast<int>(g)).size(), static_cast<std::size_t>(hit.num_blocks));
    }
    // Members of one spec group share their list.
    for (const SpecGroup& sg : c.spec_groups()) {
      for (int id : sg.group_ids) {
        EXPECT_EQ(r.groups[static_cast<std::size_t>(id)].num_blocks,
                  r.groups[static_cast<std::size_t>(sg.group_ids[0])].num_blocks);
      }
    }
    // The first spec group, when full attention, never lists blocks past the hit.
    const SpecGroup& first = c.spec_groups()[0];
    if (first.spec.kind == GroupKind::full_attention ||
        first.spec.kind == GroupKind::mla_attention) {
      EXPECT_LE(r.groups[static_cast<std::size_t>(first.group_ids[0])].num_blocks,
                detail::ceil_div(r.hit_length, first.spec.block_size));
    }
  }
  EXPECT_GT(lookups, 100) << "too few successful lookups to mean anything";
}

TEST(Properties, BatchEqualsOneByOne) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    Config config = random_config(rng);
    // Both releases: the batch and the one-by-one call share the plan's rules.
    config.semantics = trial % 2 == 0 ? Semantics::pr49069 : Semantics::vllm_0_33;
    const Coordinator c(config);
    // One store shared by every request of the batch, as in serving.
    const std::size_t requests = 1 + rng() % 48;
    std::vector<BlockDigest> digests;
    std::vector<std::int64_t> offsets{0};
    std::vector<std::int64_t> max_lengths;
    std::vector<std::uint8_t> apply_eagle;
    KeySet store;
    const auto shared_prefix = random_hashes(rng, rng() % 40);
    for (std::size_t r = 0; r < requests; ++r) {
      auto hashes = random_hashes(rng, rng() % 60);
      if (rng() % 2 == 0) {
        hashes.insert(hashes.begin(), shared_prefix.begin(), shared_prefix.end());
      }
      const KeySet part = random_store(rng, config, hashes);
      for (std::size_t g = 0; g < config.groups.size(); ++g) {
        for (const BlockDigest& d : hashes) {
          if (part.contains(static_cast<int>(g), d)) {
            store.insert(static_cast<int>(g), d);
          }
        }
      }
      digests.insert(digests.end(), hashes.begin(), hashes.end());
      offsets.push_back(static_cast<std::int64_t>(digests.size()));
      max_lengths.push_back(
          random_max_length(rng, static_cast<std::int64_t>(hashes.size()), config.hash_block_size));
      apply_eagle.push_back(rng() % 3 != 0 ? 1 : 0);
    }
    LookupBatch batch;
    batch.digests = digests;
    batch.offsets = offsets;
    batch.max_lengths = max_lengths;
    batch.apply_eagle = apply_eagle;
    // The one-by-one answers, and the first error among them.
    std::vector<Outcome> single;
    std::optional<std::size_t> first_error;
    for (std::size_t r = 0; r < requests; ++r) {
      const std::vector<BlockDigest> hashes(digests.begin() + offsets[r],
                                            digests.begin() + offsets[r + 1]);
      single.push_back(lookup(c, hashes, max_lengths[r], store, apply_eagle[r] != 0));
      if (!first_error && single.back().error != ErrorKind::ok) {
        first_error = r;
      }
    }
    for (int threads : {1, 3}) {
      BatchOptions options;
      options.num_threads = threads;
      options.min_seconds_per_worker = 0;  // workers even for these small batches
      if (first_error) {
        try {
          c.find_longest_cache_hits(batch, store, options);
          ADD_FAILURE() << "batch succeeded where request " << *first_error << " fails alone";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), single[*first_error].error);
          EXPECT_NE(std::string(e.what()).find("request " + std::to_string(*first_error)),
                    std::string::npos)
              << e.what();
        }
        continue;
      }
      const BatchLookupResult result = c.find_longest_cache_hits(batch, store, options);
      ASSERT_EQ(result.num_requests, requests);
      for (std::size_t r = 0; r < requests; ++r) {
        expect_same(result.request(r), *single[r].result, "request " + std::to_string(r));
      }
    }
  }
}

TEST(Properties, LoadMaskEqualsLookupAgainstAFullStore) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const auto hashes = random_hashes(rng, rng() % 64);
    KeySet full;
    for (std::size_t g = 0; g < config.groups.size(); ++g) {
      for (const BlockDigest& d : hashes) {
        full.insert(static_cast<int>(g), d);
      }
    }
    const std::int64_t len =
        random_max_length(rng, static_cast<std::int64_t>(hashes.size()), config.hash_block_size);
    const Outcome expected = lookup(c, hashes, len, full, false);
    Outcome actual;
    try {
      actual.result = c.load_mask(hashes, len);
    } catch (const Error& e) {
      actual.error = e.kind();
    }
    ASSERT_EQ(actual.error, expected.error);
    if (expected.result) {
      expect_same(*actual.result, *expected.result, "load_mask");
    }
  }
}

TEST(Properties, KeyPlanAnswersGiveTheStoresLookup) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    Config config = random_config(rng);
    // Both releases: under vllm-0.33 an EAGLE bound may pass max_length, which the plan covers.
    config.semantics = trial % 2 == 0 ? Semantics::pr49069 : Semantics::vllm_0_33;
    const Coordinator c(config);
    const auto hashes = random_hashes(rng, 1 + rng() % 64);
    const auto n = static_cast<std::int64_t>(hashes.size());
    const std::int64_t max_len = random_max_length(rng, n, config.hash_block_size);
    const KeyPlan plan = c.key_plan(hashes, max_len);
    ASSERT_EQ(plan.keys.size(), plan.group_ids.size());
    ASSERT_EQ(plan.keys.size(), plan.hash_indices.size());

    // (1) Any store: the plan's answers equal a lookup against the store cut to the plan.
    const KeySet store = random_store(rng, config, hashes);
    KeySet cut;
    std::vector<std::uint8_t> present(plan.size());
    for (std::size_t i = 0; i < plan.size(); ++i) {
      EXPECT_EQ(plan.keys[i], hashes[static_cast<std::size_t>(plan.hash_indices[i])]);
      present[i] = store.contains(plan.group_ids[i], plan.keys[i]) ? 1 : 0;
      if (present[i] != 0) {
        cut.insert(plan.group_ids[i], plan.keys[i]);
      }
    }
    const PlanAnswers answers(plan, present, c.num_groups());
    const bool apply_eagle = rng() % 4 != 0;
    const Outcome via_plan = lookup(c, hashes, max_len, answers, apply_eagle);
    const Outcome via_cut = lookup(c, hashes, max_len, cut, apply_eagle);
    ASSERT_EQ(via_plan.error, via_cut.error);
    if (via_cut.result) {
      expect_same(*via_plan.result, *via_cut.result, "plan vs store cut to the plan");
    }

    // (2) A store written through store_mask (no retention interval) holds nothing the plan
    // leaves out, so the plan's answers equal the full lookup.
    config.retention_interval.reset();
    const Coordinator saver(config);
    const std::int64_t saved = saver.align_lookup_length(n * config.hash_block_size);
    KeySet written;
    const auto masks = saver.store_mask(saved, 0, n * config.hash_block_size);
    for (int g = 0; g < saver.num_groups(); ++g) {
      const auto keys =
          saver.chunk_keys(hashes, config.groups[static_cast<std::size_t>(g)].block_size);
      for (std::int64_t chunk = 0; chunk < masks[static_cast<std::size_t>(g)].end_chunk; ++chunk) {
        if (masks[static_cast<std::size_t>(g)].contains(chunk)) {
          written.insert(g, keys[static_cast<std::size_t>(chunk)]);
        }
      }
    }
    const KeyPlan plan2 = saver.key_plan(hashes, max_len);
    std::vector<std::uint8_t> present2(plan2.size());
    for (std::size_t i = 0; i < plan2.size(); ++i) {
      present2[i] = written.contains(plan2.group_ids[i], plan2.keys[i]) ? 1 : 0;
    }
    const PlanAnswers answers2(plan2, present2, saver.num_groups());
    const Outcome full = lookup(saver, hashes, max_len, written, apply_eagle);
    const Outcome planned = lookup(saver, hashes, max_len, answers2, apply_eagle);
    ASSERT_EQ(full.error, planned.error);
    if (full.result) {
      expect_same(*planned.result, *full.result, "plan vs store written by store_mask");
    }
  }
}

TEST(BatchErrors, MalformedBatchesAreRejectedBeforeAnyWork) {
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 16;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator c(config);
  std::mt19937_64 rng(test_seed());
  const auto digests = random_hashes(rng, 8);
  const KeySet store;
  std::vector<std::int64_t> offsets{0, 4, 8};
  std::vector<std::int64_t> max_lengths{10, 10};
  LookupBatch batch;
  batch.digests = digests;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  EXPECT_NO_THROW(c.find_longest_cache_hits(batch, store));
  auto expect_rejected = [&](const std::string& fragment) {
    try {
      c.find_longest_cache_hits(batch, store);
      ADD_FAILURE() << "expected InvalidArgument mentioning '" << fragment << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  offsets = {0, 5, 4};
  expect_rejected("must not decrease");
  offsets = {0, 4, 7};
  expect_rejected("digests were given");
  offsets = {1, 4, 8};
  expect_rejected("offsets[0]");
  offsets = {0, 4, 8};
  max_lengths = {10, std::int64_t{1} << 41};  // past 2^40: absurd (80 only stops at the last hash)
  expect_rejected("request 1: max_length 2199023255552");
  max_lengths = {10, -1};
  expect_rejected("request 1");
  max_lengths = {10};
  batch.max_lengths = max_lengths;
  expect_rejected("max_lengths");
  std::vector<std::int64_t> none;
  batch.offsets = none;
  expect_rejected("offsets");
}

}  // namespace
}  // namespace prefixhit
