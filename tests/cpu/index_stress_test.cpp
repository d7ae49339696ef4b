// Concurrency stress of the CPU BlockIndex, checked against a model.
//
// Several writer threads each own a disjoint key range (their thread id is in the namespace and
// in the digest), insert and erase random batches of it and check every lookup of their own
// range against their private model, which is exact because nobody else writes that range.
// Shared keys are inserted before the threads start and never written again: every read of them
// must hit, through contains() and through Coordinator lookups over BlockIndex::view. A snapshot
// thread takes for_each snapshots and index images (serialize_index) while all this runs and
// checks that each is self-consistent. At the end the index must equal the union of the models.
// The run is bounded in time (PREFIXHIT_STRESS_MS, default 1500 ms) and prints its op counts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

using Key = std::tuple<Namespace, int, BlockDigest>;

constexpr Namespace kSharedNs = 1000;
constexpr int kWriters = 4;
constexpr int kKeysPerWriter = 2048;
constexpr int kGroups = 2;

int stress_ms() {
  if (const char* env = std::getenv("PREFIXHIT_STRESS_MS"); env != nullptr && *env != '\0') {
    return std::max(100, std::atoi(env));
  }
  return 1500;
}

/// Writer w's key i: unique to (w, i); the namespace is the writer's own.
BlockDigest writer_key(int w, int i, std::uint64_t salt) {
  BlockDigest d;
  std::uint64_t state =
      salt ^ (static_cast<std::uint64_t>(w) << 32) ^ static_cast<std::uint64_t>(i);
  for (std::size_t b = 0; b < BlockDigest::kSize; b += 8) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const std::uint64_t z = state ^ (state >> 29);
    for (std::size_t k = 0; k < 8; ++k) {
      d.bytes[b + k] = static_cast<std::uint8_t>(z >> (8 * k));
    }
  }
  d.bytes[0] = static_cast<std::uint8_t>(w);  // the writer is visible in the key itself
  return d;
}

struct Counters {
  std::atomic<std::uint64_t> inserts{0};
  std::atomic<std::uint64_t> erases{0};
  std::atomic<std::uint64_t> contains{0};
  std::atomic<std::uint64_t> lookups{0};
  std::atomic<std::uint64_t> snapshots{0};
  std::atomic<std::uint64_t> images{0};
  std::atomic<std::uint64_t> rehash_growths{0};
};

TEST(IndexStress, ConcurrentWritersReadersAndSnapshotsMatchTheModel) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 seeder(seed);
  const std::uint64_t salt = seeder();

  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 32;
  config.groups = {GroupSpec::full_attention(32), GroupSpec::sliding_window_attention(16, 32)};
  const Coordinator coordinator(config);

  BlockIndexOptions options;
  options.initial_capacity = 32;  // start tiny: the writers force rehashes under contention
  BlockIndex index(options);

  // Shared, read-only prompts: stored completely before the threads start.
  std::vector<std::vector<BlockDigest>> shared_prompts;
  std::mt19937_64 shared_rng(seeder());
  for (int p = 0; p < 8; ++p) {
    shared_prompts.push_back(random_hashes(shared_rng, 64));
    for (int g = 0; g < kGroups; ++g) {
      const std::vector<BlockDigest> keys = coordinator.chunk_keys(
          shared_prompts.back(), config.groups[static_cast<std::size_t>(g)].block_size);
      index.insert(kSharedNs, g, keys);
    }
  }
  const std::size_t shared_keys = index.size();
  const std::int64_t shared_hit = 64 * 16;

  Counters counters;
  std::atomic<bool> stop{false};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(failures_mutex);
    if (failures.size() < 20) {
      failures.push_back(what);
    }
    stop = true;
  };

  std::vector<std::vector<std::uint8_t>> models(
      kWriters, std::vector<std::uint8_t>(kKeysPerWriter * kGroups));
  // Every thread's seed is drawn here: the seeder itself is not shared across threads.
  std::vector<std::uint64_t> writer_seeds;
  for (int w = 0; w < kWriters; ++w) {
    writer_seeds.push_back(seeder());
  }
  const std::uint64_t reader_seeds[2] = {seeder(), seeder()};

  auto writer = [&](int w) {
    std::mt19937_64 rng(writer_seeds[static_cast<std::size_t>(w)]);
    std::vector<std::uint8_t>& model = models[static_cast<std::size_t>(w)];
    const auto ns = static_cast<Namespace>(w);
    std::vector<BlockDigest> keys;
    std::vector<std::int32_t> groups;
    std::vector<int> ids;
    std::vector<std::uint8_t> out;
    while (!stop.load(std::memory_order_relaxed)) {
      const int op = static_cast<int>(rng() % 10);
      const int batch = 1 + static_cast<int>(rng() % 64);
      keys.clear();
      groups.clear();
      ids.clear();
      for (int k = 0; k < batch; ++k) {
        const int id = static_cast<int>(rng() % (kKeysPerWriter * kGroups));
        ids.push_back(id);
        keys.push_back(writer_key(w, id % kKeysPerWriter, salt));
        groups.push_back(id / kKeysPerWriter);
      }
      if (op < 4) {
        std::size_t expected_new = 0;
        std::set<int> seen;
        for (int id : ids) {
          expected_new += model[static_cast<std::size_t>(id)] == 0 && seen.insert(id).second;
        }
        const std::size_t capacity_before = index.capacity();
        const std::size_t added = index.insert(ns, groups, keys);
        if (added != expected_new) {
          fail("writer " + std::to_string(w) + ": insert added " + std::to_string(added) +
               ", model expected " + std::to_string(expected_new));
        }
        for (int id : ids) {
          model[static_cast<std::size_t>(id)] = 1;
        }
        counters.inserts += static_cast<std::uint64_t>(batch);
        counters.rehash_growths += index.capacity() > capacity_before ? 1U : 0U;
      } else if (op < 7) {
        std::size_t expected_removed = 0;
        std::set<int> seen;
        for (int id : ids) {
          expected_removed += model[static_cast<std::size_t>(id)] != 0 && seen.insert(id).second;
        }
        const std::size_t removed = index.erase(ns, groups, keys);
        if (removed != expected_removed) {
          fail("writer " + std::to_string(w) + ": erase removed " + std::to_string(removed) +
               ", model expected " + std::to_string(expected_removed));
        }
        for (int id : ids) {
          model[static_cast<std::size_t>(id)] = 0;
        }
        counters.erases += static_cast<std::uint64_t>(batch);
      } else {
        out.assign(keys.size(), 0xCD);
        index.contains(ns, groups, keys, out.data());
        for (std::size_t k = 0; k < keys.size(); ++k) {
          if (out[k] != model[static_cast<std::size_t>(ids[k])]) {
            fail("writer " + std::to_string(w) + ": contains says " + std::to_string(out[k]) +
                 " for key " + std::to_string(ids[k]) + ", model says " +
                 std::to_string(model[static_cast<std::size_t>(ids[k])]));
          }
        }
        // Another writer's namespace never holds this writer's keys.
        index.contains((ns + 1) % kWriters, groups, keys, out.data());
        for (std::size_t k = 0; k < keys.size(); ++k) {
          if (out[k] != 0) {
            fail("writer " + std::to_string(w) + ": its key is visible in another namespace");
          }
        }
        counters.contains += 2 * keys.size();
      }
    }
  };

  auto reader = [&](int r) {
    std::mt19937_64 rng(reader_seeds[r]);
    while (!stop.load(std::memory_order_relaxed)) {
      const auto& prompt = shared_prompts[rng() % shared_prompts.size()];
      const LookupResult shared = coordinator.find_longest_cache_hit(
          prompt, static_cast<std::int64_t>(prompt.size()) * 16, index.view(kSharedNs));
      if (shared.hit_length != shared_hit) {
        fail("reader: shared prompt hit " + std::to_string(shared.hit_length) + ", expected " +
             std::to_string(shared_hit));
      }
      // The shared prompts were never written to a writer's namespace.
      const LookupResult other =
          coordinator.find_longest_cache_hit(prompt, static_cast<std::int64_t>(prompt.size()) * 16,
                                             index.view(static_cast<Namespace>(rng() % kWriters)));
      if (other.hit_length != 0) {
        fail("reader: a writer namespace hits a shared prompt");
      }
      counters.lookups += 2;
    }
  };

  auto snapshotter = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::size_t shared_seen = 0;
      std::size_t total = 0;
      bool ok = true;
      index.for_each([&](Namespace ns, int g, const BlockDigest& d) {
        ++total;
        if (ns == kSharedNs) {
          ++shared_seen;
        } else if (ns >= static_cast<Namespace>(kWriters) || d.bytes[0] != ns || g < 0 ||
                   g >= kGroups) {
          ok = false;  // a key no writer could have written
        }
      });
      if (!ok || shared_seen != shared_keys) {
        fail("snapshot: foreign key or " + std::to_string(shared_seen) + " shared keys of " +
             std::to_string(shared_keys));
      }
      counters.snapshots += 1;
      // An index image taken under load is a consistent, loadable snapshot.
      const std::vector<std::uint8_t> image = serialize_index(index);
      try {
        const IndexFileStats stats = read_index_stats_from_memory(image.data(), image.size());
        if (stats.keys_per_namespace.at(kSharedNs) != shared_keys) {
          fail("image: wrong shared key count");
        }
      } catch (const std::exception& e) {
        fail(std::string("image under load is invalid: ") + e.what());
      }
      counters.images += 1;
      if (total < shared_keys) {
        fail("snapshot smaller than the shared keys");
      }
    }
  };

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back(writer, w);
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back(reader, r);
  }
  threads.emplace_back(snapshotter);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(stress_ms());
  while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (std::thread& t : threads) {
    t.join();
  }
  for (const std::string& f : failures) {
    ADD_FAILURE() << f;
  }

  // The final content is exactly the shared keys plus every writer's model.
  std::set<Key> expected;
  index.for_each([&](Namespace ns, int g, const BlockDigest& d) {
    if (ns == kSharedNs) {
      expected.emplace(ns, g, d);
    }
  });
  EXPECT_EQ(expected.size(), shared_keys);
  for (int w = 0; w < kWriters; ++w) {
    for (int id = 0; id < kKeysPerWriter * kGroups; ++id) {
      if (models[static_cast<std::size_t>(w)][static_cast<std::size_t>(id)] != 0) {
        expected.emplace(static_cast<Namespace>(w), id / kKeysPerWriter,
                         writer_key(w, id % kKeysPerWriter, salt));
      }
    }
  }
  std::set<Key> actual;
  index.for_each([&](Namespace ns, int g, const BlockDigest& d) { actual.emplace(ns, g, d); });
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_TRUE(actual == expected) << "the final index differs from the model";
  EXPECT_EQ(index.size(), expected.size());

  const std::uint64_t ops =
      counters.inserts + counters.erases + counters.contains + counters.lookups;
  std::cout << "[ stress   ] " << stress_ms() << " ms, " << kWriters << " writers, 2 readers, 1 "
            << "snapshotter: " << counters.inserts << " keys inserted, " << counters.erases
            << " erased, " << counters.contains << " contains, " << counters.lookups
            << " coordinator lookups, " << counters.snapshots << " snapshots, " << counters.images
            << " images, " << counters.rehash_growths << " growths; " << ops
            << " key operations; final size " << index.size() << "\n";
  ::testing::Test::RecordProperty("key_operations", std::to_string(ops));
  EXPECT_GT(counters.inserts.load(), 0U);
  EXPECT_GT(counters.lookups.load(), 0U);
  EXPECT_GT(counters.snapshots.load(), 0U);
}

}  // namespace
}  // namespace prefixhit
