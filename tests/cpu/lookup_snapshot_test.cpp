// A lookup sees one state of its store (ExistenceSource::run_lookup): a writer that inserts and
// erases a prompt's keys as a whole never makes a concurrent lookup report part of the prompt,
// on the resident index (window by window and planned) and on a KeySet. And the engine runs
// every lookup, single or batched, through run_lookup, probing only the source it is handed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/probes.hpp"
#include "planned_path.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::PlannedPathForAllTables;
using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

constexpr std::int64_t kBlock = 16;
// Enough blocks for many probe windows (64 keys each) per lookup.
constexpr std::size_t kBlocks = 600;

Config full_attention_config() {
  Config c;
  c.hash_block_size = kBlock;
  c.scheduler_block_size = kBlock;
  c.groups = {GroupSpec::full_attention(kBlock)};
  return c;
}

/// Full attention and a sliding window.
Config hybrid_config() {
  Config c = full_attention_config();
  c.groups.push_back(GroupSpec::sliding_window_attention(kBlock, 4 * kBlock));
  return c;
}

/// The hit lengths a lookup of the prompt can return while a writer moves the store between
/// two states, each in one atomic call: the answer of state A, that of state B, and any other.
struct Seen {
  std::int64_t a = 0;
  std::int64_t b = 0;
  long seen_a = 0;
  long seen_b = 0;
  std::vector<std::int64_t> other;  // hit lengths neither state gives (at most 8 kept)
};

std::string describe(const Seen& seen) {
  std::string s = std::to_string(seen.seen_a) + " lookups gave state A's " +
                  std::to_string(seen.a) + ", " + std::to_string(seen.seen_b) + " state B's " +
                  std::to_string(seen.b) + "; others:";
  for (const std::int64_t hit : seen.other) {
    s += " " + std::to_string(hit);
  }
  return s;
}

std::int64_t full_length(const std::vector<BlockDigest>& hashes) {
  return static_cast<std::int64_t>(hashes.size()) * kBlock;
}

/// Looks the prompt up against `store` while `flip` runs on another thread, for about `seconds`
/// (and at least a few hundred lookups), and sorts the hit lengths seen.
template <class Flip>
void lookups_during(const Coordinator& coordinator, const std::vector<BlockDigest>& hashes,
                    const ExistenceSource& store, const Flip& flip, double seconds, Seen& seen) {
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      flip();
    }
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (long i = 0; i < 200 || std::chrono::steady_clock::now() < until; ++i) {
    const std::int64_t hit =
        coordinator.find_longest_cache_hit(hashes, full_length(hashes), store, false).hit_length;
    if (hit == seen.a) {
      ++seen.seen_a;
    } else if (hit == seen.b) {
      ++seen.seen_b;
    } else if (seen.other.size() < 8) {
      seen.other.push_back(hit);
    }
  }
  stop = true;
  writer.join();
}

/// (group, key) pairs of the hybrid configuration's two groups for blocks [from, to).
struct Keys {
  std::vector<std::int32_t> groups;
  std::vector<BlockDigest> keys;
  void add(int group, const std::vector<BlockDigest>& hashes, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) {
      groups.push_back(group);
      keys.push_back(hashes[i]);
    }
  }
};

std::int64_t hit_of(const Coordinator& coordinator, const std::vector<BlockDigest>& hashes,
                    const Keys& present) {
  BlockIndex index;
  index.insert(0, present.groups, present.keys);
  return coordinator.find_longest_cache_hit(hashes, full_length(hashes), index.view(0), false)
      .hit_length;
}

/// State A holds every key of the prompt; state B lacks the full-attention keys from a random
/// block h on and the window keys from a few blocks before h. A planned lookup of B finds the
/// hole in its first pass and probes the window keys before h in a second; had that pass seen
/// state A, it would report h, which neither state gives.
void expect_one_state_per_index_lookup(bool planned) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::optional<PlannedPathForAllTables> planned_everywhere;
  if (planned) {
    planned_everywhere.emplace();
  }
  const Coordinator coordinator(hybrid_config());
  const auto hashes = random_hashes(rng, kBlocks);
  const std::size_t h = kBlocks / 4 + rng() % (kBlocks / 2);
  Keys state_b;  // what B holds
  state_b.add(0, hashes, 0, h);
  state_b.add(1, hashes, 0, h - 6);
  Keys missing;  // what A holds and B lacks
  missing.add(0, hashes, h, kBlocks);
  missing.add(1, hashes, h - 6, kBlocks);
  Keys state_a = state_b;
  state_a.groups.insert(state_a.groups.end(), missing.groups.begin(), missing.groups.end());
  state_a.keys.insert(state_a.keys.end(), missing.keys.begin(), missing.keys.end());

  Seen seen;
  seen.a = hit_of(coordinator, hashes, state_a);
  seen.b = hit_of(coordinator, hashes, state_b);
  ASSERT_EQ(seen.a, full_length(hashes));
  ASSERT_LT(seen.b, static_cast<std::int64_t>(h) * kBlock);

  BlockIndexOptions options;
  options.initial_capacity = 4 * state_a.keys.size();  // no rehash: the flips are the only writes
  BlockIndex index(options);
  index.insert(0, state_b.groups, state_b.keys);
  lookups_during(
      coordinator, hashes, index.view(0),
      [&] {
        index.insert(0, missing.groups, missing.keys);
        index.erase(0, missing.groups, missing.keys);
      },
      0.3, seen);
  EXPECT_TRUE(seen.other.empty()) << describe(seen);
  EXPECT_GT(seen.seen_a + seen.seen_b, 0) << describe(seen);
}

TEST(LookupSnapshot, AnIndexLookupWindowByWindowSeesOneStateOfTheIndex) {
  expect_one_state_per_index_lookup(false);
}

TEST(LookupSnapshot, APlannedIndexLookupSeesOneStateOfTheIndex) {
  expect_one_state_per_index_lookup(true);
}

TEST(LookupSnapshot, AKeySetLookupSeesOneStateOfTheSet) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator coordinator(full_attention_config());
  const auto hashes = random_hashes(rng, kBlocks);
  KeySet set;
  // Keys go in last block first, so every state of the set holds a suffix of the prompt: a
  // lookup of one state hits all of it or nothing.
  Seen seen;
  seen.a = full_length(hashes);
  seen.b = 0;
  lookups_during(
      coordinator, hashes, set,
      [&] {
        for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) {
          set.insert(0, *it);
        }
        set.clear();
      },
      0.3, seen);
  EXPECT_TRUE(seen.other.empty()) << describe(seen);
}

/// A KeySet behind run_lookup calls that it counts; its own probes count too, and a lookup
/// must not use them: it probes the twin it is handed.
class CountingSource final : public ExistenceSource {
 public:
  explicit CountingSource(const KeySet& keys) : keys_(keys) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override {
    ++outer_probes;
    return keys_.probe(group_id, hashes, first, step, count);
  }
  void run_lookup(const LookupBody& lookup) const override {
    ++lookups;
    lookup(keys_);
  }
  mutable std::atomic<long> lookups{0};
  mutable std::atomic<long> outer_probes{0};

 private:
  const KeySet& keys_;
};

TEST(LookupSnapshot, EveryLookupRunsInsideOneRunLookupAndProbesTheSourceItIsHanded) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Coordinator coordinator(full_attention_config());
  const auto hashes = random_hashes(rng, 200);
  KeySet set;
  const std::size_t present = 1 + rng() % 150;
  for (std::size_t i = 0; i < present; ++i) {
    set.insert(0, hashes[i]);
  }
  const CountingSource source(set);
  const std::int64_t full = full_length(hashes);
  EXPECT_EQ(coordinator.find_longest_cache_hit(hashes, full, source, false).hit_length,
            static_cast<std::int64_t>(present) * kBlock);
  EXPECT_EQ(source.lookups.load(), 1);
  EXPECT_EQ(source.outer_probes.load(), 0);

  // A batch: each chunk of requests is one run_lookup, on one thread or several.
  constexpr std::size_t kRequests = 40;
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> max_lengths;
  for (std::size_t r = 0; r < kRequests; ++r) {
    digests.insert(digests.end(), hashes.begin(), hashes.end());
    offsets.push_back(static_cast<std::int64_t>(digests.size()));
    max_lengths.push_back(full);
  }
  for (const int threads : {1, 2}) {
    source.lookups = 0;
    LookupBatch batch;
    batch.digests = digests;
    batch.offsets = offsets;
    batch.max_lengths = max_lengths;
    BatchOptions options;
    options.num_threads = threads;
    options.min_seconds_per_worker = 0;
    const BatchLookupResult result = coordinator.find_longest_cache_hits(batch, source, options);
    for (std::size_t r = 0; r < kRequests; ++r) {
      ASSERT_EQ(result.hit_lengths[r], static_cast<std::int64_t>(present) * kBlock) << r;
    }
    EXPECT_GE(source.lookups.load(), 1) << threads << " threads";
    EXPECT_LE(source.lookups.load(), static_cast<long>(kRequests)) << threads << " threads";
    EXPECT_EQ(source.outer_probes.load(), 0) << threads << " threads";
  }
}

/// A source that breaks run_lookup's contract: it returns without running the lookup.
class SkippingSource final : public ExistenceSource {
 public:
  std::uint64_t probe(int /*group_id*/, const BlockDigest* /*hashes*/, std::int64_t /*first*/,
                      std::int64_t /*step*/, int count) const override {
    return detail::low_bits(count);
  }
  void run_lookup(const LookupBody& /*lookup*/) const override {}
};

TEST(LookupSnapshot, ARunLookupThatSkipsTheLookupIsAnErrorNotAMiss) {
  std::mt19937_64 rng(test_seed());
  const Coordinator coordinator(full_attention_config());
  const auto hashes = random_hashes(rng, 8);
  const SkippingSource source;
  EXPECT_THROW(coordinator.find_longest_cache_hit(hashes, full_length(hashes), source, false),
               InvalidArgument);
  const std::vector<std::int64_t> offsets{0, 8};
  const std::vector<std::int64_t> max_lengths{full_length(hashes)};
  LookupBatch batch;
  batch.digests = hashes;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  EXPECT_THROW(coordinator.find_longest_cache_hits(batch, source), InvalidArgument);
}

}  // namespace
}  // namespace prefixhit
