// The window path of a cached BlockIndex (View::probe, lookup_window): it runs a window's keys
// through three stages (hash, tag match, compare) interleaved a few keys apart, with a prologue
// and a drain. Every window length from 1 to 64, in both directions and several strides, must
// answer each key exactly as a plain set does, over a crowded table with full buckets, every run
// on fresh random keys.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/existence.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

TEST(ProbeWindow, EveryWindowLengthAnswersEachKeyLikeASet) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  BlockIndexOptions options;
  options.initial_capacity = 64;  // small and crowded: full buckets and long probe sequences
  options.max_load_factor = 0.95;
  BlockIndex index(options);
  KeySet set;
  const auto hashes = random_hashes(rng, 600);
  for (const BlockDigest& d : hashes) {
    if (rng() % 3 != 0) {
      const int g = static_cast<int>(rng() % 2);
      index.insert(0, g, span<const BlockDigest>(&d, 1));
      set.insert(g, d);
    }
    if (rng() % 4 == 0) {  // the same digest in another namespace must not answer
      index.insert(1, 0, span<const BlockDigest>(&d, 1));
    }
  }
  const BlockIndex::View view = index.view(0);
  const auto n = static_cast<std::int64_t>(hashes.size());
  for (int count = 1; count <= 64; ++count) {
    for (const std::int64_t step : {1, -1, 3, -2}) {
      for (int g = 0; g < 2; ++g) {
        const std::int64_t reach = (count - 1) * (step < 0 ? -step : step);
        const std::int64_t lo = step < 0 ? reach : 0;
        const std::int64_t first =
            lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n - reach));
        const std::uint64_t bits = view.probe(g, hashes.data(), first, step, count);
        ASSERT_EQ(bits, set.probe(g, hashes.data(), first, step, count))
            << count << " keys, step " << step << ", group " << g;
        // No bit past the window, and each key alone answers as it did in the window.
        if (count < 64) {
          ASSERT_EQ(bits >> count, 0U) << count << " keys";
        }
        const int k = static_cast<int>(rng() % static_cast<std::uint64_t>(count));
        ASSERT_EQ((bits >> k) & 1U, view.probe(g, hashes.data(), first + k * step, 1, 1))
            << count << " keys, key " << k;
      }
    }
  }
}

}  // namespace
}  // namespace prefixhit
