// Random residencies for router scoring, shared by the CPU router test (tests/cpu/router_test.cpp)
// and the GPU one (tests/gpu/router_score_test.cu): per-worker holdings derived from a common
// base (identical, empty, a prefix, independent, or a few keys flipped), with holes at window
// boundaries and raw hashes for the fine-grained probes. C++17, so nvcc compiles it too.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/types.hpp"
#include "tests/cpu/test_support.hpp"

namespace prefixhit::testing::router {

/// (group id, hash index) pairs a worker holds for one request.
using Holdings = std::set<std::pair<int, std::size_t>>;

/// Blocks of each group with per-group density and holes at window boundaries, plus raw hashes
/// for fine-grained probes (the shape of testing::random_store).
inline Holdings random_holdings(std::mt19937_64& rng, const Config& config, std::size_t n) {
  Holdings out;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (std::size_t g = 0; g < config.groups.size(); ++g) {
    const auto s = static_cast<std::size_t>(config.groups[g].block_size / config.hash_block_size);
    const double density = std::vector<double>{0.0, 0.5, 0.9, 1.0, 1.0}[rng() % 5];
    const std::size_t hole_every = 1 + rng() % 8;
    for (std::size_t j = 0; j + 1 <= n / s; ++j) {
      const bool boundary_hole = rng() % 4 == 0 && (j + 1) % hole_every == 0;
      if (unit(rng) < density && !boundary_hole) {
        out.emplace(static_cast<int>(g), (j + 1) * s - 1);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (unit(rng) < 0.2) {
        out.emplace(static_cast<int>(g), i);
      }
    }
  }
  return out;
}

/// A worker's holdings derived from a base: identical, empty, a prefix, or the base with a few
/// keys flipped (so that workers share most keys and differ at a few, often at boundaries).
inline Holdings derive(std::mt19937_64& rng, const Holdings& base, const Config& config,
                       std::size_t n) {
  switch (rng() % 6) {
    case 0:
      return base;
    case 1:
      return {};
    case 2: {
      Holdings out;
      const std::size_t cut = n == 0 ? 0 : rng() % (n + 1);
      for (const auto& p : base) {
        if (p.second < cut) {
          out.insert(p);
        }
      }
      return out;
    }
    case 3:
      return random_holdings(rng, config, n);
    default: {
      Holdings out = base;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips && n > 0 && !config.groups.empty(); ++f) {
        const auto p = std::make_pair(static_cast<int>(rng() % config.groups.size()), rng() % n);
        if (out.count(p) != 0) {
          out.erase(p);
        } else {
          out.insert(p);
        }
      }
      return out;
    }
  }
}

struct Request {
  std::vector<BlockDigest> hashes;
  std::int64_t max_length = 0;
  bool eagle = true;
};

/// A whole random case: requests, a residency over `workers` workers and `tiers` tiers, and
/// each worker's keys as its own store (every tier, and tier 0 only), for the W-lookup reference.
struct RouterCase {
  int workers = 1;
  int tiers = 1;
  std::vector<Request> requests;
  std::unique_ptr<ResidencyIndex> residency;
  std::vector<KeySet> stores;  ///< what tier_mask ~0 sees
  std::vector<KeySet> tier0;   ///< what tier_mask 1 sees
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> max_lengths;
  std::vector<std::uint8_t> eagle;

  LookupBatch batch() const { return LookupBatch{digests, offsets, max_lengths, eagle}; }
};

/// Requests of up to `max_hashes` hashes of the coordinator's digest width; with `bad_digests`,
/// now and then one hash with a nonzero byte past a narrow width (held by nobody).
inline RouterCase random_router_case(std::mt19937_64& rng, const Coordinator& coordinator,
                                     int workers, int tiers, std::size_t max_hashes,
                                     bool bad_digests = false) {
  const Config& config = coordinator.config();
  const std::size_t width = config.digest_size;
  RouterCase out;
  out.workers = workers;
  out.tiers = tiers;
  out.residency = std::make_unique<ResidencyIndex>(ResidencyOptions{workers, tiers, 64, 0});
  for (int w = 0; w < workers; ++w) {
    out.stores.emplace_back(width);
    out.tier0.emplace_back(width);
  }
  out.requests.resize(1 + rng() % 3);
  for (Request& req : out.requests) {
    req.hashes = random_hashes(rng, rng() % (max_hashes + 1));
    for (BlockDigest& d : req.hashes) {
      std::fill(d.bytes.begin() + static_cast<std::ptrdiff_t>(width), d.bytes.end(), 0);
    }
    const std::size_t n = req.hashes.size();
    std::size_t bad = n;
    if (bad_digests && width < BlockDigest::kSize && n > 0 && rng() % 4 == 0) {
      bad = rng() % n;
      req.hashes[bad].bytes[BlockDigest::kSize - 1] = 1;
    }
    req.max_length = random_max_length(rng, static_cast<std::int64_t>(n), config.hash_block_size);
    req.eagle = rng() % 4 != 0;
    const Holdings base = random_holdings(rng, config, n);
    for (int w = 0; w < workers; ++w) {
      for (const auto& [gid, idx] : derive(rng, base, config, n)) {
        if (idx == bad) {
          continue;
        }
        const int tier = static_cast<int>(rng() % static_cast<std::uint64_t>(tiers));
        out.residency->insert(static_cast<WorkerId>(w), 0, gid, {&req.hashes[idx], 1}, width, tier);
        out.stores[static_cast<std::size_t>(w)].insert(gid, req.hashes[idx]);
        if (tier == 0) {
          out.tier0[static_cast<std::size_t>(w)].insert(gid, req.hashes[idx]);
        }
      }
    }
  }
  // Noise: another namespace must not leak in.
  if (!out.requests[0].hashes.empty()) {
    const BlockDigest& key = out.requests[0].hashes[0];
    if (width == BlockDigest::kSize || key.bytes[BlockDigest::kSize - 1] == 0) {
      out.residency->insert(0, 7, 0, {&key, 1}, width);
    }
  }
  for (const Request& req : out.requests) {
    out.digests.insert(out.digests.end(), req.hashes.begin(), req.hashes.end());
    out.offsets.push_back(static_cast<std::int64_t>(out.digests.size()));
    out.max_lengths.push_back(req.max_length);
    out.eagle.push_back(req.eagle ? 1 : 0);
  }
  return out;
}

}  // namespace prefixhit::testing::router
