// The windows the shared finders ask a probe for: a cursor's first window follows the finder's
// hint, and on a store that holds every key, a sliding-window or Mamba scan is answered by its
// first window (it asks for the blocks it reads, not a fixed 8 and then 16 more), while the
// lookup still equals the one a key-at-a-time probe gives. Fresh random configurations of every
// shape on every run.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "common/random_cases.hpp"
#include "host/probes.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/existence_cursor.hpp"
#include "prefixhit/detail/finders.hpp"

namespace prefixhit {
namespace {

using testing::cases::describe;
using testing::cases::fresh_seed;
using testing::cases::kNumShapes;
using testing::cases::random_config;
using testing::cases::random_request;
using testing::cases::Request;
using testing::cases::Rng;
using testing::cases::Shape;

using WindowCall = std::array<std::int64_t, 4>;  // sg, first, step, count

/// Answers "present" for every key and records the windows it is asked for.
template <int First, int Max>
struct FullStoreProbe {
  static constexpr int kFirstWindow = First;
  static constexpr int kMaxWindow = Max;
  std::vector<WindowCall>* calls;

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    calls->push_back({sg, first, step, count});
    return detail::low_bits(count);
  }
};

TEST(FinderWindows, FirstWindowHintSizesTheFirstRefillAndLaterOnesDouble) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t hint = rng.uniform(-5, 134);  // below 1 and above 64 too
    const std::int64_t limit = rng.uniform(1, 600);
    std::vector<WindowCall> calls;
    const FullStoreProbe<8, 64> probe{&calls};
    detail::ExistenceCursor<FullStoreProbe<8, 64>> cursor(probe, 0, 0, 1, limit, hint);
    ASSERT_EQ(cursor.first_absent(0, limit), limit);
    std::int64_t len = hint < 1 ? 1 : hint > 64 ? 64 : hint;
    std::int64_t next = 0;
    for (const WindowCall& call : calls) {
      SCOPED_TRACE("hint " + std::to_string(hint) + ", limit " + std::to_string(limit));
      EXPECT_EQ(call[1], next);
      EXPECT_EQ(call[3], std::min(len, limit - next));
      next += call[3];
      len = std::min<std::int64_t>(len * 2, 64);
    }
    EXPECT_EQ(next, limit);
  }
  // A probe that answers one key at a time keeps doing so, whatever the hint.
  std::vector<WindowCall> calls;
  const FullStoreProbe<1, 1> one{&calls};
  detail::ExistenceCursor<FullStoreProbe<1, 1>> cursor(one, 0, 0, 1, 5, 40);
  EXPECT_EQ(cursor.first_absent(0, 5), 5);
  EXPECT_EQ(calls.size(), 5U);
}

TEST(FinderWindows, UnalignedTopBlocksAreTheBlocksAScanPassesOver) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const std::int64_t sizes[] = {1, 2, 3, 4, 8, 12, 16, 48, 64, 256, 1024};
  for (int trial = 0; trial < 20000; ++trial) {
    const std::int64_t b = sizes[rng.uniform(0, 10)];
    const std::int64_t a = sizes[rng.uniform(0, 10)];
    const std::int64_t total = rng.uniform(1, 300);
    const std::int64_t edge_offset = rng.uniform(0, 1);
    // The definition: walk down from block total-1 while no streak may start there.
    std::int64_t passed = 0;
    while (passed < total && passed < 64 &&
           detail::floor_mod((total - 1 - passed + edge_offset) * b, a) != 0) {
      ++passed;
    }
    ASSERT_EQ(detail::unaligned_top_blocks(total, b, a, edge_offset), passed)
        << "total " << total << ", b " << b << ", a " << a << ", edge offset " << edge_offset;
  }
}

TEST(FinderWindows, FullStoreWindowScansTakeOneWindowAndMatchKeyAtATimeLookups) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  int scans_checked = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const auto shape = static_cast<Shape>(trial % kNumShapes);
    const Config config = random_config(rng, shape);
    const Coordinator coordinator(config);
    const Request req = random_request(rng, coordinator);
    const detail::LookupPlan& plan = coordinator.plan();
    const auto n = static_cast<std::int64_t>(req.hashes.size());
    SCOPED_TRACE(describe(config, shape, req));

    std::vector<WindowCall> calls;
    std::vector<WindowCall> one_key_calls;
    GroupHit hits[kMaxGroups + 1];
    GroupHit one_key_hits[kMaxGroups + 1];
    std::int64_t len = -1;
    std::int64_t one_key_len = -1;
    const ErrorKind err = detail::find_longest_cache_hit(plan, n, req.max_length, req.apply_eagle,
                                                         FullStoreProbe<8, 64>{&calls}, hits, len);
    const ErrorKind one_key_err = detail::find_longest_cache_hit(
        plan, n, req.max_length, req.apply_eagle, FullStoreProbe<1, 1>{&one_key_calls},
        one_key_hits, one_key_len);
    ASSERT_EQ(err, one_key_err);
    ASSERT_EQ(len, one_key_len);
    for (int k = 0; k < plan.num_spec_groups; ++k) {
      ASSERT_EQ(hits[k].num_blocks, one_key_hits[k].num_blocks) << "spec group " << k;
      ASSERT_EQ(hits[k].num_placeholders, one_key_hits[k].num_placeholders) << "spec group " << k;
    }
    // Each window scan on its own (any bound the fixed point may pass it, with and without the
    // EAGLE drop): if its reads fit one window (the unaligned blocks above a streak's first
    // possible start, then the window's blocks and the EAGLE block), it asks for one window.
    for (int k = 0; k < plan.num_spec_groups; ++k) {
      const detail::SpecGroupPlan& spec = plan.spec_groups[k];
      const bool window_scan =
          spec.finder == FinderKind::sliding_window || spec.finder == FinderKind::mamba;
      if (!window_scan || plan.alignment < spec.block_size) {
        continue;  // full attention walks on; a < b Mamba reads fine-grained hashes
      }
      const std::int64_t reads = plan.alignment / spec.block_size - 1 +
                                 (spec.finder == FinderKind::mamba
                                      ? 1
                                      : detail::ceil_div(spec.window - 1, spec.block_size) + 1);
      const std::int64_t bound = rng.uniform(0, n * plan.hash_block_size);
      const bool drop = rng.chance(0.5);
      std::vector<WindowCall> scan_calls;
      GroupHit hit{};
      std::int64_t found = 0;
      const ErrorKind scan_err = detail::run_finder(plan, k, n, bound, drop,
                                                    FullStoreProbe<8, 64>{&scan_calls}, hit, found);
      if (scan_err == ErrorKind::ok && reads <= 64) {
        EXPECT_LE(scan_calls.size(), 1U)
            << "spec group " << k << ", bound " << bound << (drop ? ", drop" : "");
        ++scans_checked;
      }
    }
  }
  EXPECT_GT(scans_checked, 500);  // the shapes do draw window and Mamba groups
}

}  // namespace
}  // namespace prefixhit
