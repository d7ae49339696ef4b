// Random configurations, prompts and stores for property tests. Every run draws a fresh seed
// (std::random_device) and the tests print it, so a failure can be replayed with
// PREFIXHIT_TEST_SEED=<seed>.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::testing {

/// The seed of this run: PREFIXHIT_TEST_SEED if set, else fresh from std::random_device.
inline std::uint64_t test_seed() {
  if (const char* env = std::getenv("PREFIXHIT_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

inline std::string seed_note(std::uint64_t seed) {
  return "replay with PREFIXHIT_TEST_SEED=" + std::to_string(seed);
}

inline BlockDigest random_digest(std::mt19937_64& rng) {
  BlockDigest d;
  for (std::size_t w = 0; w < 4; ++w) {
    const std::uint64_t word = rng();
    for (std::size_t b = 0; b < 8; ++b) {
      d.bytes[8 * w + b] = static_cast<std::uint8_t>(word >> (8 * b));
    }
  }
  return d;
}

inline std::vector<BlockDigest> random_hashes(std::mt19937_64& rng, std::size_t n) {
  std::vector<BlockDigest> out(n);
  for (BlockDigest& d : out) {
    d = random_digest(rng);
  }
  return out;
}

/// A random valid configuration covering every kind and the shapes of the vectors: merged
/// groups, EAGLE groups, several window specs, two full-attention specs, partial hits.
inline Config random_config(std::mt19937_64& rng) {
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  Config c;
  const std::int64_t hs[] = {4, 8, 16};
  c.hash_block_size = hs[pick(0, 2)];
  const std::int64_t h = c.hash_block_size;
  c.use_eagle = pick(0, 1) == 1;
  const std::int64_t r = pick(0, 3);
  if (r == 1) {
    c.retention_interval = 0;
  } else if (r >= 2) {
    c.retention_interval = h * (std::int64_t{1} << pick(0, 5));
  }
  const std::int64_t n_groups = pick(1, 5);
  std::int64_t lcm = h;
  for (std::int64_t g = 0; g < n_groups; ++g) {
    const std::int64_t b = h * (std::int64_t{1} << pick(0, 3));
    const bool eagle = pick(0, 4) == 0;
    GroupSpec spec;
    switch (pick(0, 9)) {
      case 0:
      case 1:
        spec = GroupSpec::full_attention(b, eagle);
        break;
      case 2:
        spec = GroupSpec::mla_attention(b, eagle);
        break;
      case 3:
      case 4:
      case 5:
        spec = GroupSpec::sliding_window_attention(b, pick(1, 4 * b), eagle);
        break;
      case 6:
        spec = GroupSpec::sliding_window_mla(b, pick(1, 4 * b), eagle);
        break;
      case 7:
        spec = GroupSpec::chunked_local(b, b * pick(1, 4), eagle && pick(0, 1) == 0);
        break;
      default:
        spec = GroupSpec::mamba(b, static_cast<MambaCacheMode>(pick(0, 2)), eagle);
        break;
    }
    // Sometimes repeat the previous spec so that groups merge.
    if (g > 0 && pick(0, 3) == 0) {
      spec = c.groups.back();
      spec.eagle = pick(0, 2) == 0;
    }
    lcm = std::lcm(lcm, spec.block_size);
    c.groups.push_back(spec);
  }
  c.scheduler_block_size = lcm * (pick(0, 3) == 0 ? 2 : 1);
  return c;
}

/// A random store for one request: each group's block keys present with a per-group density,
/// holes placed at window boundaries now and then, some raw (non-block-end) hashes for the
/// fine-grained probes, and noise in groups outside the configuration.
inline KeySet random_store(std::mt19937_64& rng, const Config& config,
                           const std::vector<BlockDigest>& hashes) {
  KeySet store;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t g = 0; g < config.groups.size(); ++g) {
    const auto s = static_cast<std::size_t>(config.groups[g].block_size / config.hash_block_size);
    const double density = std::vector<double>{0.0, 0.5, 0.9, 1.0, 1.0}[rng() % 5];
    const std::size_t hole_every = 1 + rng() % 8;
    for (std::size_t j = 0; j + 1 <= hashes.size() / s; ++j) {
      const bool boundary_hole = rng() % 4 == 0 && (j + 1) % hole_every == 0;
      if (unit(rng) < density && !boundary_hole) {
        store.insert(static_cast<int>(g), hashes[(j + 1) * s - 1]);
      }
    }
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      if (unit(rng) < 0.2) {
        store.insert(static_cast<int>(g), hashes[i]);
      }
    }
  }
  for (int noise = 0; noise < 4 && !hashes.empty(); ++noise) {
    store.insert(static_cast<int>(config.groups.size()) + noise, hashes[rng() % hashes.size()]);
  }
  return store;
}

/// A max_length in [0, (n+1)*H), biased toward the interesting top end and unaligned values.
inline std::int64_t random_max_length(std::mt19937_64& rng, std::int64_t n, std::int64_t h) {
  const std::int64_t limit = (n + 1) * h;  // exclusive
  if (rng() % 3 == 0) {
    return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(limit));
  }
  return std::max<std::int64_t>(0, limit - 1 - static_cast<std::int64_t>(rng() % (2 * h + 1)));
}

/// Two lookups agree: the hit length and every group's blocks and placeholders.
inline void expect_same(const LookupResult& a, const LookupResult& b, const std::string& what) {
  EXPECT_EQ(a.hit_length, b.hit_length) << what;
  ASSERT_EQ(a.groups.size(), b.groups.size()) << what;
  for (std::size_t g = 0; g < a.groups.size(); ++g) {
    EXPECT_EQ(a.groups[g].num_blocks, b.groups[g].num_blocks) << what << " group " << g;
    EXPECT_EQ(a.groups[g].num_placeholders, b.groups[g].num_placeholders) << what << " group " << g;
  }
}

/// Copies a request's KeySet into a block index under `ns`: every (group, hash) pair it holds.
inline void copy_store(const KeySet& store, const Config& config,
                       const std::vector<BlockDigest>& hashes, BlockIndex& index, Namespace ns) {
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

/// The width-w digest of a 32-byte one: its first w bytes (random digests stay distinct).
inline BlockDigest narrow(const BlockDigest& d, std::size_t width) {
  BlockDigest out;
  std::memcpy(out.bytes.data(), d.bytes.data(), width);
  return out;
}

inline std::vector<BlockDigest> narrow(const std::vector<BlockDigest>& ds, std::size_t width) {
  std::vector<BlockDigest> out;
  out.reserve(ds.size());
  for (const BlockDigest& d : ds) {
    out.push_back(narrow(d, width));
  }
  return out;
}

}  // namespace prefixhit::testing
