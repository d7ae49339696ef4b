// DeviceBlockIndex against a std::unordered_set model on fresh random inputs (the seed is printed
// with every failure): insert, erase, re-insert, in-batch duplicates, tag/bucket collisions,
// growth, max_capacity, poisoned output buffers, the device ref, async calls, per-key groups,
// bad arguments and caller-supplied allocators. Every test skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "gpu/gpu_test_util.hpp"
#include "prefixhit/device_block_index.hpp"
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

/// A device copy of a host vector, freed on scope exit.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (n_ != 0 && cudaMalloc(&ptr_, n_ * sizeof(T)) != cudaSuccess) {
      ptr_ = nullptr;
      ADD_FAILURE() << "cudaMalloc failed";
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (ptr_ != nullptr) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  std::size_t size() const { return n_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    if (n_ != 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t n_ = 0;
};

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

/// contains() through a poisoned output buffer: every byte must be overwritten with 0 or 1.
std::vector<std::uint8_t> device_contains(const DeviceBlockIndex& index, Namespace ns, int group,
                                          const std::vector<BlockDigest>& keys) {
  DeviceArray<BlockDigest> d_keys(keys);
  DeviceArray<std::uint8_t> d_out(keys.size());
  EXPECT_EQ(cudaMemset(d_out.get(), 0xAB, keys.size()), cudaSuccess);
  index.contains(ns, group, d_keys.get(), keys.size(), d_out.get());
  return d_out.to_host();
}

void expect_matches_model(const DeviceBlockIndex& index, const Model& model,
                          const std::vector<BlockDigest>& probe,
                          const std::vector<Namespace>& namespaces, int groups) {
  ASSERT_EQ(index.size(), model.size());
  for (Namespace ns : namespaces) {
    for (int g = 0; g < groups; ++g) {
      const std::vector<std::uint8_t> out = device_contains(index, ns, g, probe);
      for (std::size_t i = 0; i < probe.size(); ++i) {
        ASSERT_LE(out[i], 1) << "output byte " << i << " left poisoned";
        ASSERT_EQ(out[i] == 1, model.count(ModelKey{ns, g, probe[i]}) != 0)
            << "ns " << ns << " group " << g << " key " << i;
      }
    }
  }
}

TEST(DeviceBlockIndex, RandomOperationsMatchAnUnorderedSet) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed) + " (rerun with it to reproduce)");
  std::mt19937_64 rng(seed);
  DeviceBlockIndexOptions options;
  options.initial_capacity = 32;  // force device rehashes
  DeviceBlockIndex index(options);
  Model model;
  const std::vector<Namespace> namespaces = {0, 7, kMaxNamespace};
  constexpr int kGroups = 3;
  std::vector<BlockDigest> universe;
  for (int i = 0; i < 20000; ++i) {
    universe.push_back(random_digest(rng));
  }
  for (int round = 0; round < 60; ++round) {
    const Namespace ns = namespaces[rng() % namespaces.size()];
    const int group = static_cast<int>(rng() % kGroups);
    std::vector<BlockDigest> batch;
    const std::size_t batch_size = rng() % 5000;
    for (std::size_t i = 0; i < batch_size; ++i) {
      batch.push_back(universe[rng() % universe.size()]);  // duplicates within and across batches
    }
    DeviceArray<BlockDigest> d_batch(batch);
    if (rng() % 3 != 0) {
      std::size_t expected_new = 0;
      for (const auto& d : batch) {
        expected_new += model.insert(ModelKey{ns, group, d}).second ? 1 : 0;
      }
      ASSERT_EQ(index.insert(ns, group, d_batch.get(), batch.size()), expected_new)
          << "round " << round;
    } else {
      std::size_t expected_removed = 0;
      for (const auto& d : batch) {
        expected_removed += model.erase(ModelKey{ns, group, d});
      }
      ASSERT_EQ(index.erase(ns, group, d_batch.get(), batch.size()), expected_removed)
          << "round " << round;
    }
    const DeviceBlockIndexStats stats = index.stats();
    ASSERT_EQ(stats.size, model.size());
    ASSERT_LE(static_cast<double>(stats.used_slots), 0.8 * static_cast<double>(stats.capacity));
  }
  std::vector<BlockDigest> probe(universe.begin(), universe.begin() + 4000);
  for (int i = 0; i < 1000; ++i) {
    probe.push_back(random_digest(rng));
  }
  expect_matches_model(index, model, probe, namespaces, kGroups + 1);
}

TEST(DeviceBlockIndex, DuplicatesWithinOneBatchAreStoredOnce) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  DeviceBlockIndex index;
  // 64 distinct keys, each repeated 2000 times and shuffled: maximal in-batch contention.
  std::vector<BlockDigest> distinct;
  for (int i = 0; i < 64; ++i) {
    distinct.push_back(random_digest(rng));
  }
  std::vector<BlockDigest> batch;
  for (int rep = 0; rep < 2000; ++rep) {
    batch.insert(batch.end(), distinct.begin(), distinct.end());
  }
  std::shuffle(batch.begin(), batch.end(), rng);
  DeviceArray<BlockDigest> d_batch(batch);
  EXPECT_EQ(index.insert(3, 1, d_batch.get(), batch.size()), distinct.size());
  EXPECT_EQ(index.size(), distinct.size());
  EXPECT_EQ(index.insert(3, 1, d_batch.get(), batch.size()), 0U);
  // Erasing with duplicates removes each key once.
  EXPECT_EQ(index.erase(3, 1, d_batch.get(), batch.size()), distinct.size());
  EXPECT_EQ(index.size(), 0U);
  // Re-insert after erase.
  EXPECT_EQ(index.insert(3, 1, d_batch.get(), batch.size()), distinct.size());
  const std::vector<std::uint8_t> out = device_contains(index, 3, 1, distinct);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 64);
}

// Erasers of different keys in one 4-byte tag word race on its CAS: a loser must re-read the
// word and retry, or its erase is lost. A one-bucket table that is nearly full puts three or
// four live keys in every tag word, so under random schedules with preemption (run-tests.sh)
// a lost erase shows up as a key that stays, a short count or a wrong size.
TEST(DeviceBlockIndex, CrowdedConcurrentErasesLoseNothing) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed) + " (rerun with it to reproduce)");
  std::mt19937_64 rng(seed);
  DeviceBlockIndexOptions options;
  options.initial_capacity = detail::kBucketSlots;
  options.max_capacity = detail::kBucketSlots;  // one bucket: erasers share its 3 tag words
  options.max_load_factor = 0.9;
  DeviceBlockIndex index(options);
  constexpr std::size_t kKeys = 10;  // 10 of 12 slots: 3-4 live tags per word
  for (int round = 0; round < 40; ++round) {
    std::vector<BlockDigest> keys;
    for (std::size_t i = 0; i < kKeys; ++i) {
      keys.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_keys(keys);
    ASSERT_EQ(index.insert(5, 2, d_keys.get(), keys.size()), kKeys) << "round " << round;
    // Erase a random subset (all of them every other round) in one concurrent call.
    std::vector<BlockDigest> doomed;
    std::vector<BlockDigest> kept;
    for (const BlockDigest& d : keys) {
      (round % 2 == 0 || rng() % 3 != 0 ? doomed : kept).push_back(d);
    }
    DeviceArray<BlockDigest> d_doomed(doomed);
    ASSERT_EQ(index.erase(5, 2, d_doomed.get(), doomed.size()), doomed.size())
        << "round " << round << ": an erase was lost";
    ASSERT_EQ(index.size(), kept.size()) << "round " << round;
    const std::vector<std::uint8_t> gone = device_contains(index, 5, 2, doomed);
    ASSERT_EQ(std::count(gone.begin(), gone.end(), 0), static_cast<std::ptrdiff_t>(doomed.size()))
        << "round " << round << ": an erased key is still found";
    const std::vector<std::uint8_t> still = device_contains(index, 5, 2, kept);
    ASSERT_EQ(std::count(still.begin(), still.end(), 1), static_cast<std::ptrdiff_t>(kept.size()))
        << "round " << round << ": a key nobody erased is gone";
    DeviceArray<BlockDigest> d_kept(kept);
    ASSERT_EQ(index.erase(5, 2, d_kept.get(), kept.size()), kept.size()) << "round " << round;
    ASSERT_EQ(index.size(), 0U) << "round " << round;
  }
}

TEST(DeviceBlockIndex, KeysCollidingOnTagAndBucketAreNotConfused) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DeviceBlockIndexOptions options;
  options.initial_capacity = 4 * detail::kBucketSlots;
  options.max_capacity = 4 * detail::kBucketSlots;  // stays at 4 buckets: crafted places hold
  options.max_load_factor = 0.9;                    // 43 keys: the stored keys and their twins
  options.seed = rng() | 1U;
  DeviceBlockIndex index(options);
  ASSERT_EQ(index.capacity(), 48U);
  const detail::IndexHashKey hk = detail::make_hash_key(index.hash_seed());
  const std::uint32_t meta = detail::pack_meta(4, 2);
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
  DeviceArray<BlockDigest> d_stored(stored);
  EXPECT_EQ(index.insert(4, 2, d_stored.get(), stored.size()), stored.size());
  std::vector<std::uint8_t> out = device_contains(index, 4, 2, twins);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "a tag/bucket twin was reported present";
  out = device_contains(index, 4, 2, stored);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(stored.size()));
  // The same digests in another namespace and another group are absent.
  out = device_contains(index, 5, 2, stored);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0);
  out = device_contains(index, 4, 3, stored);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0);
  DeviceArray<BlockDigest> d_twins(twins);
  EXPECT_EQ(index.erase(4, 2, d_twins.get(), twins.size()), 0U);  // absent: harmless
  EXPECT_EQ(index.insert(4, 2, d_twins.get(), twins.size()), twins.size());
  EXPECT_EQ(index.erase(4, 2, d_stored.get(), stored.size()), stored.size());
  out = device_contains(index, 4, 2, twins);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(twins.size()));
}

TEST(DeviceBlockIndex, GrowsUnderLoadAndKeepsEveryKey) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  DeviceBlockIndexOptions options;
  options.initial_capacity = 32;
  DeviceBlockIndex index(options);
  std::vector<BlockDigest> keys;
  std::size_t capacity = index.capacity();
  int growths = 0;
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<BlockDigest> fresh;
    for (int i = 0; i < 20000; ++i) {
      fresh.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_fresh(fresh);
    ASSERT_EQ(index.insert(0, 0, d_fresh.get(), fresh.size()), fresh.size());
    keys.insert(keys.end(), fresh.begin(), fresh.end());
    growths += index.capacity() > capacity ? 1 : 0;
    capacity = index.capacity();
  }
  EXPECT_GE(growths, 5);
  EXPECT_EQ(index.size(), keys.size());
  const std::vector<std::uint8_t> out = device_contains(index, 0, 0, keys);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(keys.size()));
}

TEST(DeviceBlockIndex, MaxCapacityRejectsWholeBatchesAndChangesNothing) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  DeviceBlockIndexOptions options;
  options.initial_capacity = 64;
  options.max_capacity = 1000;    // 768 slots (64 buckets of 12) at most
  options.max_load_factor = 0.5;  // 384 keys at most
  DeviceBlockIndex index(options);
  std::vector<BlockDigest> first;
  for (int i = 0; i < 378; ++i) {
    first.push_back(random_digest(rng));
  }
  DeviceArray<BlockDigest> d_first(first);
  ASSERT_EQ(index.insert(1, 0, d_first.get(), first.size()), 378U);
  std::vector<BlockDigest> too_many;
  for (int i = 0; i < 7; ++i) {
    too_many.push_back(random_digest(rng));
  }
  DeviceArray<BlockDigest> d_too_many(too_many);
  EXPECT_THROW(index.insert(1, 0, d_too_many.get(), too_many.size()), CapacityExceeded);
  EXPECT_EQ(index.size(), 378U);
  std::vector<std::uint8_t> out = device_contains(index, 1, 0, too_many);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0) << "a rejected batch left keys behind";
  // Many duplicates of old keys plus 6 new ones fit exactly.
  std::vector<BlockDigest> mostly_old(first);
  for (int rep = 0; rep < 20; ++rep) {
    mostly_old.insert(mostly_old.end(), too_many.begin(), too_many.begin() + 6);
  }
  DeviceArray<BlockDigest> d_mostly_old(mostly_old);
  EXPECT_EQ(index.insert(1, 0, d_mostly_old.get(), mostly_old.size()), 6U);
  EXPECT_EQ(index.size(), 384U);
  // Churn at the limit (tombstones) never throws and never loses a key.
  EXPECT_EQ(index.erase(1, 0, d_first.get(), 100), 100U);
  for (int round = 0; round < 30; ++round) {
    std::vector<BlockDigest> churn;
    for (int i = 0; i < 100; ++i) {
      churn.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_churn(churn);
    ASSERT_EQ(index.insert(1, 1, d_churn.get(), churn.size()), 100U) << "round " << round;
    ASSERT_EQ(index.erase(1, 1, d_churn.get(), churn.size()), 100U);
  }
  EXPECT_EQ(index.size(), 284U);
  out = device_contains(index, 1, 0, std::vector<BlockDigest>(first.begin() + 100, first.end()));
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 278);
}

__global__ void probe_with_ref(DeviceBlockIndexRef ref, Namespace ns, const int* groups,
                               const BlockDigest* keys, std::size_t n, std::uint8_t* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = ref.contains(ns, groups[i], keys[i]) ? 1 : 0;
  }
}

TEST(DeviceBlockIndex, DeviceRefAnswersLikeContains) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  DeviceBlockIndex index;
  std::vector<BlockDigest> keys;
  for (int i = 0; i < 3000; ++i) {
    keys.push_back(random_digest(rng));
  }
  DeviceArray<BlockDigest> d_keys(keys);
  index.insert(9, 2, d_keys.get(), 2000);  // the first 2000 only
  std::vector<int> groups(keys.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    groups[i] = i % 3 == 0 ? 2 : (i % 3 == 1 ? 5 : -1);  // -1: invalid, never present
  }
  DeviceArray<int> d_groups(groups);
  DeviceArray<std::uint8_t> d_out(keys.size());
  PREFIXHIT_ASSERT_CUDA(cudaMemset(d_out.get(), 0xAB, keys.size()));
  PREFIXHIT_LAUNCH(probe_with_ref, static_cast<unsigned>((keys.size() + 127) / 128), 128, 0,
                   nullptr)
  (index.ref(), 9, d_groups.get(), d_keys.get(), keys.size(), d_out.get());
  PREFIXHIT_ASSERT_CUDA(cudaGetLastError());
  PREFIXHIT_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<std::uint8_t> out = d_out.to_host();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(out[i], (i < 2000 && groups[i] == 2) ? 1 : 0) << "key " << i;
  }
}

__global__ void slot_hashes(detail::IndexHashKey secret, const BlockDigest* keys,
                            const std::uint32_t* metas, std::size_t n, std::uint64_t* out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = detail::slot_hash(detail::make_slot_key(keys[i], metas[i]), secret);
  }
}

// The kernels' slot hash (the S-box form, from the device's copy of the S-box) is the host's:
// tests/cpu/slot_hash_test.cpp ties the host's to AES-NI.
TEST(DeviceBlockIndex, SlotHashOnTheDeviceMatchesTheHost) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const detail::IndexHashKey secret = detail::make_hash_key(rng());
  std::vector<BlockDigest> keys;
  std::vector<std::uint32_t> metas;
  for (int i = 0; i < 4096; ++i) {
    keys.push_back(random_digest(rng));
    metas.push_back(static_cast<std::uint32_t>(rng()));
  }
  DeviceArray<BlockDigest> d_keys(keys);
  DeviceArray<std::uint32_t> d_metas(metas);
  DeviceArray<std::uint64_t> d_out(keys.size());
  PREFIXHIT_LAUNCH(slot_hashes, static_cast<unsigned>((keys.size() + 127) / 128), 128, 0, nullptr)
  (secret, d_keys.get(), d_metas.get(), keys.size(), d_out.get());
  PREFIXHIT_ASSERT_CUDA(cudaGetLastError());
  PREFIXHIT_ASSERT_CUDA(cudaDeviceSynchronize());
  const std::vector<std::uint64_t> out = d_out.to_host();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(out[i], detail::slot_hash(detail::make_slot_key(keys[i], metas[i]), secret))
        << "key " << i;
  }
}

TEST(DeviceBlockIndex, AsyncCallsOnAStreamAreOrdered) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  cudaStream_t stream = nullptr;
  PREFIXHIT_ASSERT_CUDA(cudaStreamCreate(&stream));
  {
    DeviceBlockIndexOptions options;
    options.initial_capacity = 1024;
    DeviceBlockIndex index(options, stream);
    std::vector<BlockDigest> keys;
    for (int i = 0; i < 50000; ++i) {
      keys.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_keys(keys);
    DeviceArray<std::uint8_t> d_out(keys.size());
    // Several async inserts (growth in between), an async erase and an async contains.
    for (std::size_t start = 0; start < keys.size(); start += 10000) {
      index.insert_async(2, 0, d_keys.get() + start, 10000, stream);
    }
    index.erase_async(2, 0, d_keys.get(), 5000, stream);
    PREFIXHIT_ASSERT_CUDA(cudaMemsetAsync(d_out.get(), 0xAB, keys.size(), stream));
    index.contains_async(2, 0, d_keys.get(), keys.size(), d_out.get(), stream);
    PREFIXHIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
    const std::vector<std::uint8_t> out = d_out.to_host();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(out[i], i < 5000 ? 0 : 1) << "key " << i;
    }
    EXPECT_EQ(index.size(stream), keys.size() - 5000);
    index.clear(stream);
    EXPECT_EQ(index.size(stream), 0U);
  }
  PREFIXHIT_ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST(DeviceBlockIndex, PerKeyGroupIdsAreValidatedBeforeAnythingIsApplied) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  DeviceBlockIndex index;
  std::vector<BlockDigest> keys;
  std::vector<std::int32_t> groups;
  for (int i = 0; i < 1000; ++i) {
    keys.push_back(random_digest(rng));
    groups.push_back(i % kMaxGroups);
  }
  DeviceArray<BlockDigest> d_keys(keys);
  groups[777] = kMaxGroups;  // one bad id
  {
    DeviceArray<std::int32_t> d_groups(groups);
    try {
      index.insert(1, d_groups.get(), d_keys.get(), keys.size());
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("group_ids[777]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(index.size(), 0U);
  }
  groups[777] = 777 % kMaxGroups;
  DeviceArray<std::int32_t> d_groups(groups);
  EXPECT_EQ(index.insert(1, d_groups.get(), d_keys.get(), keys.size()), keys.size());
  DeviceArray<std::uint8_t> d_out(keys.size());
  index.contains(1, d_groups.get(), d_keys.get(), keys.size(), d_out.get());
  std::vector<std::uint8_t> out = d_out.to_host();
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 1000);
  out = device_contains(index, 1, 0, keys);  // only every 32nd key is in group 0
  for (std::size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(out[i], i % kMaxGroups == 0 ? 1 : 0);
  }
  EXPECT_EQ(index.erase(1, d_groups.get(), d_keys.get(), keys.size()), keys.size());
  EXPECT_EQ(index.size(), 0U);
}

TEST(DeviceBlockIndex, BadArgumentsThrowTypedErrors) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  DeviceBlockIndex index;
  std::mt19937_64 rng(fresh_seed());
  std::vector<BlockDigest> host_keys = {random_digest(rng)};
  DeviceArray<BlockDigest> d_keys(host_keys);
  DeviceArray<std::uint8_t> d_out(1);
  EXPECT_THROW(index.insert(kMaxNamespace + 1, 0, d_keys.get(), 1), InvalidArgument);
  EXPECT_THROW(index.insert(0, kMaxGroups, d_keys.get(), 1), InvalidArgument);
  EXPECT_THROW(index.insert(0, 0, nullptr, 1), InvalidArgument);
  EXPECT_THROW(index.insert(0, 0, host_keys.data(), 1), InvalidArgument);  // plain host memory
  EXPECT_THROW(index.contains(0, 0, d_keys.get(), 1, nullptr), InvalidArgument);
  EXPECT_THROW(index.contains(0, -1, d_keys.get(), 1, d_out.get()), InvalidArgument);
  EXPECT_EQ(index.size(), 0U);
  EXPECT_EQ(index.erase(0, 0, d_keys.get(), 1), 0U);  // absent: harmless
  EXPECT_EQ(index.insert(0, 0, d_keys.get(), 0), 0U);
  DeviceBlockIndexOptions bad;
  bad.max_load_factor = 1.0;
  EXPECT_THROW(DeviceBlockIndex{bad}, InvalidArgument);
  // The context is still healthy after all of that.
  EXPECT_EQ(index.insert(0, 0, d_keys.get(), 1), 1U);
  PREFIXHIT_ASSERT_CUDA(cudaDeviceSynchronize());
}

struct CountingAllocator {
  int allocations = 0;
  int frees = 0;
  int fail_after = -1;  // fail the allocation with this number (0-based); -1: never

  DeviceAllocator make() {
    DeviceAllocator a;
    a.allocate = [this](std::size_t bytes, cudaStream_t) -> void* {
      if (fail_after >= 0 && allocations >= fail_after) {
        return nullptr;
      }
      void* p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess) {
        return nullptr;
      }
      ++allocations;
      return p;
    };
    a.deallocate = [this](void* p, std::size_t, cudaStream_t) {
      ++frees;
      cudaFree(p);
    };
    return a;
  }
};

TEST(DeviceBlockIndex, CallerAllocatorIsUsedAndFailuresLeaveTheIndexIntact) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(fresh_seed());
  CountingAllocator counting;
  {
    DeviceBlockIndexOptions options;
    options.initial_capacity = 64;
    options.allocator = counting.make();
    DeviceBlockIndex index(options);
    EXPECT_GE(counting.allocations, 3);  // counters + bucket headers + digests
    std::vector<BlockDigest> keys;
    for (int i = 0; i < 40; ++i) {
      keys.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_keys(keys);
    EXPECT_EQ(index.insert(0, 0, d_keys.get(), keys.size()), keys.size());
    // Now every allocation fails: a growing insert throws CudaError and changes nothing.
    counting.fail_after = counting.allocations;
    std::vector<BlockDigest> more;
    for (int i = 0; i < 500; ++i) {
      more.push_back(random_digest(rng));
    }
    DeviceArray<BlockDigest> d_more(more);
    const std::size_t capacity = index.capacity();
    EXPECT_THROW(index.insert(0, 0, d_more.get(), more.size()), CudaError);
    EXPECT_EQ(index.capacity(), capacity);
    EXPECT_EQ(index.size(), keys.size());
    std::vector<std::uint8_t> out = device_contains(index, 0, 0, keys);
    EXPECT_EQ(std::count(out.begin(), out.end(), 1), static_cast<long>(keys.size()));
    out = device_contains(index, 0, 0, more);
    EXPECT_EQ(std::count(out.begin(), out.end(), 1), 0);
    counting.fail_after = -1;
    EXPECT_EQ(index.insert(0, 0, d_more.get(), more.size()), more.size());
  }
  EXPECT_EQ(counting.allocations, counting.frees) << "device memory leaked";
  CountingAllocator failing;
  failing.fail_after = 0;
  DeviceBlockIndexOptions options;
  options.allocator = failing.make();
  EXPECT_THROW(DeviceBlockIndex{options}, CudaError);
  EXPECT_EQ(failing.frees, failing.allocations);
}

TEST(DeviceBlockIndex, HugeAllocationFailsWithCudaErrorNotACrash) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  DeviceBlockIndexOptions options;
  options.initial_capacity = std::size_t{1} << 45;  // 32 Ti slots: no device has that
  EXPECT_THROW(DeviceBlockIndex{options}, CudaError);
  DeviceBlockIndex fine;  // the device still works
  EXPECT_EQ(fine.size(), 0U);
}

}  // namespace
}  // namespace prefixhit
