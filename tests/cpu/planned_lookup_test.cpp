// Plan-first lookups (issue 14): probe_many answers exactly what probe() answers window by
// window, and a lookup that fetches its probe set up front (record, probe_many, replay) returns
// exactly what the one-window-at-a-time finders return, single and batched, on fresh random
// configurations and stores with holes every run.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "host/probes.hpp"
#include "host/vectors/conformance.hpp"
#include "planned_path.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/errors.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::PlannedPathForAllTables;
using testing::random_config;
using testing::random_digest;
using testing::random_hashes;
using testing::random_max_length;
using testing::random_store;
using testing::seed_note;
using testing::test_seed;

void copy_store(const KeySet& store, const Config& config, const std::vector<BlockDigest>& hashes,
                BlockIndex& index, Namespace ns) {
  for (std::size_t g = 0; g < config.groups.size(); ++g) {
    std::vector<BlockDigest> keys;
    for (const BlockDigest& d : hashes) {
      if (store.contains(static_cast<int>(g), d)) {
        keys.push_back(d);
      }
    }
    index.insert(ns, static_cast<int>(g), keys);
  }
}

TEST(PlannedLookup, ProbeManyEqualsProbeWindowByWindow) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    // A small table, so that full buckets and long probe sequences occur.
    BlockIndexOptions options;
    options.initial_capacity = 64;
    options.max_load_factor = 0.95;
    BlockIndex index(options);
    KeySet set;
    const auto hashes = random_hashes(rng, 200 + rng() % 400);
    const auto ns = static_cast<Namespace>(rng() % 100);
    for (const BlockDigest& d : hashes) {
      if (rng() % 3 != 0) {
        const int g = static_cast<int>(rng() % 4);
        index.insert(ns, g, span<const BlockDigest>(&d, 1));
        set.insert(g, d);
      }
      if (rng() % 4 == 0) {  // the same digest in another namespace must not answer
        index.insert(ns + 1, static_cast<int>(rng() % 4), span<const BlockDigest>(&d, 1));
      }
    }
    const auto n = static_cast<std::int64_t>(hashes.size());
    std::vector<ProbeWindow> windows;
    for (int w = 0; w < 50; ++w) {
      ProbeWindow win{};
      win.hashes = hashes.data();
      // Mostly valid group ids, some outside [0, kMaxGroups) or merely unused.
      win.group_id = static_cast<int>(rng() % 8) - (rng() % 10 == 0 ? 40 : 0);
      if (rng() % 20 == 0) {
        win.group_id = kMaxGroups;
      }
      win.count = 1 + static_cast<int>(rng() % 64);
      win.step = (rng() % 2 == 0 ? 1 : -1) * static_cast<std::int64_t>(1 + rng() % 3);
      const std::int64_t span_len = (win.count - 1) * (win.step < 0 ? -win.step : win.step);
      if (span_len >= n) {
        win.count = 1;
      }
      const std::int64_t reach = win.count == 1 ? 0 : span_len;
      const std::int64_t lo = win.step < 0 ? reach : 0;
      win.first = lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n - reach));
      windows.push_back(win);
    }
    const BlockIndex::View view = index.view(ns);
    std::vector<std::uint64_t> many(windows.size(), 0xDEADBEEF);
    view.probe_many(windows.data(), windows.size(), many.data());
    std::vector<std::uint64_t> from_set(windows.size(), 0xDEADBEEF);
    set.probe_many(windows.data(), windows.size(), from_set.data());  // the default
    for (std::size_t w = 0; w < windows.size(); ++w) {
      const ProbeWindow& win = windows[w];
      const std::uint64_t one =
          view.probe(win.group_id, win.hashes, win.first, win.step, win.count);
      ASSERT_EQ(many[w], one) << "trial " << trial << " window " << w;
      ASSERT_EQ(from_set[w], one) << "trial " << trial << " window " << w;
    }
  }
}

// lookup_stream runs its stages a chunk of keys at a time (16 keys, then the last partial
// chunk): every stream length from 0 to past five chunks, and longer random ones, must answer
// each key, present or absent, exactly once and in its own window's bit.
TEST(PlannedLookup, ProbeManyAnswersEveryStreamLengthAroundItsChunks) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  BlockIndex index;
  const auto hashes = random_hashes(rng, 700);
  for (const BlockDigest& d : hashes) {
    if (rng() % 4 != 0) {
      index.insert(0, 0, span<const BlockDigest>(&d, 1));
    }
  }
  const BlockIndex::View view = index.view(0);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 90; ++n) {
    lengths.push_back(n);
  }
  for (int extra = 0; extra < 10; ++extra) {
    lengths.push_back(91 + rng() % 600);
  }
  for (const std::size_t n : lengths) {
    // Windows of 1-64 keys at random places whose counts add up to exactly n keys.
    std::vector<ProbeWindow> windows;
    for (std::size_t left = n; left > 0;) {
      ProbeWindow win{};
      win.hashes = hashes.data();
      win.group_id = 0;
      win.step = 1;
      win.count = static_cast<int>(std::min<std::size_t>(left, 1 + rng() % 64));
      win.first = static_cast<std::int64_t>(rng() % (hashes.size() - 64));
      left -= static_cast<std::size_t>(win.count);
      windows.push_back(win);
    }
    std::vector<std::uint64_t> many(windows.size(), 0xDEADBEEF);
    view.probe_many(windows.data(), windows.size(), many.data());
    for (std::size_t w = 0; w < windows.size(); ++w) {
      const ProbeWindow& win = windows[w];
      ASSERT_EQ(many[w], view.probe(0, win.hashes, win.first, win.step, win.count))
          << n << " keys, window " << w;
    }
    // And BlockIndex::contains, which streams its keys through the same pipeline.
    std::vector<BlockDigest> keys(n);
    for (BlockDigest& key : keys) {
      key = hashes[rng() % hashes.size()];
    }
    std::vector<std::uint8_t> found(n, 7);
    index.contains(0, 0, keys, found.data());
    for (std::size_t k = 0; k < n; ++k) {
      ASSERT_EQ(found[k], view.probe(0, &keys[k], 0, 1, 1)) << n << " keys, key " << k;
    }
  }
}

// A key whose home bucket is full with no candidate continues its sequence, and lookup_stream
// prefetches its second bucket from the match stage: at load 0.95 many keys lie in their second
// bucket or further, and every present key must still be found, every absent one not.
TEST(PlannedLookup, ProbeManyFindsKeysPastAFullHomeBucket) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 12 * 64;
  options.max_capacity = 12 * 64;
  options.max_load_factor = 0.95;
  options.seed = seed | 1U;
  BlockIndex index(options);
  const auto hashes = random_hashes(rng, 1400);
  std::vector<std::uint64_t> present(hashes.size(), 0);
  // Fill to the load limit, so that many home buckets are full.
  const std::uint64_t limit = detail::load_limit(options.max_capacity, options.max_load_factor);
  for (std::size_t i = 0; i < hashes.size() && index.size() < limit; ++i) {
    if (rng() % 2 == 0) {
      index.insert(0, 0, span<const BlockDigest>(&hashes[i], 1));
      present[i] = 1;
    }
  }
  const BlockIndex::Layout layout = index.layout();
  ASSERT_GT(layout.in_second_bucket, 0U);
  ASSERT_LT(layout.in_home_bucket + layout.in_second_bucket, layout.keys) << "none further on";
  std::vector<ProbeWindow> windows;
  for (std::size_t first = 0; first < hashes.size(); first += 64) {
    ProbeWindow win{};
    win.hashes = hashes.data();
    win.group_id = 0;
    win.step = 1;
    win.first = static_cast<std::int64_t>(first);
    win.count = static_cast<int>(std::min<std::size_t>(64, hashes.size() - first));
    windows.push_back(win);
  }
  std::vector<std::uint64_t> many(windows.size(), 0);
  index.view(0).probe_many(windows.data(), windows.size(), many.data());
  for (std::size_t w = 0; w < windows.size(); ++w) {
    for (int k = 0; k < windows[w].count; ++k) {
      ASSERT_EQ((many[w] >> k) & 1U, present[static_cast<std::size_t>(windows[w].first) + k])
          << "window " << w << " key " << k;
    }
  }
}

/// The one-window-at-a-time lookup: the shared finders over SourceProbe, as before issue 14.
LookupResult direct_lookup(const Coordinator& c, const std::vector<BlockDigest>& hashes,
                           std::int64_t max_len, const ExistenceSource& store, bool apply_eagle,
                           ErrorKind& err) {
  const detail::LookupPlan& plan = c.plan();
  const detail::SourceProbe probe{&plan, &store, hashes.data()};
  GroupHit spec_hits[kMaxGroups];
  LookupResult result;
  err = detail::find_longest_cache_hit(plan, static_cast<std::int64_t>(hashes.size()), max_len,
                                       apply_eagle, probe, spec_hits, result.hit_length);
  for (int g = 0; g < plan.num_groups; ++g) {
    result.groups.push_back(spec_hits[plan.spec_group_of[g]]);
  }
  return result;
}

void expect_same(const LookupResult& actual, const LookupResult& expected, int trial) {
  ASSERT_EQ(actual.hit_length, expected.hit_length) << "trial " << trial;
  ASSERT_EQ(actual.groups.size(), expected.groups.size()) << "trial " << trial;
  for (std::size_t g = 0; g < expected.groups.size(); ++g) {
    ASSERT_EQ(actual.groups[g].num_blocks, expected.groups[g].num_blocks)
        << "trial " << trial << " group " << g;
    ASSERT_EQ(actual.groups[g].num_placeholders, expected.groups[g].num_placeholders)
        << "trial " << trial << " group " << g;
  }
}

TEST(PlannedLookup, OnlyALargeResidentIndexAsksForTheWholeProbeSet) {
  BlockIndex small;
  const KeySet set;
  EXPECT_FALSE(small.view(0).prefers_probe_many());  // answers from cache: window by window
  EXPECT_FALSE(set.prefers_probe_many());  // callbacks and remote stores keep per-window probes
  BlockIndexOptions options;
  options.initial_capacity = static_cast<std::size_t>(detail::kPlannedLookupMinBytes / 37 + 64);
  const BlockIndex large(options);
  EXPECT_TRUE(large.view(0).prefers_probe_many());
  {
    const PlannedPathForAllTables planned_everywhere;
    EXPECT_TRUE(small.view(0).prefers_probe_many());
  }
  EXPECT_FALSE(small.view(0).prefers_probe_many());
}

TEST(PlannedLookup, SingleAndBatchEqualTheDirectFinders) {
  const PlannedPathForAllTables planned_everywhere;
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const int requests = 1 + static_cast<int>(rng() % 20);
    BlockIndex index;
    const auto ns = static_cast<Namespace>(rng() % 1000);
    std::vector<std::vector<BlockDigest>> prompts;
    std::vector<KeySet> stores;
    std::vector<std::int64_t> offsets{0};
    std::vector<std::int64_t> max_lengths;
    std::vector<std::uint8_t> eagle;
    std::vector<BlockDigest> all;
    for (int r = 0; r < requests; ++r) {
      prompts.push_back(random_hashes(rng, rng() % 300));
      stores.push_back(random_store(rng, config, prompts.back()));
      copy_store(stores.back(), config, prompts.back(), index, ns);
      max_lengths.push_back(random_max_length(rng, static_cast<std::int64_t>(prompts[r].size()),
                                              config.hash_block_size));
      eagle.push_back(rng() % 3 != 0 ? 1 : 0);
      all.insert(all.end(), prompts[r].begin(), prompts[r].end());
      offsets.push_back(static_cast<std::int64_t>(all.size()));
    }
    // An unrelated key now and then: a store holding more than the prompts' keys.
    for (int k = 0; k < 50; ++k) {
      const BlockDigest d = random_digest(rng);
      index.insert(ns, static_cast<int>(rng() % config.groups.size()),
                   span<const BlockDigest>(&d, 1));
    }
    const BlockIndex::View view = index.view(ns);
    std::vector<LookupResult> expected(static_cast<std::size_t>(requests));
    bool any_error = false;
    for (int r = 0; r < requests; ++r) {
      ErrorKind err = ErrorKind::ok;
      expected[r] = direct_lookup(c, prompts[r], max_lengths[r], view, eagle[r] != 0, err);
      if (err != ErrorKind::ok) {
        any_error = true;
        EXPECT_THROW(
            (void)c.find_longest_cache_hit(prompts[r], max_lengths[r], view, eagle[r] != 0), Error);
        continue;
      }
      expect_same(c.find_longest_cache_hit(prompts[r], max_lengths[r], view, eagle[r] != 0),
                  expected[r], trial);
      ++compared;
    }
    if (any_error) {
      continue;  // a batch with a failing request throws (tested elsewhere)
    }
    LookupBatch batch;
    batch.digests = all;
    batch.offsets = offsets;
    batch.max_lengths = max_lengths;
    batch.apply_eagle = eagle;
    BatchOptions options;
    options.num_threads = static_cast<int>(1 + rng() % 2);
    options.min_seconds_per_worker = 0;  // workers even for these small batches
    const BatchLookupResult got = c.find_longest_cache_hits(batch, view, options);
    for (int r = 0; r < requests; ++r) {
      expect_same(got.request(static_cast<std::size_t>(r)), expected[r], trial);
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(PlannedLookup, TwoThreadBatchesRunningAtOnceShareTheBufferPool) {
  // Batches big enough to split over two worker threads, from two callers at once: the lookup
  // and probe_many buffers come from one process-wide pool (run under TSan in sanitizers.sh).
  const PlannedPathForAllTables planned_everywhere;
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Config config;
  config.hash_block_size = 4;
  config.scheduler_block_size = 256;
  config.use_eagle = true;
  config.groups = {GroupSpec::full_attention(256), GroupSpec::sliding_window_attention(64, 128),
                   GroupSpec::sliding_window_attention(4, 8)};
  const Coordinator c(config);
  constexpr int kRequests = 40;
  constexpr std::size_t kHashes = 4096;  // 40 x 4096 digests: two threads of 2^16 or more
  BlockIndex index;
  std::vector<BlockDigest> all;
  std::vector<std::int64_t> offsets{0};
  for (int r = 0; r < kRequests; ++r) {
    const std::vector<BlockDigest> prompt = random_hashes(rng, kHashes);
    copy_store(random_store(rng, config, prompt), config, prompt, index, 3);
    all.insert(all.end(), prompt.begin(), prompt.end());
    offsets.push_back(static_cast<std::int64_t>(all.size()));
  }
  const BlockIndex::View view = index.view(3);
  LookupBatch batch;
  batch.digests = all;
  batch.offsets = offsets;
  const std::vector<std::int64_t> max_lengths(kRequests,
                                              static_cast<std::int64_t>(kHashes) * 4 - 1);
  batch.max_lengths = max_lengths;
  std::vector<LookupResult> expected;
  for (int r = 0; r < kRequests; ++r) {
    const std::vector<BlockDigest> prompt(all.begin() + offsets[r], all.begin() + offsets[r + 1]);
    ErrorKind err = ErrorKind::ok;
    expected.push_back(direct_lookup(c, prompt, batch.max_lengths[r], view, true, err));
    ASSERT_EQ(err, ErrorKind::ok);
  }
  BatchOptions options;
  options.num_threads = 2;
  options.min_seconds_per_worker = 0;  // workers even for this small batch
  std::vector<BatchLookupResult> got(2);
  std::thread other([&] { got[1] = c.find_longest_cache_hits(batch, view, options); });
  got[0] = c.find_longest_cache_hits(batch, view, options);
  other.join();
  for (const BatchLookupResult& result : got) {
    for (int r = 0; r < kRequests; ++r) {
      expect_same(result.request(static_cast<std::size_t>(r)), expected[r], r);
    }
  }
}

/// A store that runs another lookup from inside probe_many, as a Python callback source may.
class ReentrantSource final : public ExistenceSource {
 public:
  ReentrantSource(const Coordinator& c, const KeySet& inner, const std::vector<BlockDigest>& other,
                  const KeySet& other_store)
      : c_(c), inner_(inner), other_(other), other_store_(other_store) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override {
    return inner_.probe(group_id, hashes, first, step, count);
  }
  bool prefers_probe_many() const noexcept override { return true; }
  void probe_many(const ProbeWindow* windows, std::size_t n, std::uint64_t* out) const override {
    nested_ = c_.find_longest_cache_hit(
                    other_, static_cast<std::int64_t>(other_.size()) * c_.config().hash_block_size,
                    other_store_)
                  .hit_length;
    inner_.probe_many(windows, n, out);
  }
  std::int64_t nested() const { return nested_; }

 private:
  const Coordinator& c_;
  const KeySet& inner_;
  const std::vector<BlockDigest>& other_;
  const KeySet& other_store_;
  mutable std::int64_t nested_ = -1;
};

TEST(PlannedLookup, ALookupInsideAStoreCallbackLeavesTheOuterOneExact) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const Config config = random_config(rng);
    const Coordinator c(config);
    const auto hashes = random_hashes(rng, 1 + rng() % 200);
    const auto other = random_hashes(rng, 1 + rng() % 200);
    const KeySet store = random_store(rng, config, hashes);
    const KeySet other_store = random_store(rng, config, other);
    const std::int64_t max_len =
        random_max_length(rng, static_cast<std::int64_t>(hashes.size()), config.hash_block_size);
    ErrorKind err = ErrorKind::ok;
    const LookupResult expected = direct_lookup(c, hashes, max_len, store, true, err);
    ErrorKind other_err = ErrorKind::ok;
    const LookupResult other_expected =
        direct_lookup(c, other, static_cast<std::int64_t>(other.size()) * config.hash_block_size,
                      other_store, true, other_err);
    if (err != ErrorKind::ok || other_err != ErrorKind::ok) {
      continue;
    }
    const ReentrantSource source(c, store, other, other_store);
    expect_same(c.find_longest_cache_hit(hashes, max_len, source), expected, trial);
    if (source.nested() >= 0) {  // the outer lookup asked its store something
      ASSERT_EQ(source.nested(), other_expected.hit_length) << "trial " << trial;
      ++compared;
    }
  }
  EXPECT_GT(compared, 20);
}

/// The conformance vectors through the resident index: the store's keys among the request's
/// digests are copied into a BlockIndex (a small one: window by window, unless a test sends every
/// table through the fetched-up-front path).
class ResidentIndexBackend final : public conformance::Backend {
 public:
  std::string name() const override { return "cpu-resident-index"; }
  LookupResult find_longest_cache_hit(const Coordinator& coordinator,
                                      span<const BlockDigest> hashes, std::int64_t max_length,
                                      const KeySet& store, bool apply_eagle) override {
    BlockIndex index;
    for (std::size_t g = 0; g < coordinator.config().groups.size(); ++g) {
      std::vector<BlockDigest> keys;
      for (const BlockDigest& d : hashes) {
        if (store.contains(static_cast<int>(g), d)) {
          keys.push_back(d);
        }
      }
      index.insert(7, static_cast<int>(g), keys);
    }
    return coordinator.find_longest_cache_hit(hashes, max_length, index.view(7), apply_eagle);
  }
  LookupResult load_mask(const Coordinator& coordinator, span<const BlockDigest> hashes,
                         std::int64_t token_len) override {
    return coordinator.load_mask(hashes, token_len);
  }
};

/// Every vector through a resident index, on the planned path (probe_many) and on the
/// window-by-window path that small tables take.
void run_every_vector_through_the_resident_index() {
  const std::vector<std::string> files =
      conformance::collect_vector_files({conformance::default_vectors_dir()});
  ASSERT_FALSE(files.empty());
  ResidentIndexBackend backend;
  std::size_t cases = 0;
  for (const std::string& path : files) {
    const conformance::FileResult result = conformance::run_file(path, backend);
    for (const conformance::CaseResult& c : result.cases) {
      ++cases;
      EXPECT_TRUE(c.passed) << path << ": " << c.name << ": " << c.detail;
    }
  }
  EXPECT_GT(cases, 1000U);
}

TEST(PlannedLookup, EveryVectorPassesThroughTheResidentIndex) {
  {
    const PlannedPathForAllTables planned_everywhere;
    run_every_vector_through_the_resident_index();
  }
  run_every_vector_through_the_resident_index();
}

}  // namespace
}  // namespace prefixhit
