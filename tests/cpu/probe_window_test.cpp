// The window path of a cached BlockIndex (View::probe, lookup_window): it runs a window's keys
// through three stages (hash, tag match, compare) interleaved a few keys apart (4 or 8, by the
// table's size), with a prologue and a drain. Every window length from 1 to 64, in both
// directions and several strides, must answer each key exactly as a plain set does, over crowded
// tables with full buckets of both sizes, every run on fresh random keys.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "host/block_index_lookups.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/existence.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_hashes;
using testing::seed_note;
using testing::test_seed;

/// Every window length, both directions and several strides, over `index` (empty) once 600
/// probed digests are inserted partly (and some in another namespace), and random keys that are
/// never probed fill it to `crowd_load` of its capacity (to crowd a large table; 0: none).
void check_every_window_length(BlockIndex& index, double crowd_load, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
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
  const auto crowd_keys =
      static_cast<std::size_t>(static_cast<double>(index.capacity()) * crowd_load);
  if (crowd_keys > index.size()) {
    index.insert(0, 0, random_hashes(rng, crowd_keys - index.size()));
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

TEST(ProbeWindow, EveryWindowLengthAnswersEachKeyLikeASet) {
  // A small, crowded table: full buckets and long probe sequences; its windows run their stages
  // close together (TableLookups::kShortLagMaxBytes).
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  BlockIndexOptions options;
  options.initial_capacity = 64;
  options.max_load_factor = 0.95;
  BlockIndex index(options);
  check_every_window_length(index, 0, seed);
}

TEST(ProbeWindow, EveryWindowLengthAnswersEachKeyLikeASetOnALargeTable) {
  // A table over kShortLagMaxBytes, crowded the same way: its windows run their stages farther
  // apart, a second instantiation of the same pipeline.
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  BlockIndexOptions options;
  options.initial_capacity = 2 * cpu_index::TableLookups::kShortLagMaxBytes / 37;
  options.max_load_factor = 0.95;
  BlockIndex index(options);
  ASSERT_GT(detail::table_bytes_of_slots(index.capacity()),
            cpu_index::TableLookups::kShortLagMaxBytes);
  check_every_window_length(index, 0.9, seed);
}

}  // namespace
}  // namespace prefixhit
