// ExistenceCursor::first_absent (the finders' run-at-a-time prefix scan) against the bit-at-a-time
// scan it replaces: the same answer and the same windows asked of the probe, in the same order,
// on fresh random existence patterns every run, with bits set past each window's end (which
// neither scan may read) and with probes that cap their windows.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "prefixhit/detail/existence_cursor.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::seed_note;
using testing::test_seed;

using WindowCall = std::array<std::int64_t, 4>;  // sg, first, step, count

/// Answers from a fixed pattern over hash indices; records every window it is asked for. Bits
/// past `count` are random garbage: a scan that reads them is wrong.
struct RecordingProbe {
  static constexpr int kFirstWindow = 8;
  static constexpr int kMaxWindow = 64;

  const std::vector<bool>* present;  // by hash index
  std::vector<WindowCall>* calls;
  std::uint64_t garbage;

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    calls->push_back({sg, first, step, count});
    std::uint64_t bits = count >= 64 ? 0 : garbage & ~((std::uint64_t{1} << count) - 1);
    for (int k = 0; k < count; ++k) {
      if ((*present)[static_cast<std::size_t>(first + k * step)]) {
        bits |= std::uint64_t{1} << k;
      }
    }
    return bits;
  }
};

/// The same, with windows capped by position (the optional window_limit of a Probe).
struct CappedProbe : RecordingProbe {
  int cap;
  int window_limit(int /*sg*/, std::int64_t /*first*/, std::int64_t /*step*/) const { return cap; }
};

template <class Probe>
void check_pattern(const Probe& probe_a, const Probe& probe_b, std::int64_t base, std::int64_t step,
                   std::int64_t limit, std::int64_t start, std::int64_t end) {
  detail::ExistenceCursor<Probe> bitwise(probe_a, 1, base, step, limit);
  std::int64_t k = start;
  while (k < end && bitwise.at(k)) {
    ++k;
  }
  detail::ExistenceCursor<Probe> runs(probe_b, 1, base, step, limit);
  EXPECT_EQ(runs.first_absent(start, end), k);
  EXPECT_EQ(*probe_b.calls, *probe_a.calls);
}

TEST(ExistenceCursor, FirstAbsentScansAsTheBitLoopDoes) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto limit = static_cast<std::int64_t>(1 + rng() % 400);
    const std::int64_t step = trial % 3 == 0 ? -1 : static_cast<std::int64_t>(1 + rng() % 5);
    const std::int64_t span = (limit - 1) * (step < 0 ? -step : step) + 1;
    const std::int64_t base = step < 0 ? span - 1 : 0;
    // Mostly present with a few holes (the full-attention case), or dense holes.
    const std::uint64_t hole_per_mille = trial % 2 == 0 ? 2 + rng() % 20 : 100 + rng() % 800;
    std::vector<bool> present(static_cast<std::size_t>(span));
    for (std::size_t i = 0; i < present.size(); ++i) {
      present[i] = rng() % 1000 >= hole_per_mille;
    }
    const auto start = static_cast<std::int64_t>(trial % 4 == 0 ? rng() % limit : 0);
    const std::int64_t end = start + static_cast<std::int64_t>(rng() % (limit - start + 1));
    const std::uint64_t garbage = rng();
    std::vector<WindowCall> calls_a;
    std::vector<WindowCall> calls_b;
    if (trial % 5 == 0) {
      const int cap = static_cast<int>(1 + rng() % 70);
      const CappedProbe a{{&present, &calls_a, garbage}, cap};
      const CappedProbe b{{&present, &calls_b, garbage}, cap};
      check_pattern(a, b, base, step, limit, start, end);
    } else {
      const RecordingProbe a{&present, &calls_a, garbage};
      const RecordingProbe b{&present, &calls_b, garbage};
      check_pattern(a, b, base, step, limit, start, end);
    }
    if (::testing::Test::HasFailure()) {
      FAIL() << "trial " << trial << ": limit " << limit << " step " << step << " start " << start
             << " end " << end;
    }
  }
}

}  // namespace
}  // namespace prefixhit
