// The host half of GPU router scoring, without a GPU: build_worker_set_table and the
// host-and-device WorkerSetProbe / score_worker that the scoring kernel runs per (request,
// worker), here run on the host over the table, against the CPU score_workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/residency_table.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/router_gpu.hpp"
#include "tests/common/router_cases.hpp"
#include "tests/cpu/test_support.hpp"

namespace prefixhit {
namespace {

TEST(RouterGpuTable, HostTwinOfTheKernelEqualsTheCpuScorer) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const Config config = testing::random_config(rng);
    const Coordinator c(config);
    const int workers = std::vector<int>{1, 3, 64, 65, 100}[rng() % 5];
    const testing::router::RouterCase rc =
        testing::router::random_router_case(rng, c, workers, 1 + static_cast<int>(rng() % 2), 70);
    const LookupBatch batch = rc.batch();
    ScoreOptions options;
    options.tier_mask = rng() % 2 == 0 ? ~0U : 1U;
    RouterScores cpu;
    try {
      cpu = score_workers(c, batch, *rc.residency, options);
    } catch (const Error&) {
      continue;  // errors: the GPU tests compare them
    }
    const gpu::WorkerSetTable table = gpu::build_worker_set_table(c, batch, *rc.residency, options);
    ASSERT_EQ(table.num_workers, workers);
    ASSERT_EQ(table.set_ids.size(), static_cast<std::size_t>(table.num_groups) * rc.digests.size());
    const detail::LookupPlan& plan = c.plan();
    const auto g = static_cast<std::size_t>(plan.num_groups);
    const std::size_t rows = batch.num_requests() * static_cast<std::size_t>(workers);
    std::vector<std::int64_t> hits(rows, -1);
    std::vector<std::int64_t> blocks(rows * g, -1);
    std::vector<std::int64_t> placeholders(rows * g, -1);
    std::vector<ErrorKind> status(rows, ErrorKind::capacity_exceeded);
    const detail::WorkerScoreOutputs out{hits.data(), blocks.data(), placeholders.data(),
                                         status.data()};
    for (std::size_t r = 0; r < batch.num_requests(); ++r) {
      const std::int64_t off = batch.offsets[r];
      for (int w = 0; w < workers; ++w) {
        const detail::WorkerSetProbe probe{&plan,
                                           table.set_ids.data() + plan.num_groups * off,
                                           batch.offsets[r + 1] - off,
                                           table.sets.data(),
                                           static_cast<std::int64_t>(table.num_sets()),
                                           static_cast<std::int64_t>(table.words),
                                           w,
                                           1,
                                           1U};
        const auto row = static_cast<std::int64_t>(r) * workers + w;
        detail::score_worker(plan, batch.max_lengths[r], batch.apply_eagle[r] != 0, probe, row,
                             out);
        ASSERT_EQ(status[static_cast<std::size_t>(row)], ErrorKind::ok);
        ++compared;
      }
    }
    ASSERT_EQ(hits, cpu.hit_lengths) << "trial " << trial;
    ASSERT_EQ(blocks, cpu.num_blocks) << "trial " << trial;
    ASSERT_EQ(placeholders, cpu.num_placeholders) << "trial " << trial;
  }
  EXPECT_GT(compared, 1000);
}

bool holds(const gpu::WorkerSetTable& table, std::uint32_t set, int w) {
  return ((table.sets[set * table.words + static_cast<std::size_t>(w) / 64] >> (w % 64)) & 1U) != 0;
}

// build_worker_classes gives exactly the classes of workers that agree on every set id of the
// request (whatever the signature width: a collision only splits), and scoring each class's
// representative once, written to every member (the kernel's per-class step), equals the CPU.
TEST(RouterGpuTable, WorkerClassesAreExactAndScoreLikeEveryWorker) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::size_t classes_total = 0;
  std::size_t rows_total = 0;
  std::size_t collisions = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const Config config = testing::random_config(rng);
    const Coordinator c(config);
    const int workers = std::vector<int>{1, 3, 64, 65, 100}[rng() % 5];
    const testing::router::RouterCase rc =
        testing::router::random_router_case(rng, c, workers, 1 + static_cast<int>(rng() % 2), 70);
    const LookupBatch batch = rc.batch();
    ScoreOptions options;
    options.tier_mask = rng() % 2 == 0 ? ~0U : 1U;
    RouterScores cpu;
    try {
      cpu = score_workers(c, batch, *rc.residency, options);
    } catch (const Error&) {
      continue;
    }
    const gpu::WorkerSetTable table = gpu::build_worker_set_table(c, batch, *rc.residency, options);
    const gpu::WorkerClasses classes = gpu::build_worker_classes(table, batch.offsets);
    const auto g = static_cast<std::size_t>(table.num_groups);
    const std::size_t requests = batch.num_requests();
    ASSERT_EQ(classes.member_offsets.size(), classes.num_classes() + 1);
    ASSERT_EQ(classes.members.size(), requests * static_cast<std::size_t>(workers));
    std::vector<int> seen(static_cast<std::size_t>(workers), -1);
    for (std::size_t k = 0; k < classes.num_classes(); ++k) {
      const std::size_t r = classes.requests[k];
      ASSERT_LT(r, requests);
      ASSERT_TRUE(k == 0 || classes.requests[k - 1] <= r);
      std::vector<std::uint32_t> ids;
      for (std::size_t e = static_cast<std::size_t>(batch.offsets[r]) * g;
           e < static_cast<std::size_t>(batch.offsets[r + 1]) * g; ++e) {
        if (table.set_ids[e] != 0 && table.set_ids[e] < table.num_sets()) {
          ids.push_back(table.set_ids[e]);
        }
      }
      const std::int32_t rep = classes.members[static_cast<std::size_t>(classes.member_offsets[k])];
      for (auto m = classes.member_offsets[k]; m < classes.member_offsets[k + 1]; ++m) {
        const std::int32_t w = classes.members[static_cast<std::size_t>(m)];
        ASSERT_TRUE(m == classes.member_offsets[k] || classes.members[m - 1] < w);
        ASSERT_NE(seen[static_cast<std::size_t>(w)], static_cast<int>(r)) << "worker twice";
        seen[static_cast<std::size_t>(w)] = static_cast<int>(r);
        for (const std::uint32_t id : ids) {
          ASSERT_EQ(holds(table, id, w), holds(table, id, rep)) << "trial " << trial;
        }
      }
      // Maximal: another class of the request differs from this one on some set.
      for (std::size_t j = k + 1; j < classes.num_classes() && classes.requests[j] == r; ++j) {
        const std::int32_t other =
            classes.members[static_cast<std::size_t>(classes.member_offsets[j])];
        EXPECT_TRUE(std::any_of(
            ids.begin(), ids.end(),
            [&](std::uint32_t id) { return holds(table, id, other) != holds(table, id, rep); }))
            << "trial " << trial;
      }
    }
    // Narrow signatures collide, but the bit check keeps the very same classes.
    for (const std::uint64_t mask : {std::uint64_t{0}, std::uint64_t{1}}) {
      const gpu::WorkerClasses narrow = gpu::build_worker_classes(table, batch.offsets, mask);
      ASSERT_EQ(narrow.requests, classes.requests) << "mask " << mask;
      ASSERT_EQ(narrow.member_offsets, classes.member_offsets) << "mask " << mask;
      ASSERT_EQ(narrow.members, classes.members) << "mask " << mask;
      collisions += narrow.collisions;
    }
    const detail::LookupPlan& plan = c.plan();
    const std::size_t rows = requests * static_cast<std::size_t>(workers);
    std::vector<std::int64_t> hits(rows, -1);
    std::vector<std::int64_t> blocks(rows * g, -1);
    std::vector<std::int64_t> placeholders(rows * g, -1);
    std::vector<ErrorKind> status(rows, ErrorKind::capacity_exceeded);
    const detail::WorkerScoreOutputs out{hits.data(), blocks.data(), placeholders.data(),
                                         status.data()};
    for (std::size_t k = 0; k < classes.num_classes(); ++k) {
      const std::size_t r = classes.requests[k];
      const std::int64_t off = batch.offsets[r];
      const std::int32_t* members =
          classes.members.data() + static_cast<std::size_t>(classes.member_offsets[k]);
      const detail::WorkerSetProbe probe{&plan,
                                         table.set_ids.data() + plan.num_groups * off,
                                         batch.offsets[r + 1] - off,
                                         table.sets.data(),
                                         static_cast<std::int64_t>(table.num_sets()),
                                         static_cast<std::int64_t>(table.words),
                                         members[0],
                                         1,
                                         1U};
      detail::score_worker_rows(plan, batch.max_lengths[r], batch.apply_eagle[r] != 0, probe,
                                static_cast<std::int64_t>(r) * workers, members,
                                classes.member_offsets[k + 1] - classes.member_offsets[k], workers,
                                out);
    }
    ASSERT_EQ(status, std::vector<ErrorKind>(rows, ErrorKind::ok)) << "trial " << trial;
    ASSERT_EQ(hits, cpu.hit_lengths) << "trial " << trial;
    ASSERT_EQ(blocks, cpu.num_blocks) << "trial " << trial;
    ASSERT_EQ(placeholders, cpu.num_placeholders) << "trial " << trial;
    classes_total += classes.num_classes();
    rows_total += rows;
  }
  EXPECT_GT(collisions, 0U);             // mask 0 puts every worker in one bucket
  EXPECT_LT(classes_total, rows_total);  // workers do share classes
  std::printf("worker classes: %zu for %zu (request, worker) rows\n", classes_total, rows_total);
}

TEST(RouterGpuTable, EntriesNoFinderReadsStayEmptyAndMisfitHashesAreMarked) {
  Config config;
  config.hash_block_size = 16;
  config.digest_size = 8;
  config.groups = {GroupSpec::full_attention(32)};
  config.scheduler_block_size = 32;
  const Coordinator c(config);
  std::vector<BlockDigest> hashes(4);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    hashes[i].bytes[0] = static_cast<std::uint8_t>(i + 1);
  }
  ResidencyIndex residency(ResidencyOptions{2, 1, 16, 1});
  residency.insert(1, 0, 0, hashes, 8);
  hashes[3].bytes[9] = 1;  // past the width
  const std::vector<std::int64_t> offsets{0, 4};
  const std::vector<std::int64_t> lengths{64};
  const gpu::WorkerSetTable table =
      gpu::build_worker_set_table(c, LookupBatch{hashes, offsets, lengths, {}}, residency);
  // Blocks of 2 hashes: the finder reads hashes 1 and 3 only.
  EXPECT_EQ(table.set_ids[0], 0U);
  EXPECT_EQ(table.set_ids[2], 0U);
  ASSERT_NE(table.set_ids[1], 0U);
  EXPECT_EQ(table.sets[table.set_ids[1] * table.words], 2U);  // worker 1 only
  EXPECT_EQ(table.set_ids[3], gpu::kBadDigestSet);
  EXPECT_EQ(table.index_reads, 1U);
  ScoreOptions bad_ns;
  bad_ns.ns = kMaxNamespace + 1;
  EXPECT_THROW(
      gpu::build_worker_set_table(c, LookupBatch{hashes, offsets, lengths, {}}, residency, bad_ns),
      InvalidArgument);
  if (!gpu::device_available()) {  // a build without CUDA, or no device
    EXPECT_THROW(gpu::RouterScoreEngine{c}, Unavailable);
    EXPECT_THROW(gpu::DeviceResidencyIndex{residency}, Unavailable);
  }
}

/// The snapshot's table through the pointer view the kernel probes.
struct SnapshotView {
  const std::uint64_t* keys;
  const std::uint32_t* metas;
  const std::uint32_t* slot_sets;
  std::uint64_t mask;
  std::uint64_t seed;
};

TEST(RouterGpuTable, SnapshotAnswersAsTheResidencyIndex) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const int workers = 70;
  const int tiers = 2;
  ResidencyIndex residency(ResidencyOptions{workers, tiers, 64, 0});
  const auto keys = testing::random_hashes(rng, 400);
  for (int step = 0; step < 3000; ++step) {
    const auto w = static_cast<WorkerId>(rng() % workers);
    const int tier = static_cast<int>(rng() % tiers);
    const BlockDigest& key = keys[rng() % keys.size()];
    const int group = static_cast<int>(rng() % 3);
    const Namespace ns = static_cast<Namespace>(rng() % 2);
    if (rng() % 100 < 65) {
      residency.insert(w, ns, group, {&key, 1}, BlockDigest::kSize, tier);
    } else if (rng() % 100 < 97) {
      residency.erase(w, ns, group, {&key, 1}, BlockDigest::kSize, tier);
    } else {
      residency.clear_worker(w);
    }
  }
  const gpu::ResidencySnapshot snap = gpu::snapshot_residency(residency, rng());
  EXPECT_EQ(snap.live_keys, residency.size());
  EXPECT_LE(2 * snap.live_keys, snap.mask + 1);  // at most half full
  const SnapshotView view{snap.keys.data(), snap.metas.data(), snap.slot_sets.data(), snap.mask,
                          snap.seed};
  for (const BlockDigest& key : keys) {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof(w));
    for (Namespace ns = 0; ns < 3; ++ns) {
      for (int group = 0; group < 3; ++group) {
        const std::uint32_t set = detail::residency_find_set(
            view, w, gpu::residency_key_meta(ns, group, BlockDigest::kSize));
        ASSERT_LT(set, snap.sets.size() / snap.words);
        for (int worker = 0; worker < workers; ++worker) {
          for (int t = 0; t < tiers; ++t) {
            const int column = worker * tiers + t;
            const bool bit =
                ((snap.sets[set * snap.words + static_cast<std::size_t>(column / 64)] >>
                  (column % 64)) &
                 1U) != 0;
            ASSERT_EQ(bit, residency.contains(static_cast<WorkerId>(worker), ns, group, key,
                                              BlockDigest::kSize, 1U << t))
                << "worker " << worker << " tier " << t << " ns " << ns << " group " << group;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace prefixhit
