// The portable twin of the GPU warp probe (detail/warp_probe.hpp) against the CPU engine.
//
// The kernel runs detail::lookup_request over a WarpProbe; here the very same code runs on the
// host, where the probe answers its 32/64-key windows lane by lane instead of with a ballot. On
// fresh random configurations (every group kind and every configuration shape of the vectors),
// stores (full, empty, prefixes, random holes, holes at window boundaries, store-mask round
// trips, fine-grained raw hashes, junk entries) and unaligned max_lengths, every row it writes
// must equal Coordinator::find_longest_cache_hit (or carry the same error kind and zeros).
// Both existence sources are covered: a KeySet probed key by key, as the device index is, and
// the presence table a remote store's KeyPlan answers are scattered into.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/random_cases.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/warp_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::Config;
using prefixhit::Coordinator;
using prefixhit::ErrorKind;
using prefixhit::GroupKind;
using prefixhit::GroupSpec;
using prefixhit::KeySet;
using prefixhit::LookupResult;

using prefixhit::testing::cases::describe;
using prefixhit::testing::cases::fresh_seed;
using prefixhit::testing::cases::kNumShapes;
using prefixhit::testing::cases::random_config;
using prefixhit::testing::cases::random_digest;
using prefixhit::testing::cases::random_request;
using prefixhit::testing::cases::random_store;
using prefixhit::testing::cases::Request;
using prefixhit::testing::cases::Rng;
using prefixhit::testing::cases::Shape;
using prefixhit::testing::cases::shape_name;

// ---- the twin -------------------------------------------------------------------------------

/// The key-by-key source the device index gives a warp, over a KeySet; counts any index the
/// finders ask for outside the hash list (there must be none).
struct KeySetSource {
  const KeySet* store;
  const BlockDigest* hashes;
  std::int64_t n;
  int* out_of_range;

  bool contains(int group_id, std::int64_t index) const {
    if (index < 0 || index >= n) {
      ++*out_of_range;
      return false;
    }
    return store->contains(group_id, hashes[index]);
  }
  /// As the device index source, the probe hints each key first (has_prefetch): the hint must
  /// stay inside the request too, since the device turns it into a load.
  void prefetch(std::int64_t index) const {
    if (index < 0 || index >= n) {
      ++*out_of_range;
    }
  }
};
static_assert(prefixhit::detail::has_prefetch<KeySetSource>::value &&
                  !prefixhit::detail::has_prefetch<prefixhit::detail::PresenceTableSource>::value,
              "the twin covers both probe paths");

/// A batch's output arrays on the host, poisoned so that an unwritten entry shows.
struct Outputs {
  static constexpr std::int64_t kPoison = -0x5A5A5A5A5A5A5A5ALL;
  static constexpr ErrorKind kPoisonStatus = static_cast<ErrorKind>(0xEE);

  Outputs(std::size_t requests, int groups)
      : hit_lengths(requests, kPoison),
        num_blocks(requests * static_cast<std::size_t>(groups), kPoison),
        num_placeholders(requests * static_cast<std::size_t>(groups), kPoison),
        status(requests, kPoisonStatus) {}

  prefixhit::detail::RequestOutputs view() {
    return {hit_lengths.data(), num_blocks.data(), num_placeholders.data(), status.data()};
  }

  std::vector<std::int64_t> hit_lengths;
  std::vector<std::int64_t> num_blocks;
  std::vector<std::int64_t> num_placeholders;
  std::vector<ErrorKind> status;
};

/// The CPU engine's answer: a result, or the error kind it throws.
struct Expected {
  std::optional<LookupResult> result;
  ErrorKind error = ErrorKind::ok;
};

template <class Fn>
Expected expect_from(const Fn& fn) {
  Expected e;
  try {
    e.result = fn();
  } catch (const prefixhit::Error& err) {
    e.error = err.kind();
  }
  return e;
}

/// Row r of `out` against the CPU engine's answer.
::testing::AssertionResult row_matches(const Outputs& out, std::size_t r, int groups,
                                       const Expected& expected) {
  const auto g = static_cast<std::size_t>(groups);
  if (out.status[r] != expected.error) {
    return ::testing::AssertionFailure() << "status " << static_cast<int>(out.status[r]) << " ("
                                         << prefixhit::to_string(out.status[r]) << "), expected "
                                         << prefixhit::to_string(expected.error);
  }
  const std::int64_t want_hit = expected.result ? expected.result->hit_length : 0;
  if (out.hit_lengths[r] != want_hit) {
    return ::testing::AssertionFailure()
           << "hit_length " << out.hit_lengths[r] << ", expected " << want_hit;
  }
  for (std::size_t gid = 0; gid < g; ++gid) {
    const prefixhit::GroupHit want =
        expected.result ? expected.result->groups[gid] : prefixhit::GroupHit{};
    if (out.num_blocks[r * g + gid] != want.num_blocks ||
        out.num_placeholders[r * g + gid] != want.num_placeholders) {
      return ::testing::AssertionFailure()
             << "group " << gid << ": (" << out.num_blocks[r * g + gid] << " blocks, "
             << out.num_placeholders[r * g + gid] << " placeholders), expected (" << want.num_blocks
             << ", " << want.num_placeholders << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

template <int First, int Max, int Ahead>
using KeySetWarpProbe = prefixhit::detail::WarpProbe<KeySetSource, First, Max, Ahead>;
template <int First, int Max, int Ahead>
using TableWarpProbe =
    prefixhit::detail::WarpProbe<prefixhit::detail::PresenceTableSource, First, Max, Ahead>;

static_assert(
    std::is_same_v<
        prefixhit::detail::KernelWarpProbe<KeySetSource, prefixhit::detail::kIndexLookahead>,
        KeySetWarpProbe<32, 64, 0>> &&
        std::is_same_v<prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                                          prefixhit::detail::kPresenceLookahead>,
                       TableWarpProbe<32, 64, 3>>,
    "KernelWindowsMatchCpuEngine must test the kernels' probe configurations");

/// Runs `configs` random configurations through the twin with window sizes First/Max, and
/// KeyAhead / TableAhead lookahead windows for the key-by-key and the presence-table sources.
template <int First, int Max, int KeyAhead, int TableAhead>
void run_twin(int configs, int requests_per_config) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) +
               " (replay: PREFIXHIT_TEST_SEED=" + std::to_string(seed) + ")");
  Rng rng(seed);
  std::array<int, kNumShapes> shapes_seen{};
  std::array<int, 6> kinds_seen{};
  int errors_seen = 0;
  int partial_seen = 0;
  int failures = 0;
  for (int k = 0; k < configs && failures < 5; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, shape));
    } catch (const prefixhit::InvalidConfig&) {
      continue;  // the generator only builds valid block sizes; S-free rules may still reject
    }
    ++shapes_seen[static_cast<std::size_t>(shape)];
    for (const GroupSpec& spec : coordinator->config().groups) {
      ++kinds_seen[static_cast<std::size_t>(spec.kind)];
    }
    partial_seen += coordinator->enable_partial_hash_hits() ? 1 : 0;
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const int groups = plan.num_groups;
    Outputs keyset_out(static_cast<std::size_t>(requests_per_config), groups);
    Outputs table_out(static_cast<std::size_t>(requests_per_config), groups);
    for (int r = 0; r < requests_per_config && failures < 5; ++r) {
      const Request req = random_request(rng, *coordinator);
      const KeySet store = random_store(rng, *coordinator, req);
      const auto n = static_cast<std::int64_t>(req.hashes.size());
      const auto row = static_cast<std::size_t>(r);
      SCOPED_TRACE(describe(coordinator->config(), shape, req));

      // Source 1: key by key over the store, as the device index answers.
      const Expected want = expect_from([&] {
        return coordinator->find_longest_cache_hit(req.hashes, req.max_length, store,
                                                   req.apply_eagle);
      });
      errors_seen += want.error != ErrorKind::ok ? 1 : 0;
      int out_of_range = 0;
      const KeySetWarpProbe<First, Max, KeyAhead> probe{
          &plan, KeySetSource{&store, req.hashes.data(), n, &out_of_range}, n};
      prefixhit::detail::lookup_request(plan, n, req.max_length, req.apply_eagle, probe, r, 0, 1,
                                        keyset_out.view());
      EXPECT_EQ(out_of_range, 0) << "the finders asked for hash indices outside the request";
      failures += out_of_range == 0 ? 0 : 1;
      const auto keyset_ok = row_matches(keyset_out, row, groups, want);
      EXPECT_TRUE(keyset_ok) << "key-by-key source";

      // Source 2: the presence table from the request's KeyPlan answers.
      const prefixhit::KeyPlan key_plan = coordinator->key_plan(req.hashes, req.max_length);
      std::vector<std::uint8_t> answers(key_plan.size());
      for (std::size_t i = 0; i < key_plan.size(); ++i) {
        answers[i] = store.contains(key_plan.group_ids[i], key_plan.keys[i]) ? 1 : 0;
      }
      const prefixhit::PlanAnswers plan_answers(key_plan, answers, groups);
      const Expected want_plan = expect_from([&] {
        return coordinator->find_longest_cache_hit(req.hashes, req.max_length, plan_answers,
                                                   req.apply_eagle);
      });
      std::vector<std::uint8_t> table(static_cast<std::size_t>(groups * n) + 1, 0);
      prefixhit::gpu::scatter_plan_answers(key_plan, answers, groups, table.data());
      const TableWarpProbe<First, Max, TableAhead> table_probe{
          &plan, prefixhit::detail::PresenceTableSource{table.data(), n}, n};
      prefixhit::detail::lookup_request(plan, n, req.max_length, req.apply_eagle, table_probe, r, 0,
                                        1, table_out.view());
      const auto table_ok = row_matches(table_out, row, groups, want_plan);
      EXPECT_TRUE(table_ok) << "presence-table source";
      failures += (keyset_ok && table_ok) ? 0 : 1;
    }
  }
  // The generator must keep covering what this test claims to cover.
  for (int s = 0; s < kNumShapes; ++s) {
    EXPECT_GT(shapes_seen[static_cast<std::size_t>(s)], 0)
        << "no valid configuration of shape " << shape_name(static_cast<Shape>(s));
  }
  for (int kind = 0; kind < 6; ++kind) {
    EXPECT_GT(kinds_seen[static_cast<std::size_t>(kind)], 0)
        << "no group of kind " << prefixhit::to_string(static_cast<GroupKind>(kind));
  }
  EXPECT_GT(errors_seen, 0) << "no lookup error was exercised";
  EXPECT_GT(partial_seen, 0) << "no configuration with partial hash hits";
}

/// The kernels' configurations (KernelWarpProbe): 32-key first windows, then 64-key windows;
/// lookahead 0 for the device index, 3 for presence tables.
TEST(WarpTwin, KernelWindowsMatchCpuEngine) {
  run_twin<32, 64, prefixhit::detail::kIndexLookahead, prefixhit::detail::kPresenceLookahead>(420,
                                                                                              12);
}

TEST(WarpTwin, OneKeyPerLaneWindowsMatchCpuEngine) {
  run_twin<32, 32, 0, 1>(140, 12);
}

TEST(WarpTwin, SwappedLookaheadsMatchCpuEngine) {
  run_twin<32, 64, 3, 0>(140, 12);
}

TEST(WarpTwin, SmallFirstWindowsAndOtherLookaheadsMatchCpuEngine) {
  run_twin<8, 32, 7, 15>(70, 12);
  run_twin<16, 64, 1, 2>(70, 12);
}

TEST(WarpTwin, LoadMaskThroughAllOnesTableMatchesCpu) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int k = 0; k < 200; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, shape));
    } catch (const prefixhit::InvalidConfig&) {
      continue;
    }
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const Request req = random_request(rng, *coordinator);
    const auto n = static_cast<std::int64_t>(req.hashes.size());
    SCOPED_TRACE(describe(coordinator->config(), shape, req));
    const Expected want =
        expect_from([&] { return coordinator->load_mask(req.hashes, req.max_length); });
    const std::vector<std::uint8_t> ones(static_cast<std::size_t>(plan.num_groups * n) + 1, 1);
    Outputs out(1, plan.num_groups);
    const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                             prefixhit::detail::kPresenceLookahead>
        probe{&plan, prefixhit::detail::PresenceTableSource{ones.data(), n}, n};
    prefixhit::detail::lookup_request(plan, n, req.max_length, false, probe, 0, 0, 1, out.view());
    ASSERT_TRUE(row_matches(out, 0, plan.num_groups, want));
  }
}

/// The probe alone, on arbitrary sequences of windows: walks that continue (served from the
/// lookahead), walks abandoned midway, the same spec group and step restarting elsewhere, and
/// windows cut short. Every answer must equal the member AND of the table, key by key.
TEST(WarpTwin, ProbeAnswersAnySequenceOfWindows) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int k = 0; k < 60; ++k) {
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(random_config(rng, static_cast<Shape>(k % kNumShapes)));
    } catch (const prefixhit::InvalidConfig&) {
      continue;
    }
    const prefixhit::detail::LookupPlan& plan = coordinator->plan();
    const std::int64_t n = rng.uniform(1, 2000);
    const double density = rng.pick(std::vector<double>{0.5, 0.9, 1.0});
    std::vector<std::uint8_t> table(static_cast<std::size_t>(plan.num_groups * n));
    for (std::uint8_t& cell : table) {
      cell = rng.chance(density) ? 1 : 0;
    }
    const prefixhit::detail::PresenceTableSource source{table.data(), n};
    const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                             prefixhit::detail::kPresenceLookahead>
        probe{&plan, source, n};
    int sg = 0;
    std::int64_t first = 0;
    std::int64_t step = 1;
    int count = 0;
    for (int call = 0; call < 400; ++call) {
      const bool restart = count == 0 || rng.chance(0.3);
      if (restart) {
        // Often the same spec group and step as before, from somewhere else.
        if (rng.chance(0.5)) {
          sg = static_cast<int>(rng.uniform(0, plan.num_spec_groups - 1));
          step = rng.pick(std::vector<std::int64_t>{1, -1, 2, -2, 3, -5});
        }
        first = rng.uniform(0, n - 1);
      } else {
        first += count * step;
      }
      // Keys first + i*step for i < count, all inside [0, n).
      const std::int64_t room = step > 0 ? (n - 1 - first) / step + 1 : first / -step + 1;
      if (first < 0 || first >= n || room <= 0) {
        count = 0;
        continue;
      }
      count = static_cast<int>(std::min<std::int64_t>(
          room, rng.chance(0.7) ? 64 : rng.pick(std::vector<std::int64_t>{1, 7, 32, 33, 63})));
      const std::uint64_t got = probe.window(sg, first, step, count);
      std::uint64_t want = 0;
      const prefixhit::detail::SpecGroupPlan& spec = plan.spec_groups[sg];
      for (int i = 0; i < count; ++i) {
        bool present = true;
        for (int m = 0; m < spec.num_members; ++m) {
          present =
              present && source.contains(plan.members[spec.first_member + m], first + i * step);
        }
        want |= static_cast<std::uint64_t>(present) << i;
      }
      ASSERT_EQ(got, want) << "call " << call << ": sg " << sg << " first " << first << " step "
                           << step << " count " << count;
    }
  }
}

/// Lanes split the row: lane 0 writes hit_length and status, lane l the groups g with
/// g mod 32 == l, so with 32 lanes every entry is written exactly once.
TEST(WarpTwin, EachLaneWritesItsOwnGroups) {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 64;
  for (int g = 0; g < prefixhit::kMaxGroups; ++g) {
    c.groups.push_back(g % 2 == 0 ? GroupSpec::full_attention(64)
                                  : GroupSpec::sliding_window_attention(16, 32));
  }
  const Coordinator coordinator(c);
  const prefixhit::detail::LookupPlan& plan = coordinator.plan();
  const auto groups = static_cast<std::size_t>(plan.num_groups);
  Rng rng(fresh_seed());
  Request req;
  for (int i = 0; i < 40; ++i) {
    req.hashes.push_back(random_digest(rng));
  }
  req.max_length = 40 * 16;
  const auto n = static_cast<std::int64_t>(req.hashes.size());
  const std::vector<std::uint8_t> ones(groups * static_cast<std::size_t>(n), 1);
  const prefixhit::detail::KernelWarpProbe<prefixhit::detail::PresenceTableSource,
                                           prefixhit::detail::kPresenceLookahead>
      probe{&plan, prefixhit::detail::PresenceTableSource{ones.data(), n}, n};
  Outputs all_lanes(1, plan.num_groups);
  for (int lane = 0; lane < prefixhit::detail::kWarpSize; ++lane) {
    Outputs one_lane(1, plan.num_groups);
    prefixhit::detail::lookup_request(plan, n, req.max_length, true, probe, 0, lane,
                                      prefixhit::detail::kWarpSize, one_lane.view());
    prefixhit::detail::lookup_request(plan, n, req.max_length, true, probe, 0, lane,
                                      prefixhit::detail::kWarpSize, all_lanes.view());
    EXPECT_EQ(one_lane.hit_lengths[0] != Outputs::kPoison, lane == 0);
    EXPECT_EQ(one_lane.status[0] != Outputs::kPoisonStatus, lane == 0);
    for (std::size_t g = 0; g < groups; ++g) {
      const bool mine = static_cast<int>(g) % prefixhit::detail::kWarpSize == lane;
      EXPECT_EQ(one_lane.num_blocks[g] != Outputs::kPoison, mine)
          << "lane " << lane << " group " << g;
      EXPECT_EQ(one_lane.num_placeholders[g] != Outputs::kPoison, mine)
          << "lane " << lane << " group " << g;
    }
  }
  KeySet store;
  for (std::size_t g = 0; g < groups; ++g) {
    for (const BlockDigest& d : req.hashes) {
      store.insert(static_cast<int>(g), d);
    }
  }
  const Expected want = expect_from(
      [&] { return coordinator.find_longest_cache_hit(req.hashes, req.max_length, store); });
  EXPECT_TRUE(row_matches(all_lanes, 0, plan.num_groups, want));
}

}  // namespace
