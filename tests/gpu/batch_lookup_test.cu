// The GPU batch lookup (gpu.hpp) on a device: every conformance vector through both existence
// sources, and differential tests against the CPU engine on fresh random batches (thousands of
// requests over every group kind and configuration shape of the vectors, random holes, holes at
// window boundaries, unaligned and out-of-range max_lengths), with poisoned output buffers so
// that an unwritten result fails. Every test skips (never passes) without a usable device.
//
// PREFIXHIT_TEST_SEED replays a failing seed; PREFIXHIT_SMALL_GPU_TESTS=1 shrinks the random
// batches (for compute-sanitizer runs).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/random_cases.hpp"
#include "gpu/gpu_test_util.hpp"
#include "host/vectors/conformance.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"
#include "prefixhit/router_gpu.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::Config;
using prefixhit::Coordinator;
using prefixhit::ErrorKind;
using prefixhit::GroupKind;
using prefixhit::GroupSpec;
using prefixhit::KeySet;
using prefixhit::LookupResult;
using prefixhit::MambaCacheMode;
using prefixhit::span;
namespace gpu = prefixhit::gpu;

bool small_tests() {
  const char* env = std::getenv("PREFIXHIT_SMALL_GPU_TESTS");
  return env != nullptr && *env != '\0' && *env != '0';
}

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

// ---- expectations ---------------------------------------------------------------------------

/// The CPU engine's answer for one request: a result, or the error kind (and message) it throws.
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

/// Row r of a device batch's results against the CPU engine's answer. Poisoned outputs make an
/// unwritten entry show as a mismatch (0xA5 bytes are never a valid count or status).
::testing::AssertionResult row_matches(const prefixhit::BatchLookupResult& got,
                                       const std::vector<ErrorKind>& status, std::size_t r,
                                       const Expected& want) {
  const auto g = static_cast<std::size_t>(got.num_groups);
  if (status[r] != want.error) {
    return ::testing::AssertionFailure()
           << "status " << static_cast<int>(status[r]) << " (" << prefixhit::to_string(status[r])
           << "), expected " << prefixhit::to_string(want.error);
  }
  const std::int64_t want_hit = want.result ? want.result->hit_length : 0;
  if (got.hit_lengths[r] != want_hit) {
    return ::testing::AssertionFailure()
           << "hit_length " << got.hit_lengths[r] << ", expected " << want_hit;
  }
  for (std::size_t gid = 0; gid < g; ++gid) {
    const prefixhit::GroupHit w = want.result ? want.result->groups[gid] : prefixhit::GroupHit{};
    if (got.num_blocks[r * g + gid] != w.num_blocks ||
        got.num_placeholders[r * g + gid] != w.num_placeholders) {
      return ::testing::AssertionFailure()
             << "group " << gid << ": (" << got.num_blocks[r * g + gid] << " blocks, "
             << got.num_placeholders[r * g + gid] << " placeholders), expected (" << w.num_blocks
             << ", " << w.num_placeholders << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- random batches -------------------------------------------------------------------------

/// A batch of random requests over one random configuration, with each request's store, the
/// device index holding every store, and the presence table of the requests' KeyPlan answers.
struct RandomBatch {
  Shape shape;
  std::optional<Coordinator> coordinator;
  std::vector<Request> requests;
  std::vector<KeySet> stores;
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> max_lengths;
  std::vector<std::uint8_t> apply_eagle;
  std::vector<std::uint8_t> presence;          ///< [request][group][hash index]
  std::vector<Expected> want_store;            ///< CPU engine over each request's store
  std::vector<Expected> want_plan;             ///< CPU engine over its KeyPlan answers
  std::vector<std::vector<BlockDigest>> keys;  ///< per group: every store's keys

  prefixhit::LookupBatch view() const {
    prefixhit::LookupBatch b;
    b.digests = digests;
    b.offsets = offsets;
    b.max_lengths = max_lengths;
    b.apply_eagle = apply_eagle;
    return b;
  }
  std::string describe_request(std::size_t r) const {
    return describe(coordinator->config(), shape, requests[r]) + " (request " + std::to_string(r) +
           ")";
  }
};

/// `invalid_every` > 0: every so many requests get an out-of-range max_length (only for the
/// device-array calls, which report it in status rather than throwing).
RandomBatch make_batch(Rng& rng, Shape shape, std::size_t requests, std::int64_t max_hashes,
                       std::size_t invalid_every = 0) {
  RandomBatch b;
  b.shape = shape;
  for (;;) {
    try {
      b.coordinator.emplace(random_config(rng, shape));
      break;
    } catch (const prefixhit::InvalidConfig&) {
    }
  }
  const Coordinator& c = *b.coordinator;
  const int groups = c.num_groups();
  const std::int64_t h = c.config().hash_block_size;
  b.keys.resize(static_cast<std::size_t>(groups));
  b.offsets.push_back(0);
  for (std::size_t r = 0; r < requests; ++r) {
    Request req = random_request(rng, c);
    if (static_cast<std::int64_t>(req.hashes.size()) > max_hashes) {
      req.hashes.resize(static_cast<std::size_t>(max_hashes));
      req.max_length = std::min(req.max_length, (max_hashes + 1) * h - 1);
    }
    KeySet store = random_store(rng, c, req);
    const auto n = static_cast<std::int64_t>(req.hashes.size());
    if (invalid_every > 0 && r % invalid_every == invalid_every - 1) {
      req.max_length = rng.chance(0.5) ? (n + 1) * h : -1 - rng.uniform(0, 5);
    }
    for (int g = 0; g < groups; ++g) {
      for (const BlockDigest& d : req.hashes) {
        if (store.contains(g, d)) {
          b.keys[static_cast<std::size_t>(g)].push_back(d);
        }
      }
    }
    b.want_store.push_back(expect_from([&] {
      return c.find_longest_cache_hit(req.hashes, req.max_length, store, req.apply_eagle);
    }));
    // The remote-store flow: the request's KeyPlan, answered by its store, scattered.
    const std::size_t base = b.presence.size();
    b.presence.resize(base + static_cast<std::size_t>(groups * n), 0);
    // A length past the hashes is no longer always an error (full attention stops at the last
    // hash): whatever key_plan accepts is planned and answered.
    std::optional<prefixhit::KeyPlan> maybe_plan;
    try {
      maybe_plan = c.key_plan(req.hashes, req.max_length);
    } catch (const prefixhit::InvalidArgument&) {
    }
    if (maybe_plan) {
      const prefixhit::KeyPlan& plan = *maybe_plan;
      std::vector<std::uint8_t> answers(plan.size());
      for (std::size_t i = 0; i < plan.size(); ++i) {
        answers[i] = store.contains(plan.group_ids[i], plan.keys[i]) ? 1 : 0;
      }
      gpu::scatter_plan_answers(plan, answers, groups, b.presence.data() + base);
      const prefixhit::PlanAnswers plan_answers(plan, answers, groups);
      b.want_plan.push_back(expect_from([&] {
        return c.find_longest_cache_hit(req.hashes, req.max_length, plan_answers, req.apply_eagle);
      }));
    } else {
      b.want_plan.push_back(
          b.want_store.back());  // key_plan refused the length: so does the lookup
    }
    b.digests.insert(b.digests.end(), req.hashes.begin(), req.hashes.end());
    b.offsets.push_back(static_cast<std::int64_t>(b.digests.size()));
    b.max_lengths.push_back(req.max_length);
    b.apply_eagle.push_back(req.apply_eagle ? 1 : 0);
    b.requests.push_back(std::move(req));
    b.stores.push_back(std::move(store));
  }
  return b;
}

constexpr prefixhit::Namespace kNs = 12345;
constexpr std::uint8_t kPoison = 0xA5;

std::unique_ptr<prefixhit::DeviceBlockIndex> load_index(const RandomBatch& b,
                                                        prefixhit::Namespace ns) {
  std::size_t total = 0;
  for (const auto& k : b.keys) {
    total += k.size();
  }
  prefixhit::DeviceBlockIndexOptions options;
  options.initial_capacity = std::max<std::size_t>(std::size_t{1} << 12, total * 2);
  auto index = std::make_unique<prefixhit::DeviceBlockIndex>(options);
  for (std::size_t g = 0; g < b.keys.size(); ++g) {
    gpu::insert_host_keys(*index, ns, static_cast<int>(g), b.keys[g]);
  }
  return index;
}

enum class Source { index, presence };

/// Runs `b` through the device-array API with poisoned outputs and checks every row, the
/// statuses and first_failed. Returns the number of mismatching rows.
int check_device_arrays(const RandomBatch& b, Source source, cudaStream_t stream,
                        const prefixhit::DeviceBlockIndex* index, prefixhit::Namespace ns,
                        const std::vector<Expected>& want, bool eagle_array = true) {
  const gpu::BatchLookupEngine engine(*b.coordinator);
  prefixhit::LookupBatch view = b.view();
  if (!eagle_array) {
    view.apply_eagle = {};
  }
  gpu::DeviceBatchBuffers buffers(view, engine.num_groups(), stream);
  const std::uint8_t* presence = nullptr;
  if (source == Source::presence) {
    presence = buffers.upload_presence(b.presence, stream);
  }
  buffers.fill_outputs(kPoison, stream);
  gpu::LookupTiming timing;
  if (source == Source::index) {
    engine.lookup(buffers.batch(), index->ref(), ns, buffers.output(), stream, &timing);
  } else {
    engine.lookup(buffers.batch(), presence, buffers.output(), stream, &timing);
  }
  EXPECT_GT(timing.device_us, 0.0);
  const prefixhit::BatchLookupResult got = buffers.download(stream);
  const std::vector<ErrorKind> status = buffers.download_status(stream);
  int mismatches = 0;
  std::int64_t first_failed = static_cast<std::int64_t>(b.requests.size());
  for (std::size_t r = 0; r < b.requests.size(); ++r) {
    if (want[r].error != ErrorKind::ok &&
        first_failed == static_cast<std::int64_t>(b.requests.size())) {
      first_failed = static_cast<std::int64_t>(r);
    }
    const auto ok = row_matches(got, status, r, want[r]);
    if (!ok && mismatches < 5) {
      ADD_FAILURE() << (source == Source::index ? "device index" : "presence table") << ": "
                    << b.describe_request(r) << ": " << ok.message();
    }
    mismatches += ok ? 0 : 1;
  }
  EXPECT_EQ(buffers.download_first_failed(stream), first_failed) << "first_failed";
  return mismatches;
}

/// The engine's host overloads against Coordinator::find_longest_cache_hits over one store
/// holding every request's keys: equal results, or the same exception type and message.
void check_host_overloads(const RandomBatch& b, const prefixhit::DeviceBlockIndex& index,
                          prefixhit::Namespace ns) {
  const gpu::BatchLookupEngine engine(*b.coordinator);
  KeySet all;
  for (std::size_t g = 0; g < b.keys.size(); ++g) {
    for (const BlockDigest& d : b.keys[g]) {
      all.insert(static_cast<int>(g), d);
    }
  }
  const prefixhit::LookupBatch view = b.view();
  std::optional<prefixhit::BatchLookupResult> want;
  std::string want_error;
  ErrorKind want_kind = ErrorKind::ok;
  try {
    want = b.coordinator->find_longest_cache_hits(view, all);
  } catch (const prefixhit::Error& e) {
    want_error = e.what();
    want_kind = e.kind();
  }
  try {
    const prefixhit::BatchLookupResult got = engine.find_longest_cache_hits(view, index, ns);
    ASSERT_TRUE(want.has_value()) << "expected " << prefixhit::to_string(want_kind) << ": "
                                  << want_error;
    EXPECT_EQ(got.num_requests, want->num_requests);
    EXPECT_EQ(got.num_groups, want->num_groups);
    EXPECT_EQ(got.hit_lengths, want->hit_lengths);
    EXPECT_EQ(got.num_blocks, want->num_blocks);
    EXPECT_EQ(got.num_placeholders, want->num_placeholders);
  } catch (const prefixhit::Error& e) {
    ASSERT_FALSE(want.has_value())
        << "unexpected " << prefixhit::to_string(e.kind()) << ": " << e.what();
    EXPECT_EQ(e.kind(), want_kind);
    EXPECT_EQ(std::string(e.what()), want_error);
  }
}

// ---- the vectors ----------------------------------------------------------------------------

std::vector<std::string> vector_files() {
  try {
    return prefixhit::conformance::collect_vector_files(
        {prefixhit::conformance::default_vectors_dir()});
  } catch (const std::exception&) {
    return {"<missing: " + prefixhit::conformance::default_vectors_dir() + ">"};
  }
}

std::string family_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string stem = std::filesystem::path(info.param).stem().string();
  for (char& ch : stem) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) {
      ch = '_';
    }
  }
  return stem.empty() ? "missing" : stem;
}

/// The vectors through the presence-table source: the store's answers for every (group, hash)
/// of the request, the widest table a runtime could hand over.
class PresenceBackend final : public prefixhit::conformance::Backend {
 public:
  std::string name() const override { return "gpu-presence"; }
  LookupResult find_longest_cache_hit(const Coordinator& coordinator,
                                      span<const BlockDigest> hashes, std::int64_t max_length,
                                      const KeySet& store, bool apply_eagle) override {
    return lookup(coordinator, hashes, max_length, apply_eagle,
                  [&](int g, const BlockDigest& d) { return store.contains(g, d); });
  }
  LookupResult load_mask(const Coordinator& coordinator, span<const BlockDigest> hashes,
                         std::int64_t token_len) override {
    return lookup(coordinator, hashes, token_len, false,
                  [](int, const BlockDigest&) { return true; });
  }

 private:
  template <class Present>
  LookupResult lookup(const Coordinator& coordinator, span<const BlockDigest> hashes,
                      std::int64_t max_length, bool apply_eagle, const Present& present) {
    const gpu::BatchLookupEngine engine(coordinator);
    const auto n = hashes.size();
    std::vector<std::uint8_t> table(static_cast<std::size_t>(coordinator.num_groups()) * n);
    for (int g = 0; g < coordinator.num_groups(); ++g) {
      for (std::size_t i = 0; i < n; ++i) {
        table[static_cast<std::size_t>(g) * n + i] = present(g, hashes[i]) ? 1 : 0;
      }
    }
    const std::vector<std::int64_t> offsets = {0, static_cast<std::int64_t>(n)};
    const std::vector<std::int64_t> max_lengths = {max_length};
    const std::vector<std::uint8_t> eagle = {static_cast<std::uint8_t>(apply_eagle)};
    prefixhit::LookupBatch batch;
    batch.digests = hashes;
    batch.offsets = offsets;
    batch.max_lengths = max_lengths;
    batch.apply_eagle = eagle;
    return engine.find_longest_cache_hits(batch, table).request(0);
  }
};

class GpuVectors : public ::testing::TestWithParam<std::string> {
 protected:
  /// Under PREFIXHIT_SMALL_GPU_TESTS (compute-sanitizer runs, where every launch is slow) only
  /// two families run here; the full set runs in the normal GPU test run and in
  /// `prefixhit conformance --backend gpu`.
  static bool skipped_when_small(const std::string& path) {
    const std::string stem = std::filesystem::path(path).stem().string();
    return small_tests() && stem != "dsv4" && stem != "vllm_unit_cases";
  }
};

TEST_P(GpuVectors, EveryCasePassesOnDeviceIndex) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::string& path = GetParam();
  if (skipped_when_small(path)) {
    GTEST_SKIP() << "PREFIXHIT_SMALL_GPU_TESTS: dsv4 and vllm_unit_cases only";
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << "conformance vectors not found: " << path;
  auto backend = prefixhit::conformance::make_gpu_backend();
  const auto result = prefixhit::conformance::run_file(path, *backend);
  EXPECT_GT(result.cases.size(), 0U);
  for (const auto& c : result.cases) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  }
}

TEST_P(GpuVectors, EveryCasePassesOnPresenceTable) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::string& path = GetParam();
  if (skipped_when_small(path)) {
    GTEST_SKIP() << "PREFIXHIT_SMALL_GPU_TESTS: dsv4 and vllm_unit_cases only";
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << "conformance vectors not found: " << path;
  PresenceBackend backend;
  const auto result = prefixhit::conformance::run_file(path, backend);
  EXPECT_GT(result.cases.size(), 0U);
  for (const auto& c : result.cases) {
    EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  }
}

INSTANTIATE_TEST_SUITE_P(Vectors, GpuVectors, ::testing::ValuesIn(vector_files()), family_name);

// ---- differential tests ---------------------------------------------------------------------

/// Random batches of every shape through both sources; `configs` batches of up to
/// `max_requests` requests each.
void differential(int configs, std::size_t max_requests, std::int64_t max_hashes) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) +
               " (replay: PREFIXHIT_TEST_SEED=" + std::to_string(seed) + ")");
  Rng rng(seed);
  std::size_t requests_run = 0;
  int failures = 0;
  for (int k = 0; k < configs && failures == 0; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    const auto count =
        static_cast<std::size_t>(rng.uniform(1, static_cast<std::int64_t>(max_requests)));
    const RandomBatch b = make_batch(rng, shape, count, max_hashes, k % 3 == 0 ? 7 : 0);
    const auto index = load_index(b, kNs);
    failures += check_device_arrays(b, Source::index, nullptr, index.get(), kNs, b.want_store);
    failures += check_device_arrays(b, Source::presence, nullptr, nullptr, kNs, b.want_plan);
    requests_run += count;
  }
  ::testing::Test::RecordProperty("requests", static_cast<int>(requests_run));
}

TEST(GpuBatchLookup, DifferentialRandomBatches) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  if (small_tests()) {
    differential(14, 24, 600);
  } else {
    differential(70, 96, 4000);
  }
}

TEST(GpuBatchLookup, LargeDifferentialThousandsOfRequests) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  for (int k = 0; k < kNumShapes; ++k) {
    const auto shape = static_cast<Shape>(k);
    const RandomBatch b = make_batch(rng, shape, small_tests() ? 64 : 1500, 3000, 11);
    const auto index = load_index(b, kNs);
    ASSERT_EQ(check_device_arrays(b, Source::index, nullptr, index.get(), kNs, b.want_store), 0)
        << shape_name(shape);
    ASSERT_EQ(check_device_arrays(b, Source::presence, nullptr, nullptr, kNs, b.want_plan), 0)
        << shape_name(shape);
  }
}

TEST(GpuBatchLookup, HostOverloadsMatchCpuBatchApi) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  int errors = 0;
  for (int k = 0; k < 3 * kNumShapes; ++k) {
    const auto shape = static_cast<Shape>(k % kNumShapes);
    const RandomBatch b =
        make_batch(rng, shape, static_cast<std::size_t>(rng.uniform(1, 40)), 2000);
    const auto index = load_index(b, kNs);
    check_host_overloads(b, *index, kNs);
    // The presence overload: the same rows as the CPU engine over each request's KeyPlan.
    const gpu::BatchLookupEngine engine(*b.coordinator);
    const auto first_error =
        std::find_if(b.want_plan.begin(), b.want_plan.end(),
                     [](const Expected& e) { return e.error != ErrorKind::ok; });
    if (first_error != b.want_plan.end()) {
      ++errors;
      try {
        engine.find_longest_cache_hits(b.view(), b.presence);
        ADD_FAILURE() << "expected " << prefixhit::to_string(first_error->error);
      } catch (const prefixhit::Error& e) {
        EXPECT_EQ(e.kind(), first_error->error);
        const std::string prefix =
            "request " + std::to_string(first_error - b.want_plan.begin()) + ": ";
        EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0U) << e.what();
      }
      continue;
    }
    const prefixhit::BatchLookupResult got = engine.find_longest_cache_hits(b.view(), b.presence);
    const std::vector<ErrorKind> ok(b.requests.size(), ErrorKind::ok);
    for (std::size_t r = 0; r < b.requests.size(); ++r) {
      EXPECT_TRUE(row_matches(got, ok, r, b.want_plan[r])) << b.describe_request(r);
    }
  }
  RecordProperty("batches_with_errors", errors);
}

TEST(GpuBatchLookup, HostOverloadsValidateLikeTheCpuEngine) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Rng rng(fresh_seed());
  const RandomBatch b = make_batch(rng, Shape::dsv4, 4, 400);
  const gpu::BatchLookupEngine engine(*b.coordinator);
  const auto index = load_index(b, kNs);
  prefixhit::LookupBatch bad = b.view();
  std::vector<std::int64_t> lengths = b.max_lengths;
  lengths[2] = std::int64_t{1} << 41;  // past the 2^40-token limit: refused before any lookup
  bad.max_lengths = lengths;
  EXPECT_THROW(engine.find_longest_cache_hits(bad, *index, kNs), prefixhit::InvalidArgument);
  EXPECT_THROW(engine.find_longest_cache_hits(bad, b.presence), prefixhit::InvalidArgument);
  const std::vector<std::uint8_t> wrong_table(b.presence.size() + 1);
  EXPECT_THROW(engine.find_longest_cache_hits(b.view(), wrong_table), prefixhit::InvalidArgument);
  EXPECT_THROW(engine.find_longest_cache_hits(b.view(), *index, prefixhit::kMaxNamespace + 1),
               prefixhit::InvalidArgument);
}

TEST(GpuBatchLookup, ApplyEagleArrayMayBeOmitted) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Rng rng(fresh_seed());
  for (int k = 0; k < kNumShapes; ++k) {
    RandomBatch b = make_batch(rng, static_cast<Shape>(k), 32, 1500);
    // With no apply_eagle array every request applies the drop.
    for (std::size_t r = 0; r < b.requests.size(); ++r) {
      const Request& req = b.requests[r];
      b.want_store[r] = expect_from([&] {
        return b.coordinator->find_longest_cache_hit(req.hashes, req.max_length, b.stores[r], true);
      });
    }
    const auto index = load_index(b, kNs);
    EXPECT_EQ(check_device_arrays(b, Source::index, nullptr, index.get(), kNs, b.want_store,
                                  /*eagle_array=*/false),
              0);
  }
}

TEST(GpuBatchLookup, OtherNamespacesSeeNothing) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Rng rng(fresh_seed());
  const RandomBatch b = make_batch(rng, Shape::multi_group, 48, 1500);
  const auto index = load_index(b, kNs);
  std::vector<Expected> empty;
  const KeySet nothing;
  for (const Request& req : b.requests) {
    empty.push_back(expect_from([&] {
      return b.coordinator->find_longest_cache_hit(req.hashes, req.max_length, nothing,
                                                   req.apply_eagle);
    }));
  }
  EXPECT_EQ(check_device_arrays(b, Source::index, nullptr, index.get(), kNs + 1, empty), 0);
}

TEST(GpuBatchLookup, AsyncCallsOnSeveralStreamsStayOrdered) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Rng rng(fresh_seed());
  const std::size_t requests = small_tests() ? 24 : 200;
  const RandomBatch a = make_batch(rng, Shape::dsv4, requests, 1500);
  const RandomBatch c = make_batch(rng, Shape::mamba_hybrid, requests, 1500);
  const auto index_a = load_index(a, kNs);
  cudaStream_t s1 = nullptr;
  cudaStream_t s2 = nullptr;
  PREFIXHIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  PREFIXHIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  {
    const gpu::BatchLookupEngine engine_a(*a.coordinator);
    const gpu::BatchLookupEngine engine_c(*c.coordinator);
    gpu::DeviceBatchBuffers buf_a(a.view(), engine_a.num_groups(), s1);
    gpu::DeviceBatchBuffers buf_c(c.view(), engine_c.num_groups(), s2);
    const std::uint8_t* presence_c = buf_c.upload_presence(c.presence, s2);
    for (int round = 0; round < 3; ++round) {
      buf_a.fill_outputs(kPoison, s1);
      buf_c.fill_outputs(kPoison, s2);
      engine_a.lookup_async(buf_a.batch(), index_a->ref(), kNs, buf_a.output(), s1);
      engine_c.lookup_async(buf_c.batch(), presence_c, buf_c.output(), s2);
      // download() synchronises its own stream only; each stream's results are complete.
      const auto got_a = buf_a.download(s1);
      const auto status_a = buf_a.download_status(s1);
      const auto got_c = buf_c.download(s2);
      const auto status_c = buf_c.download_status(s2);
      for (std::size_t r = 0; r < a.requests.size(); ++r) {
        ASSERT_TRUE(row_matches(got_a, status_a, r, a.want_store[r])) << a.describe_request(r);
      }
      for (std::size_t r = 0; r < c.requests.size(); ++r) {
        ASSERT_TRUE(row_matches(got_c, status_c, r, c.want_plan[r])) << c.describe_request(r);
      }
    }
  }
  PREFIXHIT_ASSERT_CUDA(cudaStreamDestroy(s1));
  PREFIXHIT_ASSERT_CUDA(cudaStreamDestroy(s2));
}

TEST(GpuBatchLookup, EmptyBatchesAndEmptyRequests) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 64;
  config.use_eagle = true;
  config.groups = {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)};
  const Coordinator coordinator(config);
  const gpu::BatchLookupEngine engine(coordinator);
  prefixhit::DeviceBlockIndex index;
  // No requests: no launch, first_failed = 0.
  const std::vector<std::int64_t> zero = {0};
  prefixhit::LookupBatch none;
  none.offsets = zero;
  gpu::DeviceBatchBuffers empty(none, engine.num_groups());
  empty.fill_outputs(kPoison);
  engine.lookup(empty.batch(), index.ref(), kNs, empty.output(), nullptr);
  EXPECT_EQ(empty.download_first_failed(), 0);
  const auto result = engine.find_longest_cache_hits(none, index, kNs);
  EXPECT_EQ(result.num_requests, 0U);
  EXPECT_EQ(result.num_groups, 2);
  // Requests without hashes: max_length 0..H-1 are valid and hit nothing.
  const std::vector<std::int64_t> offsets = {0, 0, 0};
  const std::vector<std::int64_t> lengths = {0, 15};
  prefixhit::LookupBatch blank;
  blank.offsets = offsets;
  blank.max_lengths = lengths;
  const auto got = engine.find_longest_cache_hits(blank, index, kNs);
  EXPECT_EQ(got.hit_lengths, (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(got.num_blocks, (std::vector<std::int64_t>{0, 0, 0, 0}));
}

TEST(GpuBatchLookup, DeviceArrayCallsRejectMissingArrays) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  Config config;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator coordinator(config);
  const gpu::BatchLookupEngine engine(coordinator);
  gpu::DeviceBatch batch;
  batch.num_requests = 1;
  gpu::DeviceLookupOutput out;
  EXPECT_THROW(engine.lookup_async(batch, nullptr, out, nullptr), prefixhit::InvalidArgument);
  batch.num_requests = -1;
  EXPECT_THROW(engine.lookup_async(batch, nullptr, out, nullptr), prefixhit::InvalidArgument);
}

// ---- without a device -----------------------------------------------------------------------

TEST(GpuBatchLookupWithoutDevice, EntryPointsSayUnavailable) {
  if (prefixhit::testing::gpu_unavailable_reason().empty()) {
    GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  }
  EXPECT_FALSE(gpu::device_available());
  EXPECT_NE(gpu::describe_device().find("no CUDA device"), std::string::npos)
      << gpu::describe_device();
  Config config;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator coordinator(config);
  EXPECT_THROW(gpu::BatchLookupEngine{coordinator}, prefixhit::Unavailable);
  EXPECT_THROW(prefixhit::conformance::make_gpu_backend(), prefixhit::Unavailable);
  EXPECT_THROW(gpu::RouterScoreEngine{coordinator}, prefixhit::Unavailable);
  const prefixhit::ResidencyIndex residency(prefixhit::ResidencyOptions{2, 1, 16, 1});
  EXPECT_THROW(gpu::DeviceResidencyIndex{residency}, prefixhit::Unavailable);
}

}  // namespace
