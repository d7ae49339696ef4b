// GPU router scoring (router_gpu.hpp) against the CPU score_workers and against W independent
// single-store lookups, on random configurations of every finder kind and vector family
// (pr49069 and vllm-0.33 rules, partial hits, digest widths 8/16/32 with misfit hashes), random
// residencies (identical, empty, prefix, independent and flipped workers; holes at window
// boundaries; two tiers and a tier mask). Cases with a misfit hash compare the GPU with the
// CPU scorer only (see the test). Every test skips (never passes) without a device.
//
// A fresh seed per run, printed; PREFIXHIT_TEST_SEED replays it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/random_cases.hpp"
#include "common/router_cases.hpp"
#include "gpu/gpu_test_util.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/router_gpu.hpp"
#include "prefixhit/types.hpp"
#include "tests/cpu/test_support.hpp"

namespace prefixhit {
namespace {

using testing::router::random_router_case;
using testing::router::RouterCase;

/// A random configuration: the router test's generator or one of the vector families, under
/// either rule set and digest width (retried until the coordinator accepts it).
Config random_router_config(std::mt19937_64& rng) {
  for (;;) {
    Config config;
    if (rng() % 2 == 0) {
      config = testing::random_config(rng);
    } else {
      testing::cases::Rng family(rng());
      config = testing::cases::random_config(
          family, static_cast<testing::cases::Shape>(rng() % testing::cases::kNumShapes));
    }
    if (rng() % 3 == 0) {
      config.semantics = Semantics::vllm_0_33;
    }
    config.digest_size = std::vector<std::size_t>{8, 16, 32, 32}[rng() % 4];
    try {
      (void)Coordinator(config);
      return config;
    } catch (const Error&) {
      continue;
    }
  }
}

/// Same scores, cell by cell.
void expect_same(const RouterScores& got, const RouterScores& want, const std::string& where) {
  ASSERT_EQ(got.num_requests, want.num_requests) << where;
  ASSERT_EQ(got.num_workers, want.num_workers) << where;
  ASSERT_EQ(got.num_groups, want.num_groups) << where;
  for (std::size_t i = 0; i < want.hit_lengths.size(); ++i) {
    ASSERT_EQ(got.hit_lengths[i], want.hit_lengths[i])
        << where << " request " << i / static_cast<std::size_t>(want.num_workers) << " worker "
        << i % static_cast<std::size_t>(want.num_workers);
  }
  ASSERT_EQ(got.num_blocks, want.num_blocks) << where;
  ASSERT_EQ(got.num_placeholders, want.num_placeholders) << where;
}

TEST(GpuRouterScore, EqualsCpuScoresAndIndependentLookups) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = testing::test_seed();
  std::printf("GpuRouterScore seed %llu (%s)\n", static_cast<unsigned long long>(seed),
              testing::seed_note(seed).c_str());
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  int compared = 0;
  int errors = 0;
  int partial = 0;
  int misfit_cases = 0;
  std::size_t classes = 0;
  std::size_t class_rows = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const Config config = random_router_config(rng);
    const Coordinator c(config);
    partial += c.plan().partial ? 1 : 0;
    const int workers = std::vector<int>{1, 2, 5, 31, 64, 65, 130}[rng() % 7];
    const int tiers = 1 + static_cast<int>(rng() % 2);
    const std::size_t max_hashes = rng() % 5 == 0 ? 400 : 70;
    const RouterCase rc = random_router_case(rng, c, workers, tiers, max_hashes, true);
    const LookupBatch batch = rc.batch();
    bool misfit = false;  // a hash with bytes past the digest width
    for (const BlockDigest& d : rc.digests) {
      for (std::size_t b = config.digest_size; b < BlockDigest::kSize; ++b) {
        misfit = misfit || d.bytes[b] != 0;
      }
    }
    const gpu::RouterScoreEngine engine(c);
    const gpu::DeviceResidencyIndex device_index(*rc.residency);
    for (const std::uint32_t tier_mask : {~0U, 1U}) {
      const std::vector<KeySet>& truth = tier_mask == 1U ? rc.tier0 : rc.stores;
      const std::string where = "trial " + std::to_string(trial) + " tier_mask " +
                                std::to_string(tier_mask) + " workers " + std::to_string(workers);
      ScoreOptions options;
      options.tier_mask = tier_mask;
      std::optional<RouterScores> cpu;
      std::optional<RouterScores> got;
      std::string cpu_error;
      std::string gpu_error;
      std::optional<ErrorKind> cpu_kind;
      try {
        cpu = score_workers(c, batch, *rc.residency, options);
      } catch (const Error& e) {
        cpu_error = e.what();
        cpu_kind = e.kind();
      }
      try {
        got = engine.score_workers(batch, *rc.residency, options);
      } catch (const Error& e) {
        gpu_error = e.what();
      }
      // The GPU path fails exactly when the CPU scorer does, with its kind and message.
      ASSERT_EQ(gpu_error, cpu_error) << where;
      if (cpu) {
        ASSERT_TRUE(got.has_value()) << where;
        ASSERT_NO_FATAL_FAILURE(expect_same(*got, *cpu, where));
        // One thread per (request, class): at least a class per request, at most one per worker.
        const std::size_t rows = batch.num_requests() * static_cast<std::size_t>(workers);
        EXPECT_GE(got->classes, batch.num_requests()) << where;
        EXPECT_LE(got->classes, rows) << where;
        classes += got->classes;
        class_rows += rows;
      }
      // The same over the device residency index (the table built by a kernel): same scores,
      // same error kind (the message differs only for a misfit hash, which it cannot locate).
      try {
        const RouterScores on_device = engine.score_workers(batch, device_index, options);
        ASSERT_TRUE(cpu.has_value())
            << where << ": the device index path should throw " << cpu_error;
        ASSERT_NO_FATAL_FAILURE(expect_same(on_device, *cpu, where + " (device index)"));
      } catch (const Error& e) {
        ASSERT_TRUE(cpu_kind.has_value()) << where << ": " << e.what();
        EXPECT_EQ(e.kind(), *cpu_kind) << where << ": " << e.what() << " vs " << cpu_error;
        if (!misfit) {
          EXPECT_EQ(std::string(e.what()), cpu_error) << where;
        }
      }
      if (misfit) {
        // Not compared with the single-store lookups: those check the width of every hash of
        // each probe window (8 to 64 keys), also past where the finder stops, and report a
        // misfit hash before a finder error; both scorers check only the hashes the finders
        // read, one key per window, and report a finder error first.
        misfit_cases += cpu_kind ? 1 : 0;
        continue;
      }
      // The reference: one single-store lookup per worker; the first error thrown, if any.
      std::optional<ErrorKind> expected_error;
      std::vector<std::vector<LookupResult>> expected(rc.requests.size());
      for (std::size_t r = 0; r < rc.requests.size() && !expected_error; ++r) {
        for (int w = 0; w < workers && !expected_error; ++w) {
          try {
            expected[r].push_back(
                c.find_longest_cache_hit(rc.requests[r].hashes, rc.requests[r].max_length,
                                         truth[static_cast<std::size_t>(w)], rc.requests[r].eagle));
          } catch (const Error& e) {
            expected_error = e.kind();
          }
        }
      }
      ASSERT_EQ(cpu_kind.has_value(), expected_error.has_value()) << where << ": " << cpu_error;
      if (expected_error) {
        ++errors;
        EXPECT_EQ(*cpu_kind, *expected_error) << where << ": " << cpu_error;
        continue;
      }
      for (std::size_t r = 0; r < rc.requests.size(); ++r) {
        for (int w = 0; w < workers; ++w) {
          const LookupResult have = got->result(r, w);
          const LookupResult& want = expected[r][static_cast<std::size_t>(w)];
          ASSERT_EQ(have.hit_length, want.hit_length)
              << where << " request " << r << " worker " << w;
          ASSERT_EQ(have.groups.size(), want.groups.size()) << where;
          for (std::size_t g = 0; g < want.groups.size(); ++g) {
            ASSERT_EQ(have.groups[g].num_blocks, want.groups[g].num_blocks)
                << where << " request " << r << " worker " << w << " group " << g;
            ASSERT_EQ(have.groups[g].num_placeholders, want.groups[g].num_placeholders)
                << where << " request " << r << " worker " << w << " group " << g;
          }
          ++compared;
        }
      }
    }
  }
  std::printf(
      "GpuRouterScore: %d (request, worker) results compared, %d error cases, %d misfit-hash "
      "errors (CPU vs GPU only), %d partial-hit configurations; %zu classes (GPU threads) for "
      "%zu (request, worker) rows\n",
      compared, errors, misfit_cases, partial, classes, class_rows);
  EXPECT_LT(classes, class_rows);  // identical and disjoint workers share classes
  EXPECT_GT(compared, 1000);
  EXPECT_GT(errors, 0);
  EXPECT_GT(misfit_cases, 0);
  EXPECT_GT(partial, 0);
}

TEST(GpuRouterScore, DeviceArraysAndStatusPerWorker) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Config config;
  config.hash_block_size = 16;
  config.groups = {GroupSpec::full_attention(16), GroupSpec::sliding_window_attention(16, 32)};
  const Coordinator c(config);
  std::mt19937_64 rng(7);
  const auto hashes = testing::random_hashes(rng, 40);
  ResidencyIndex residency(ResidencyOptions{70, 1, 64, 0});
  for (WorkerId w = 0; w < 70; ++w) {
    const std::size_t held = w % 41;  // worker w holds the first w % 41 blocks of both groups
    residency.insert(w, 0, 0, {hashes.data(), held});
    residency.insert(w, 0, 1, {hashes.data(), held});
  }
  const std::vector<std::int64_t> offsets{0, 40, 40, 80};
  std::vector<BlockDigest> digests = hashes;
  digests.insert(digests.end(), hashes.begin(), hashes.end());
  const std::vector<std::int64_t> max_lengths{640, 0, -1};  // request 2 is out of range
  const LookupBatch batch{digests, offsets, max_lengths, {}};
  const std::vector<std::int64_t> good_lengths{640, 0, 320};
  const LookupBatch good{digests, offsets, good_lengths, {}};
  const gpu::WorkerSetTable table = gpu::build_worker_set_table(c, good, residency);
  EXPECT_EQ(table.num_workers, 70);
  EXPECT_EQ(table.words, 2U);
  EXPECT_EQ(table.set_ids.size(), 2U * digests.size());

  // Device copies of the batch (with the bad length, which only the device path accepts) and
  // of the table, then one kernel; the host checks nothing, so status must say what failed.
  auto upload = [](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    T* d = nullptr;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), (host.size() + 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    return d;
  };
  gpu::DeviceBatch d;
  d.num_requests = 3;
  d.offsets = upload(offsets);
  d.max_lengths = upload(max_lengths);
  gpu::DeviceWorkerSets sets;
  std::uint32_t* const set_ids = upload(table.set_ids);
  sets.set_ids = set_ids;
  sets.sets = upload(table.sets);
  sets.num_sets = static_cast<std::int64_t>(table.num_sets());
  sets.num_workers = 70;
  const std::size_t rows = 3 * 70;
  std::vector<std::int64_t> poison(rows * 2, 0x5A5A5A5A);
  gpu::DeviceScoreOutput out;
  out.hit_lengths = upload(std::vector<std::int64_t>(rows, 0x5A5A5A5A));
  out.num_blocks = upload(poison);
  out.num_placeholders = upload(poison);
  out.status = upload(std::vector<ErrorKind>(rows, ErrorKind::capacity_exceeded));
  const gpu::RouterScoreEngine engine(c);
  cudaStream_t stream = nullptr;
  PREFIXHIT_ASSERT_CUDA(cudaStreamCreate(&stream));
  gpu::LookupTiming timing;
  engine.score_workers(d, sets, out, stream, &timing);
  std::vector<std::int64_t> hits(rows);
  std::vector<std::int64_t> blocks(rows * 2);
  std::vector<ErrorKind> status(rows);
  PREFIXHIT_ASSERT_CUDA(cudaMemcpy(hits.data(), out.hit_lengths, rows * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost));
  PREFIXHIT_ASSERT_CUDA(cudaMemcpy(blocks.data(), out.num_blocks, rows * 2 * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost));
  PREFIXHIT_ASSERT_CUDA(
      cudaMemcpy(status.data(), out.status, rows * sizeof(ErrorKind), cudaMemcpyDeviceToHost));
  const RouterScores cpu = score_workers(c, good, residency);
  for (std::size_t w = 0; w < 70; ++w) {
    EXPECT_EQ(status[w], ErrorKind::ok) << w;
    EXPECT_EQ(hits[w], cpu.hit_lengths[w]) << w;
    EXPECT_EQ(hits[w], static_cast<std::int64_t>(w % 41) * 16) << w;
    EXPECT_EQ(blocks[2 * w], cpu.num_blocks[2 * w]) << w;
    EXPECT_EQ(blocks[2 * w + 1], cpu.num_blocks[2 * w + 1]) << w;
    EXPECT_EQ(status[70 + w], ErrorKind::ok) << w;
    EXPECT_EQ(hits[70 + w], 0) << w;
    EXPECT_EQ(status[140 + w], ErrorKind::invalid_argument) << w;
    EXPECT_EQ(hits[140 + w], 0) << w;
    EXPECT_EQ(blocks[2 * (140 + w)], 0) << w;
  }
  // A table entry naming no set is refused per worker, never read past the sets.
  std::vector<std::uint32_t> broken = table.set_ids;
  broken[0 * 40 + 15] = static_cast<std::uint32_t>(table.num_sets());  // group 0, block 16
  std::uint32_t* broken_ids = upload(broken);
  sets.set_ids = broken_ids;
  engine.score_workers_async(d, sets, out, stream);
  PREFIXHIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
  PREFIXHIT_ASSERT_CUDA(
      cudaMemcpy(status.data(), out.status, rows * sizeof(ErrorKind), cudaMemcpyDeviceToHost));
  EXPECT_EQ(status[40], ErrorKind::invalid_argument);  // holds 40 blocks: reads hash 15
  EXPECT_EQ(status[3], ErrorKind::ok);                 // holds 3: stops before it
  // Bad calls throw, naming what is missing.
  gpu::DeviceScoreOutput none;
  EXPECT_THROW(engine.score_workers_async(d, sets, none, stream), InvalidArgument);
  gpu::DeviceBatch negative = d;
  negative.num_requests = -1;
  EXPECT_THROW(engine.score_workers_async(negative, sets, out, stream), InvalidArgument);
  cudaStreamDestroy(stream);
  for (const void* p :
       {static_cast<const void*>(d.offsets), static_cast<const void*>(d.max_lengths),
        static_cast<const void*>(set_ids), static_cast<const void*>(sets.sets),
        static_cast<const void*>(broken_ids), static_cast<const void*>(out.status),
        static_cast<const void*>(out.hit_lengths), static_cast<const void*>(out.num_blocks),
        static_cast<const void*>(out.num_placeholders)}) {
    EXPECT_EQ(cudaFree(const_cast<void*>(p)), cudaSuccess);
  }
}

TEST(GpuRouterScore, DeviceResidencyIndexFollowsRefresh) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  Config config;
  config.hash_block_size = 16;
  config.groups = {GroupSpec::full_attention(32), GroupSpec::sliding_window_attention(16, 48),
                   GroupSpec::mamba(32, MambaCacheMode::align)};
  config.scheduler_block_size = 32;
  const Coordinator c(config);
  const RouterCase rc = random_router_case(rng, c, 90, 2, 120);
  const LookupBatch batch = rc.batch();
  const gpu::RouterScoreEngine engine(c);
  gpu::DeviceResidencyIndex device_index(*rc.residency);
  EXPECT_EQ(device_index.num_workers(), 90);
  EXPECT_EQ(device_index.num_tiers(), 2);
  EXPECT_EQ(device_index.size(), rc.residency->size());
  EXPECT_GT(device_index.device_bytes(), 0U);
  auto check = [&](const std::string& when) {
    for (const std::uint32_t tier_mask : {~0U, 1U, 2U}) {
      ScoreOptions options;
      options.tier_mask = tier_mask;
      const RouterScores cpu = score_workers(c, batch, *rc.residency, options);
      expect_same(engine.score_workers(batch, device_index, options), cpu,
                  when + " tier_mask " + std::to_string(tier_mask));
    }
  };
  check("snapshot");
  // Changes reach the device index only through refresh().
  for (WorkerId w = 0; w < 90; w += 3) {
    rc.residency->clear_worker(w);
  }
  for (const auto& req : rc.requests) {
    for (std::size_t i = 0; i < req.hashes.size(); i += 2) {
      rc.residency->erase(static_cast<WorkerId>(rng() % 90), 0, static_cast<int>(rng() % 3),
                          {&req.hashes[i], 1}, BlockDigest::kSize, static_cast<int>(rng() % 2));
    }
  }
  device_index.refresh(*rc.residency);
  EXPECT_EQ(device_index.size(), rc.residency->size());
  check("after refresh");
  rc.residency->clear();
  device_index.refresh(*rc.residency);
  EXPECT_EQ(device_index.size(), 0U);
  check("after clear");
}

TEST(GpuRouterScore, HostErrorsMatchTheCpuScorer) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Config config;
  config.hash_block_size = 16;
  config.digest_size = 8;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator c(config);
  std::vector<BlockDigest> hashes(6);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    hashes[i].bytes[0] = static_cast<std::uint8_t>(i + 1);
  }
  ResidencyIndex residency(ResidencyOptions{3, 1, 64, 0});
  residency.insert(1, 0, 0, {hashes.data(), 3}, 8);
  hashes[4].bytes[20] = 9;  // past the 8-byte width; worker 1 reads hashes 0..3 only
  const std::vector<std::int64_t> offsets{0, 6, 12};
  std::vector<BlockDigest> digests = hashes;
  digests.insert(digests.end(), hashes.begin(), hashes.end());
  const std::vector<std::int64_t> lengths{96, 48};
  const LookupBatch batch{digests, offsets, lengths, {}};
  const gpu::RouterScoreEngine engine(c);
  // Hash 4 is read only by a worker holding hashes 0..3: none yet.
  std::string cpu_message;
  try {
    (void)score_workers(c, batch, residency);
  } catch (const InvalidArgument& e) {
    cpu_message = e.what();
  }
  EXPECT_TRUE(cpu_message.empty()) << cpu_message;       // worker 1 stops at its absent hash 3
  residency.insert(1, 0, 0, {hashes.data() + 3, 1}, 8);  // now worker 1 reads hash 4
  try {
    (void)score_workers(c, batch, residency);
    ADD_FAILURE() << "the CPU scorer accepted a misfit hash";
  } catch (const InvalidArgument& e) {
    cpu_message = e.what();
  }
  try {
    (void)engine.score_workers(batch, residency);
    ADD_FAILURE() << "the GPU scorer accepted a misfit hash";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), cpu_message);
    EXPECT_NE(std::string(e.what()).find("request 0"), std::string::npos) << e.what();
  }
  const std::vector<std::int64_t> bad_lengths{96, -5};
  EXPECT_THROW(
      (void)engine.score_workers(LookupBatch{digests, offsets, bad_lengths, {}}, residency),
      InvalidArgument);
  ScoreOptions bad_ns;
  bad_ns.ns = kMaxNamespace + 1;
  EXPECT_THROW((void)engine.score_workers(batch, residency, bad_ns), InvalidArgument);
  // An empty batch gives empty scores.
  const std::vector<std::int64_t> no_offsets{0};
  const RouterScores empty = gpu::score_workers(c, LookupBatch{{}, no_offsets, {}, {}}, residency);
  EXPECT_EQ(empty.num_requests, 0U);
  EXPECT_EQ(empty.num_workers, 3);
}

}  // namespace
}  // namespace prefixhit
