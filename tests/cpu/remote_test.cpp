// Remote mode against an in-memory store of vLLM-format keys: one round and multi-round plans
// give the answer of a lookup against the present keys of vLLM's candidate set, in batch mode
// and in the worker flow.
#include "prefixhit/remote.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"
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

/// The store: a set of key strings, and what was asked of it.
struct FakeStore {
  std::unordered_set<std::string> keys;
  int calls = 0;
  std::int64_t asked = 0;

  std::vector<std::int64_t> batch_is_exist(const std::vector<std::string>& ask) {
    ++calls;
    asked += static_cast<std::int64_t>(ask.size());
    std::vector<std::int64_t> out(ask.size());
    for (std::size_t i = 0; i < ask.size(); ++i) {
      out[i] = keys.count(ask[i]) != 0 ? 1 : 0;
    }
    return out;
  }
  BatchIsExist callable() {
    return [this](const std::vector<std::string>& k) { return batch_is_exist(k); };
  }
};

/// vLLM's candidate set for one request at `bound` (the test's own statement of the rule).
bool is_candidate(const Coordinator& c, std::int64_t n, std::int64_t bound, int g,
                  std::int64_t idx) {
  const std::int64_t h = c.config().hash_block_size;
  if (c.plan().partial) {
    return idx < std::min(n, bound / h);
  }
  const KeyPlan plan = c.key_plan(std::vector<BlockDigest>(static_cast<std::size_t>(n)), bound);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (plan.group_ids[i] == g && plan.hash_indices[i] == idx) {
      return true;
    }
  }
  return false;
}

/// A request's truth cut to the candidate set.
KeySet cut_store(const Coordinator& c, const std::vector<BlockDigest>& hashes, std::int64_t bound,
                 const KeySet& truth) {
  KeySet out;
  const auto n = static_cast<std::int64_t>(hashes.size());
  for (int g = 0; g < c.num_groups(); ++g) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (truth.contains(g, hashes[static_cast<std::size_t>(i)]) &&
          is_candidate(c, n, bound, g, i)) {
        out.insert(g, hashes[static_cast<std::size_t>(i)]);
      }
    }
  }
  return out;
}

/// Requests that share prefixes (so that deduplication has something to do).
std::vector<std::vector<BlockDigest>> random_requests(std::mt19937_64& rng, int count) {
  const auto base = random_hashes(rng, 1 + rng() % 40);
  std::vector<std::vector<BlockDigest>> out;
  for (int r = 0; r < count; ++r) {
    std::size_t keep = rng() % (base.size() + 1);
    std::vector<BlockDigest> req(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(keep));
    const auto tail = random_hashes(rng, rng() % 12);
    req.insert(req.end(), tail.begin(), tail.end());
    out.push_back(std::move(req));
  }
  return out;
}

struct World {
  Config config;
  std::optional<Coordinator> coord;
  StoreLayout layout;
  std::vector<std::vector<BlockDigest>> requests;
  KeySet truth;  // (group, digest) present in every namespace
  FakeStore store;
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
};

World make_world(std::mt19937_64& rng) {
  World w;
  w.config = random_config(rng);
  w.coord.emplace(w.config);
  const int tp = 1 << (rng() % 3);
  const ParallelLayout parallel{tp, 1 + static_cast<int>(rng() % 2), 1,
                                1 + static_cast<int>(rng() % 2), 1 + static_cast<int>(rng() % 4)};
  w.layout = StoreLayout::for_parallel(w.config, {rng() % 2 ? "tenant" : "", "model"}, parallel);
  w.requests = random_requests(rng, 1 + static_cast<int>(rng() % 6));
  for (const auto& req : w.requests) {
    const KeySet part = random_store(rng, w.config, req);
    for (int g = 0; g < w.coord->num_groups() + 4; ++g) {
      for (const BlockDigest& d : req) {
        if (!part.contains(g, d) || g >= w.coord->num_groups()) {
          continue;
        }
        const auto& spaces = w.layout.namespaces[static_cast<std::size_t>(g)];
        // Now and then a key misses one namespace: then it is absent (all-namespaces rule).
        const bool partial = spaces.size() > 1 && rng() % 8 == 0;
        if (!partial) {
          w.truth.insert(g, d);
        }
        for (std::size_t k = partial ? 1 : 0; k < spaces.size(); ++k) {
          w.store.keys.insert(store_key(w.layout.format, spaces[k], g, d));
        }
      }
    }
    w.digests.insert(w.digests.end(), req.begin(), req.end());
    w.offsets.push_back(static_cast<std::int64_t>(w.digests.size()));
  }
  return w;
}

TEST(Remote, BatchModeEqualsTheLookupOnTheCandidateSet) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    World w = make_world(rng);
    const Coordinator& c = *w.coord;
    std::vector<std::int64_t> max_lengths;
    std::vector<std::uint8_t> eagle;
    for (const auto& req : w.requests) {
      max_lengths.push_back(
          random_max_length(rng, static_cast<std::int64_t>(req.size()), w.config.hash_block_size));
      eagle.push_back(rng() % 4 != 0 ? 1 : 0);
    }
    const LookupBatch batch{w.digests, w.offsets, max_lengths, eagle};
    std::vector<std::optional<LookupResult>> expected;
    bool fails = false;
    for (std::size_t r = 0; r < w.requests.size(); ++r) {
      try {
        const KeySet cut = cut_store(c, w.requests[r], max_lengths[r], w.truth);
        expected.emplace_back(
            c.find_longest_cache_hit(w.requests[r], max_lengths[r], cut, eagle[r] != 0));
      } catch (const Error&) {
        fails = true;
      }
    }
    for (RemotePlan plan : {RemotePlan::one_round, RemotePlan::multi_round}) {
      w.store.calls = 0;
      w.store.asked = 0;
      RemoteStats stats;
      const RemoteOptions options{plan, 2 + static_cast<int>(rng() % 5)};
      if (fails) {
        EXPECT_THROW(remote_lookup(c, w.layout, batch, w.store.callable(), options), Error);
        continue;
      }
      const BatchLookupResult got =
          remote_lookup(c, w.layout, batch, w.store.callable(), options, &stats);
      for (std::size_t r = 0; r < w.requests.size(); ++r) {
        expect_same(got.request(r), *expected[r],
                    std::string(plan == RemotePlan::one_round ? "one" : "multi") + " request " +
                        std::to_string(r));
      }
      EXPECT_EQ(stats.keys_asked, w.store.asked);
      EXPECT_EQ(stats.rounds, w.store.calls);
      if (plan == RemotePlan::one_round) {
        EXPECT_LE(stats.rounds, 1);
      } else {
        EXPECT_LE(stats.rounds, options.max_rounds);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

/// vLLM's worker flow, one request at a time, against the truth cut to the candidate set.
std::int64_t reference_worker(const Coordinator& c, const std::vector<BlockDigest>& hashes,
                              std::int64_t num_tokens, const KeySet& truth) {
  const std::int64_t token_len = c.align_lookup_length(num_tokens);
  if (hashes.empty() || token_len <= 0) {
    return 0;
  }
  const KeySet cut = cut_store(c, hashes, token_len, truth);
  std::int64_t hit = c.find_longest_cache_hit(hashes, token_len, cut).hit_length;
  if (hit >= num_tokens) {
    const std::int64_t usable = c.align_lookup_length(num_tokens - 1);
    hit = usable <= 0 ? 0 : c.find_longest_cache_hit(hashes, usable, cut).hit_length;
  }
  return hit;
}

TEST(Remote, WorkerFlowEqualsVllmsPerRequestFlow) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    World w = make_world(rng);
    const Coordinator& c = *w.coord;
    const std::int64_t h = w.config.hash_block_size;
    std::vector<std::int64_t> num_tokens;
    for (const auto& req : w.requests) {
      const auto n = static_cast<std::int64_t>(req.size());
      num_tokens.push_back(rng() % 3 == 0 ? n * h
                                          : static_cast<std::int64_t>(rng() % ((n + 1) * h)));
    }
    std::vector<std::int64_t> expected;
    bool fails = false;
    for (std::size_t r = 0; r < w.requests.size(); ++r) {
      try {
        expected.push_back(reference_worker(c, w.requests[r], num_tokens[r], w.truth));
      } catch (const Error&) {
        fails = true;
      }
    }
    std::int64_t one_round_keys = 0;
    for (RemotePlan plan : {RemotePlan::one_round, RemotePlan::multi_round}) {
      RemoteStats stats;
      const RemoteOptions options{plan, 2 + static_cast<int>(rng() % 5)};
      if (fails) {
        EXPECT_THROW(worker_lookup(c, w.layout, w.digests, w.offsets, num_tokens,
                                   w.store.callable(), options),
                     Error);
        continue;
      }
      const auto got = worker_lookup(c, w.layout, w.digests, w.offsets, num_tokens,
                                     w.store.callable(), options, &stats);
      EXPECT_EQ(got, expected) << (plan == RemotePlan::one_round ? "one round" : "multi round");
      if (plan == RemotePlan::one_round) {
        one_round_keys = stats.keys_asked;
      } else {
        EXPECT_LE(stats.keys_asked, one_round_keys);  // a subset of the candidates
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(Remote, AnswersReachTheGpuEngine) {
  if (!gpu::device_available()) {
    GTEST_SKIP() << "no GPU engine: " << gpu::describe_device();
  }
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    World w = make_world(rng);
    std::vector<std::int64_t> max_lengths;
    for (const auto& req : w.requests) {
      max_lengths.push_back(
          random_max_length(rng, static_cast<std::int64_t>(req.size()), w.config.hash_block_size));
    }
    const gpu::BatchLookupEngine engine(*w.coord);
    for (RemotePlan plan : {RemotePlan::one_round, RemotePlan::multi_round}) {
      RemoteLookup lookup = RemoteLookup::batch(
          *w.coord, w.layout, LookupBatch{w.digests, w.offsets, max_lengths, {}}, {plan});
      while (!lookup.done()) {
        lookup.answer(w.store.batch_is_exist(lookup.pending_keys()));
      }
      std::optional<BatchLookupResult> cpu;
      try {
        cpu = lookup.result();
      } catch (const Error& e) {
        EXPECT_THROW(lookup.result(engine), Error) << e.what();
        continue;
      }
      const BatchLookupResult on_gpu = lookup.result(engine);
      EXPECT_EQ(on_gpu.hit_lengths, cpu->hit_lengths);
      EXPECT_EQ(on_gpu.num_blocks, cpu->num_blocks);
      EXPECT_EQ(on_gpu.num_placeholders, cpu->num_placeholders);
    }
  }
}

TEST(Remote, OneRoundAsksVllmsKeysOnceAcrossTheBatch) {
  // FA(16) + SWA(16, w16), H=16, S=64: the window group keeps 1 chunk of every 4.
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 64;
  config.groups = {GroupSpec::full_attention(16), GroupSpec::sliding_window_attention(16, 16)};
  const Coordinator c(config);
  const StoreLayout layout =
      StoreLayout::for_parallel(config, {"", "m"}, ParallelLayout{2, 1, 1, 1, 2});
  std::mt19937_64 rng(7);
  const auto hashes = random_hashes(rng, 16);
  // Two identical requests: the second adds no key.
  std::vector<BlockDigest> digests(hashes);
  digests.insert(digests.end(), hashes.begin(), hashes.end());
  const std::vector<std::int64_t> offsets{0, 16, 32};
  const std::vector<std::int64_t> max_lengths{256, 256};
  RemoteLookup lookup =
      RemoteLookup::batch(c, layout, LookupBatch{digests, offsets, max_lengths, {}});
  // FA: 16 chunks, window: 4 chunks, each in 2 TP namespaces.
  ASSERT_EQ(lookup.pending_keys().size(), (16U + 4U) * 2U);
  EXPECT_EQ(lookup.pending_keys()[0], store_key({"", "m"}, {0, 0, 0, 0}, 0, hashes[0]));
  EXPECT_EQ(lookup.pending_keys()[1], store_key({"", "m"}, {1, 0, 0, 0}, 0, hashes[0]));
  EXPECT_THROW(lookup.answer(std::vector<std::int64_t>(3, 1)), InvalidArgument);
  EXPECT_THROW(lookup.result(), InvalidArgument);
  lookup.answer(std::vector<std::int64_t>(lookup.pending_keys().size(), 1));
  ASSERT_TRUE(lookup.done());
  const BatchLookupResult all = lookup.result();
  EXPECT_EQ(all.hit_lengths, (std::vector<std::int64_t>{256, 256}));
  const auto table = lookup.presence_table();
  ASSERT_EQ(table.size(), 2U * 32U);
  EXPECT_EQ(table[0], 1);       // request 0, group 0, hash 0
  EXPECT_EQ(table[16 + 3], 1);  // request 0, group 1, chunk 3 (kept)
  EXPECT_EQ(table[16 + 2], 0);  // masked out: never asked
  EXPECT_THROW(lookup.answer(std::vector<std::int64_t>{}), InvalidArgument);
  EXPECT_THROW(lookup.hit_lengths(), InvalidArgument);
}

TEST(Remote, MultiRoundAsksFewerKeysOnALongHit) {
  // The dsv4-flash shape, 8192 tokens, everything stored.
  Config config;
  config.hash_block_size = 4;
  config.scheduler_block_size = 256;
  config.use_eagle = true;
  config.groups = {GroupSpec::full_attention(256), GroupSpec::sliding_window_attention(64, 128),
                   GroupSpec::sliding_window_attention(64, 128, true),
                   GroupSpec::sliding_window_attention(4, 8),
                   GroupSpec::sliding_window_attention(8, 128)};
  config.groups[2].head_size = 1;  // keep the EAGLE window group its own spec group
  const Coordinator c(config);
  const StoreLayout layout = StoreLayout::for_parallel(config, {"", "DeepSeek-V4-Flash"});
  std::mt19937_64 rng(11);
  const auto hashes = random_hashes(rng, 2048);
  FakeStore store;
  for (int g = 0; g < c.num_groups(); ++g) {
    for (const BlockDigest& d :
         c.chunk_keys(hashes, config.groups[static_cast<std::size_t>(g)].block_size)) {
      store.keys.insert(store_key(layout.format, {}, g, d));
    }
  }
  const std::vector<std::int64_t> offsets{0, 2048};
  const std::vector<std::int64_t> num_tokens{8192 + 3};
  RemoteStats one;
  RemoteStats multi;
  const auto a = worker_lookup(c, layout, hashes, offsets, num_tokens, store.callable(),
                               {RemotePlan::one_round}, &one);
  const auto b = worker_lookup(c, layout, hashes, offsets, num_tokens, store.callable(),
                               {RemotePlan::multi_round}, &multi);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], 8192 - 256);  // EAGLE drops a block... and the whole prompt hit is recomputed
  EXPECT_EQ(one.rounds, 1);
  // Full attention's 32 keys, then the windows' few chunks below the hit (65 against 767).
  EXPECT_EQ(multi.rounds, 2);
  EXPECT_LT(multi.keys_asked * 5, one.keys_asked);
}

TEST(Remote, BadInputsAreInvalidArgument) {
  Config config;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator c(config);
  StoreLayout layout = StoreLayout::for_parallel(config, {"", "m"});
  const std::vector<BlockDigest> hashes(4);
  const std::vector<std::int64_t> offsets{0, 4};
  EXPECT_THROW(RemoteLookup::worker(c, layout, hashes, offsets, std::vector<std::int64_t>{-1}),
               InvalidArgument);
  EXPECT_THROW(RemoteLookup::worker(c, layout, hashes, offsets, std::vector<std::int64_t>{200}),
               InvalidArgument);
  EXPECT_THROW(RemoteLookup::worker(c, layout, hashes, offsets, std::vector<std::int64_t>{1, 2}),
               InvalidArgument);
  EXPECT_THROW(RemoteLookup::worker(c, layout, hashes, offsets, std::vector<std::int64_t>{64},
                                    {RemotePlan::multi_round, 1}),
               InvalidArgument);
  StoreLayout empty_model = layout;
  empty_model.format.model_name.clear();
  EXPECT_THROW(RemoteLookup::worker(c, empty_model, hashes, offsets, std::vector<std::int64_t>{64}),
               InvalidArgument);
  StoreLayout wrong_groups = layout;
  wrong_groups.namespaces.emplace_back();
  EXPECT_THROW(
      RemoteLookup::worker(c, wrong_groups, hashes, offsets, std::vector<std::int64_t>{64}),
      InvalidArgument);
  // Past the hashes, full attention stops at the last hash (the reference's rule); an absurd
  // length is still an error.
  const std::vector<std::int64_t> too_long{std::int64_t{1} << 41};
  EXPECT_THROW(RemoteLookup::batch(c, layout, LookupBatch{hashes, offsets, too_long, {}}),
               InvalidArgument);
  // No hashes, or nothing to align: no keys, done at once, hit 0.
  const std::vector<std::int64_t> none{0, 0};
  RemoteLookup empty = RemoteLookup::worker(c, layout, span<const BlockDigest>(), none,
                                            std::vector<std::int64_t>{100});
  EXPECT_TRUE(empty.done());
  EXPECT_EQ(empty.hit_lengths(), std::vector<std::int64_t>{0});
}

}  // namespace
}  // namespace prefixhit
