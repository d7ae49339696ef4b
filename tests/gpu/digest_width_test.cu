// Digest widths on the GPU (issue 10): DeviceBlockIndex keys of 8, 16 and 32 bytes are distinct
// keys, narrow keys with a nonzero tail are refused, and the batch lookup at widths 8 and 16
// answers exactly as the CPU engine's 32-byte run of the same logical store. Fresh random seed
// per run (printed; PREFIXHIT_TEST_SEED replays it). Every test skips without a usable GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/test_support.hpp"
#include "gpu/gpu_test_util.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit {
namespace {

using testing::narrow;
using testing::random_config;
using testing::random_hashes;
using testing::random_max_length;
using testing::random_store;
using testing::seed_note;
using testing::test_seed;

/// Device memory holding a copy of `host`, freed on scope exit.
template <class T>
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<T>& host) : n_(host.size()) {
    if (n_ != 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, n_ * sizeof(T)), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  explicit DeviceCopy(std::size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, n * sizeof(T)), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(ptr_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  T* get() const { return static_cast<T*>(ptr_); }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t n_ = 0;
};

std::vector<std::uint8_t> contains_at(const DeviceBlockIndex& index, Namespace ns, int group,
                                      const std::vector<BlockDigest>& keys, std::size_t width) {
  const DeviceCopy<BlockDigest> d(keys);
  DeviceCopy<std::uint8_t> out(keys.size());
  index.contains(ns, group, d.get(), keys.size(), out.get(), nullptr, width);
  return out.to_host();
}

TEST(GpuDigestWidth, SameBytesAtDifferentWidthsAreDifferentKeys) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const std::vector<BlockDigest> keys8 = narrow(random_hashes(rng, 5000), 8);
  const DeviceCopy<BlockDigest> d8(keys8);
  DeviceBlockIndex index(DeviceBlockIndexOptions{1024});  // small: inserts grow the table
  EXPECT_EQ(index.insert(1, 2, d8.get(), keys8.size(), nullptr, 8), keys8.size());
  // The same bytes are valid 16- and 32-byte digests too, and distinct keys there.
  EXPECT_EQ(index.insert(1, 2, d8.get(), keys8.size(), nullptr, 16), keys8.size());
  EXPECT_EQ(index.insert(1, 2, d8.get(), keys8.size(), nullptr, 32), keys8.size());
  EXPECT_EQ(index.insert(1, 2, d8.get(), keys8.size(), nullptr, 8), 0U);
  EXPECT_EQ(index.size(), 3 * keys8.size());
  EXPECT_EQ(index.erase(1, 2, d8.get(), keys8.size(), nullptr, 16), keys8.size());
  const std::vector<std::uint8_t> all(keys8.size(), 1);
  const std::vector<std::uint8_t> none(keys8.size(), 0);
  EXPECT_EQ(contains_at(index, 1, 2, keys8, 8), all);
  EXPECT_EQ(contains_at(index, 1, 2, keys8, 16), none);
  EXPECT_EQ(contains_at(index, 1, 2, keys8, 32), all);
  EXPECT_EQ(contains_at(index, 0, 2, keys8, 8), none);
  // The async twins read only the first digest_size bytes of a key.
  const std::vector<BlockDigest> dirty = [&] {
    std::vector<BlockDigest> out = keys8;
    for (BlockDigest& d : out) {
      d.bytes[20] = 0x5A;
    }
    return out;
  }();
  const DeviceCopy<BlockDigest> d_dirty(dirty);
  DeviceCopy<std::uint8_t> out(dirty.size());
  index.contains_async(1, 2, d_dirty.get(), dirty.size(), out.get(), nullptr, 8);
  PREFIXHIT_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(out.to_host(), all);
}

TEST(GpuDigestWidth, NarrowKeysWithNonzeroTailsAreRefused) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  std::vector<BlockDigest> keys = narrow(random_hashes(rng, 100), 16);
  keys[37].bytes[16] = 1;
  const DeviceCopy<BlockDigest> d(keys);
  DeviceBlockIndex index;
  try {
    index.insert(0, 0, d.get(), keys.size(), nullptr, 16);
    FAIL() << "a 16-byte key with a nonzero byte 16 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("keys[37] is not a 16-byte digest"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(index.size(), 0U);
  EXPECT_THROW(index.insert(0, 0, d.get(), keys.size(), nullptr, 12), InvalidArgument);
  EXPECT_THROW(index.erase(0, 0, d.get(), keys.size(), nullptr, 8), InvalidArgument);
  DeviceCopy<std::uint8_t> out(keys.size());
  EXPECT_THROW(index.contains(0, 0, d.get(), keys.size(), out.get(), nullptr, 16), InvalidArgument);
  EXPECT_EQ(index.insert(0, 0, d.get(), keys.size(), nullptr, 32), keys.size());
}

// Random configurations: the batch lookup over the resident device index at widths 8 and 16
// equals the CPU engine's answer for the 32-byte run of the same store.
TEST(GpuDigestWidth, BatchLookupAtEveryWidthMatchesTheThirtyTwoByteRun) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 24; ++iter) {
    const Config config32 = random_config(rng);
    const Coordinator c32(config32);
    // A batch of 8 requests, each with its own prompt and store content.
    constexpr int kRequests = 8;
    std::vector<BlockDigest> digests32;
    std::vector<std::int64_t> offsets = {0};
    std::vector<std::int64_t> max_lengths;
    KeySet store32;
    std::vector<std::pair<int, std::size_t>> pairs;  // (group, index into digests32)
    for (int r = 0; r < kRequests; ++r) {
      const auto n = static_cast<std::size_t>(rng() % 48);
      const std::vector<BlockDigest> hashes = random_hashes(rng, n);
      const KeySet request_store = random_store(rng, config32, hashes);
      for (int g = 0; g < c32.num_groups(); ++g) {
        for (std::size_t i = 0; i < n; ++i) {
          if (request_store.contains(g, hashes[i])) {
            store32.insert(g, hashes[i]);
            pairs.emplace_back(g, digests32.size() + i);
          }
        }
      }
      digests32.insert(digests32.end(), hashes.begin(), hashes.end());
      offsets.push_back(static_cast<std::int64_t>(digests32.size()));
      max_lengths.push_back(
          random_max_length(rng, static_cast<std::int64_t>(n), config32.hash_block_size));
    }
    LookupBatch batch32;
    batch32.digests = digests32;
    batch32.offsets = offsets;
    batch32.max_lengths = max_lengths;
    std::optional<BatchLookupResult> want;
    ErrorKind want_error = ErrorKind::ok;
    try {
      want = c32.find_longest_cache_hits(batch32, store32);
    } catch (const Error& e) {
      want_error = e.kind();
    }
    for (std::size_t w : {8, 16}) {
      const std::string where = "iteration " + std::to_string(iter) + " width " + std::to_string(w);
      Config config = config32;
      config.digest_size = w;
      const Coordinator c(config);
      const gpu::BatchLookupEngine engine(c);
      const std::vector<BlockDigest> digests = narrow(digests32, w);
      DeviceBlockIndex index;
      std::vector<std::vector<BlockDigest>> by_group(static_cast<std::size_t>(c.num_groups()));
      for (const auto& [g, i] : pairs) {
        by_group[static_cast<std::size_t>(g)].push_back(digests[i]);
      }
      for (int g = 0; g < c.num_groups(); ++g) {
        gpu::insert_host_keys(index, 5, g, by_group[static_cast<std::size_t>(g)], nullptr, w);
      }
      // Every digest at the wider widths, in every group: found only if widths were ignored.
      for (int g = 0; g < c.num_groups(); ++g) {
        gpu::insert_host_keys(index, 5, g, digests, nullptr, 32);
        if (w == 8) {
          gpu::insert_host_keys(index, 5, g, digests, nullptr, 16);
        }
      }
      LookupBatch batch = batch32;
      batch.digests = digests;
      try {
        const BatchLookupResult got = engine.find_longest_cache_hits(batch, index, 5);
        ASSERT_EQ(want_error, ErrorKind::ok) << where;
        EXPECT_EQ(got.hit_lengths, want->hit_lengths) << where;
        EXPECT_EQ(got.num_blocks, want->num_blocks) << where;
        EXPECT_EQ(got.num_placeholders, want->num_placeholders) << where;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), want_error) << where << ": " << e.what();
      }
    }
  }
}

TEST(GpuDigestWidth, BatchHashesWiderThanTheCoordinatorAreRefused) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 16;
  config.groups = {GroupSpec::full_attention(16)};
  config.digest_size = 8;
  const Coordinator c(config);
  const gpu::BatchLookupEngine engine(c);
  std::mt19937_64 rng(test_seed());
  std::vector<BlockDigest> digests = narrow(random_hashes(rng, 4), 8);
  digests[2].bytes[9] = 1;
  const std::vector<std::int64_t> offsets = {0, 4};
  const std::vector<std::int64_t> max_lengths = {64};
  LookupBatch batch;
  batch.digests = digests;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  DeviceBlockIndex index;
  try {
    engine.find_longest_cache_hits(batch, index, 0);
    FAIL() << "a batch digest wider than 8 bytes was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("batch digests[2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace prefixhit
