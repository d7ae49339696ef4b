// The host half of GPU router scoring, without a GPU: build_worker_set_table and the
// host-and-device WorkerSetProbe / score_worker that the scoring kernel runs per (request,
// worker), here run on the host over the table, against the CPU score_workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
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

/// A random router case the CPU scorer answers without error (errors: the GPU tests compare
/// them), with the CPU scores.
struct ScoredCase {
  Config config;
  std::unique_ptr<Coordinator> coordinator;
  testing::router::RouterCase rc;
  ScoreOptions options;
  RouterScores cpu;
  int workers = 0;
};

bool draw_case(std::mt19937_64& rng, ScoredCase& out) {
  out.config = testing::random_config(rng);
  out.coordinator = std::make_unique<Coordinator>(out.config);
  out.workers = std::vector<int>{1, 3, 64, 65, 100}[rng() % 5];
  out.rc = testing::router::random_router_case(rng, *out.coordinator, out.workers,
                                               1 + static_cast<int>(rng() % 2), 70);
  out.options = ScoreOptions{};
  out.options.tier_mask = rng() % 2 == 0 ? ~0U : 1U;
  try {
    out.cpu = score_workers(*out.coordinator, out.rc.batch(), *out.rc.residency, out.options);
  } catch (const Error&) {
    return false;
  }
  return true;
}

/// What the kernel writes, computed on the host by the same PREFIXHIT_HD steps.
struct HostScores {
  std::vector<std::int64_t> hits;
  std::vector<std::int64_t> blocks;
  std::vector<std::int64_t> placeholders;
  std::vector<ErrorKind> status;
};

/// Runs the kernel's per-(request, worker) step (classes == nullptr) or per-class step over the
/// table, on the host.
HostScores score_on_host(const Coordinator& c, const LookupBatch& batch,
                         const gpu::WorkerSetTable& table, const gpu::WorkerClasses* classes) {
  const detail::LookupPlan& plan = c.plan();
  const int workers = table.num_workers;
  const auto g = static_cast<std::size_t>(plan.num_groups);
  const std::size_t rows = batch.num_requests() * static_cast<std::size_t>(workers);
  HostScores s{std::vector<std::int64_t>(rows, -1), std::vector<std::int64_t>(rows * g, -1),
               std::vector<std::int64_t>(rows * g, -1),
               std::vector<ErrorKind>(rows, ErrorKind::capacity_exceeded)};
  const detail::WorkerScoreOutputs out{s.hits.data(), s.blocks.data(), s.placeholders.data(),
                                       s.status.data()};
  // One (request, representative, members) item per class, or per worker.
  auto run = [&](std::size_t r, std::int32_t w, const std::int32_t* members, std::int64_t count) {
    const std::int64_t off = batch.offsets[r];
    const detail::WorkerSetProbe probe{&plan,
                                       table.set_ids.data() + plan.num_groups * off,
                                       batch.offsets[r + 1] - off,
                                       table.sets.data(),
                                       static_cast<std::int64_t>(table.num_sets()),
                                       static_cast<std::int64_t>(table.words),
                                       w,
                                       1,
                                       1U};
    detail::score_worker_rows(plan, batch.max_lengths[r], batch.apply_eagle[r] != 0, probe,
                              static_cast<std::int64_t>(r) * workers, members, count, workers, out);
  };
  if (classes == nullptr) {
    for (std::size_t r = 0; r < batch.num_requests(); ++r) {
      for (std::int32_t w = 0; w < workers; ++w) {
        run(r, w, nullptr, 1);
      }
    }
  } else {
    for (std::size_t k = 0; k < classes->num_classes(); ++k) {
      const std::int32_t* members =
          classes->members.data() + static_cast<std::size_t>(classes->member_offsets[k]);
      run(classes->requests[k], members[0], members,
          classes->member_offsets[k + 1] - classes->member_offsets[k]);
    }
  }
  return s;
}

void expect_cpu_scores(const HostScores& got, const RouterScores& cpu, const std::string& what) {
  ASSERT_EQ(got.status, std::vector<ErrorKind>(got.hits.size(), ErrorKind::ok)) << what;
  ASSERT_EQ(got.hits, cpu.hit_lengths) << what;
  ASSERT_EQ(got.blocks, cpu.num_blocks) << what;
  ASSERT_EQ(got.placeholders, cpu.num_placeholders) << what;
}

/// Classes list each request's workers exactly once, request by request, members ascending,
/// classes by representative (the lowest member).
void expect_partition(const gpu::WorkerClasses& classes, std::size_t requests, int workers,
                      const std::string& what) {
  ASSERT_EQ(classes.member_offsets.size(), classes.num_classes() + 1) << what;
  ASSERT_EQ(classes.members.size(), requests * static_cast<std::size_t>(workers)) << what;
  std::vector<int> seen(static_cast<std::size_t>(workers), -1);
  for (std::size_t k = 0; k < classes.num_classes(); ++k) {
    const std::size_t r = classes.requests[k];
    ASSERT_LT(r, requests) << what;
    ASSERT_LT(classes.member_offsets[k], classes.member_offsets[k + 1]) << what;
    const std::int32_t rep = classes.members[static_cast<std::size_t>(classes.member_offsets[k])];
    ASSERT_TRUE(k == 0 || classes.requests[k - 1] < r ||
                (classes.requests[k - 1] == r &&
                 classes.members[static_cast<std::size_t>(classes.member_offsets[k - 1])] < rep))
        << what;
    for (auto m = classes.member_offsets[k]; m < classes.member_offsets[k + 1]; ++m) {
      const std::int32_t w = classes.members[static_cast<std::size_t>(m)];
      ASSERT_TRUE(w >= 0 && w < workers) << what;
      ASSERT_TRUE(m == classes.member_offsets[k] || classes.members[m - 1] < w) << what;
      ASSERT_NE(seen[static_cast<std::size_t>(w)], static_cast<int>(r)) << what << ": worker twice";
      seen[static_cast<std::size_t>(w)] = static_cast<int>(r);
    }
  }
}

bool holds(const gpu::WorkerSetTable& table, std::uint32_t set, int w) {
  return ((table.sets[set * table.words + static_cast<std::size_t>(w) / 64] >> (w % 64)) & 1U) != 0;
}

// Both fills, scored per (request, worker) by the kernel's host-and-device step, equal the CPU
// score_workers (so no lookup reads an entry the reached fill left unread: it would fail). The
// reached fill reads a subset of the every-probe fill's entries, with the same worker sets.
TEST(RouterGpuTable, HostTwinOfTheKernelEqualsTheCpuScorer) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  std::size_t compared = 0;
  std::size_t reached_reads = 0;
  std::size_t every_reads = 0;
  std::size_t cpu_reads = 0;
  std::size_t pass_total = 0;
  std::size_t finer_total = 0;
  for (int trial = 0; trial < 100; ++trial) {
    ScoredCase sc;
    if (!draw_case(rng, sc)) {
      continue;
    }
    const Coordinator& c = *sc.coordinator;
    const LookupBatch batch = sc.rc.batch();
    const std::string what = "trial " + std::to_string(trial);
    gpu::WorkerClasses pass_classes;
    gpu::WorkerClasses every_classes;
    const gpu::WorkerSetTable reached = gpu::build_worker_set_table(
        c, batch, *sc.rc.residency, sc.options, gpu::TableFill::reached, &pass_classes);
    const gpu::WorkerSetTable every = gpu::build_worker_set_table(
        c, batch, *sc.rc.residency, sc.options, gpu::TableFill::every_probe, &every_classes);
    // The pass's own classes: each request's workers once each, in build_worker_classes' order,
    // never more classes than it, and scored per class they equal the CPU too.
    expect_partition(pass_classes, batch.num_requests(), sc.workers, what);
    const gpu::WorkerClasses finer = gpu::build_worker_classes(reached, batch.offsets);
    EXPECT_LE(pass_classes.num_classes(), finer.num_classes()) << what;
    expect_cpu_scores(score_on_host(c, batch, reached, &pass_classes), sc.cpu,
                      what + " (pass classes)");
    ASSERT_EQ(every_classes.members, gpu::build_worker_classes(every, batch.offsets).members);
    pass_total += pass_classes.num_classes();
    finer_total += finer.num_classes();
    for (const gpu::WorkerSetTable* table : {&reached, &every}) {
      ASSERT_EQ(table->num_workers, sc.workers);
      ASSERT_EQ(table->set_ids.size(),
                static_cast<std::size_t>(table->num_groups) * sc.rc.digests.size());
      expect_cpu_scores(score_on_host(c, batch, *table, nullptr), sc.cpu,
                        what + (table == &reached ? " (reached)" : " (every probe)"));
    }
    std::size_t filled = 0;
    for (std::size_t e = 0; e < reached.set_ids.size(); ++e) {
      const std::uint32_t id = reached.set_ids[e];
      if (id == gpu::kUnreadSet) {
        continue;
      }
      ++filled;
      const std::uint32_t other = every.set_ids[e];
      ASSERT_NE(other, gpu::kUnreadSet) << what << ": entry " << e;
      ASSERT_EQ(id == gpu::kBadDigestSet, other == gpu::kBadDigestSet) << what;
      for (int w = 0; w < sc.workers && id != gpu::kBadDigestSet; ++w) {
        ASSERT_EQ(holds(reached, id, w), holds(every, other, w)) << what << ": entry " << e;
      }
    }
    EXPECT_LE(reached.index_reads, filled) << what;  // misfit hashes fill without a read
    EXPECT_LE(reached.index_reads, every.index_reads) << what;
    EXPECT_GE(reached.finder_runs, batch.num_requests()) << what;
    EXPECT_EQ(every.finder_runs, 0U) << what;
    reached_reads += reached.index_reads;
    every_reads += every.index_reads;
    cpu_reads += sc.cpu.index_reads;
    compared += sc.cpu.hit_lengths.size();
  }
  EXPECT_GT(compared, 1000U);
  EXPECT_LT(reached_reads, every_reads);  // the point of the reached fill
  std::printf(
      "index reads: reached %zu, every probe %zu, CPU scorer %zu (its reads are per spec "
      "group, these per group); classes: the pass's %zu, build_worker_classes' %zu\n",
      reached_reads, every_reads, cpu_reads, pass_total, finer_total);
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
    ScoredCase sc;
    if (!draw_case(rng, sc)) {
      continue;
    }
    const LookupBatch batch = sc.rc.batch();
    const std::string what = "trial " + std::to_string(trial);
    const gpu::WorkerSetTable table =
        gpu::build_worker_set_table(*sc.coordinator, batch, *sc.rc.residency, sc.options);
    const gpu::WorkerClasses classes = gpu::build_worker_classes(table, batch.offsets);
    const auto g = static_cast<std::size_t>(table.num_groups);
    const std::size_t requests = batch.num_requests();
    expect_partition(classes, requests, sc.workers, what);
    for (std::size_t k = 0; k < classes.num_classes(); ++k) {
      const std::size_t r = classes.requests[k];
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
        for (const std::uint32_t id : ids) {
          ASSERT_EQ(holds(table, id, w), holds(table, id, rep)) << what;
        }
      }
      // Maximal: another class of the request differs from this one on some set.
      for (std::size_t j = k + 1; j < classes.num_classes() && classes.requests[j] == r; ++j) {
        const std::int32_t other =
            classes.members[static_cast<std::size_t>(classes.member_offsets[j])];
        EXPECT_TRUE(std::any_of(ids.begin(), ids.end(), [&](std::uint32_t id) {
          return holds(table, id, other) != holds(table, id, rep);
        })) << what;
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
    expect_cpu_scores(score_on_host(*sc.coordinator, batch, table, &classes), sc.cpu, what);
    classes_total += classes.num_classes();
    rows_total += sc.cpu.hit_lengths.size();
  }
  EXPECT_GT(collisions, 0U);             // mask 0 puts every worker in one bucket
  EXPECT_LT(classes_total, rows_total);  // workers do share classes
  std::printf("worker classes: %zu for %zu (request, worker) rows\n", classes_total, rows_total);
}

TEST(RouterGpuTable, OnlyReachedEntriesAreReadAndMisfitHashesAreMarked) {
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
  const std::vector<std::int64_t> offsets{0, 4};
  const std::vector<std::int64_t> lengths{64};
  const LookupBatch batch{hashes, offsets, lengths, {}};
  // Blocks of 2 hashes: the finder reads hashes 1 and 3 only; worker 0 stops at hash 1, worker 1
  // reads hash 3 too.
  gpu::WorkerSetTable table = gpu::build_worker_set_table(c, batch, residency);
  EXPECT_EQ(table.set_ids[0], gpu::kUnreadSet);
  EXPECT_EQ(table.set_ids[2], gpu::kUnreadSet);
  ASSERT_LT(table.set_ids[1], table.num_sets());
  EXPECT_EQ(table.sets[table.set_ids[1] * table.words], 2U);  // worker 1 only
  EXPECT_EQ(table.set_ids[3], table.set_ids[1]);
  EXPECT_EQ(table.index_reads, 2U);
  EXPECT_EQ(table.finder_runs, 3U);  // everyone, split at hash 1; then {1} and {0}
  // Nobody holds hash 1: hash 3 is out of every worker's reach, unless every probe is asked for.
  residency.clear_worker(1);
  table = gpu::build_worker_set_table(c, batch, residency);
  EXPECT_EQ(table.set_ids[1], 0U);
  EXPECT_EQ(table.set_ids[3], gpu::kUnreadSet);
  EXPECT_EQ(table.index_reads, 1U);
  table = gpu::build_worker_set_table(c, batch, residency, {}, gpu::TableFill::every_probe);
  EXPECT_EQ(table.set_ids[0], gpu::kUnreadSet);
  EXPECT_EQ(table.set_ids[3], 0U);
  EXPECT_EQ(table.index_reads, 2U);
  // A misfit hash the finders read is marked, without a read.
  residency.insert(0, 0, 0, hashes, 8);
  hashes[3].bytes[9] = 1;  // past the width
  table = gpu::build_worker_set_table(c, batch, residency);
  EXPECT_EQ(table.set_ids[3], gpu::kBadDigestSet);
  EXPECT_EQ(table.index_reads, 1U);
  ScoreOptions bad_ns;
  bad_ns.ns = kMaxNamespace + 1;
  EXPECT_THROW(gpu::build_worker_set_table(c, batch, residency, bad_ns), InvalidArgument);
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
