// CPU engine micro-benchmarks on the bench workloads: one lookup per iteration against the
// resident index (full store, a hole, a store written by store_mask), the masks, and the batch
// API. The same figures come from `prefixhit bench`; see docs/perf/cpu.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host/cli/bench.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::BlockIndex;
using prefixhit::Coordinator;
using prefixhit::Namespace;
using prefixhit::span;
using prefixhit::cli::StoreShape;

// Distinct requests stored (and so the resident index's size): one request's keys stay in
// cache; 64 requests' keys (3.5M for dsv4-flash) make most probes DRAM misses, as in a store
// that holds many prompts.
constexpr std::int64_t kRequests = 8;
constexpr std::int64_t kLargeStore = 64;

/// A workload's coordinator, requests and a resident index with one namespace per shape.
struct Fixture {
  prefixhit::cli::Workload workload;
  std::unique_ptr<Coordinator> coordinator;
  std::vector<BlockDigest> hashes;
  BlockIndex index;
  std::int64_t n = 0;
  std::int64_t requests = 0;

  Fixture(const std::string& name, std::int64_t stored)
      : workload(prefixhit::cli::make_workload(name)), requests(stored) {
    coordinator = std::make_unique<Coordinator>(workload.config);
    hashes = prefixhit::cli::make_request_hashes(workload, requests, 7);
    n = workload.tokens / workload.config.hash_block_size;
    for (std::int64_t r = 0; r < requests; ++r) {
      for (StoreShape shape :
           {StoreShape::full, StoreShape::with_hole, StoreShape::store_mask_roundtrip}) {
        prefixhit::cli::fill_store(index, static_cast<Namespace>(shape), *coordinator, request(r),
                                   workload.tokens, shape);
      }
    }
  }
  span<const BlockDigest> request(std::int64_t r) const {
    return {hashes.data() + r * n, static_cast<std::size_t>(n)};
  }
};

Fixture& fixture(const std::string& name, std::int64_t stored = kRequests) {
  static std::map<std::pair<std::string, std::int64_t>, std::unique_ptr<Fixture>> cache;
  auto& slot = cache[{name, stored}];
  if (!slot) {
    slot = std::make_unique<Fixture>(name, stored);
  }
  return *slot;
}

void BM_Lookup(benchmark::State& state, const std::string& name, StoreShape shape) {
  Fixture& f = fixture(name, state.range(0));
  const BlockIndex::View view = f.index.view(static_cast<Namespace>(shape));
  std::int64_t r = 0;
  for (auto _ : state) {
    auto result = f.coordinator->find_longest_cache_hit(f.request(r), f.workload.tokens - 1, view);
    benchmark::DoNotOptimize(result.hit_length);
    r = (r + 1) % f.requests;
  }
  state.counters["tokens"] = static_cast<double>(f.workload.tokens);
  state.counters["stored_keys"] = static_cast<double>(f.index.size());
}

void BM_StoreMask(benchmark::State& state, const std::string& name) {
  Fixture& f = fixture(name);
  const std::int64_t aligned = f.coordinator->align_lookup_length(f.workload.tokens);
  for (auto _ : state) {
    auto masks = f.coordinator->store_mask(aligned, 0, f.workload.tokens);
    benchmark::DoNotOptimize(masks.data());
  }
}

void BM_LookupMask(benchmark::State& state, const std::string& name) {
  Fixture& f = fixture(name);
  const std::int64_t aligned = f.coordinator->align_lookup_length(f.workload.tokens);
  for (auto _ : state) {
    auto masks = f.coordinator->lookup_mask(aligned);
    benchmark::DoNotOptimize(masks.data());
  }
}

void BM_LoadMask(benchmark::State& state, const std::string& name) {
  Fixture& f = fixture(name);
  for (auto _ : state) {
    auto result = f.coordinator->load_mask(f.n, f.workload.tokens - 1);
    benchmark::DoNotOptimize(result.hit_length);
  }
}

void BM_BatchLookup(benchmark::State& state, const std::string& name) {
  Fixture& f = fixture(name);
  std::vector<std::int64_t> offsets;
  for (std::int64_t r = 0; r <= kRequests; ++r) {
    offsets.push_back(r * f.n);
  }
  const std::vector<std::int64_t> max_lengths(kRequests, f.workload.tokens - 1);
  prefixhit::LookupBatch batch;
  batch.digests = f.hashes;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  prefixhit::BatchOptions options;
  options.num_threads = static_cast<int>(state.range(0));
  const BlockIndex::View view = f.index.view(static_cast<Namespace>(StoreShape::full));
  for (auto _ : state) {
    auto result = f.coordinator->find_longest_cache_hits(batch, view, options);
    benchmark::DoNotOptimize(result.hit_lengths.data());
  }
  state.SetItemsProcessed(state.iterations() * kRequests);
}

/// A batch of 64 short prompts (prefixes of the stored requests, state.range(0) tokens) against
/// the large store, on state.range(1) threads with workers always started
/// (min_seconds_per_worker = 0): what a worker costs beside the work it takes. Workers come from
/// the process's pool; when each call started its own threads, two threads took 1.8-2.6x one
/// thread's time for 4096-token prompts (docs/perf/cpu.md, fourteenth round).
void BM_BatchPrefixes(benchmark::State& state, const std::string& name) {
  Fixture& f = fixture(name, kLargeStore);
  const std::int64_t tokens = std::min<std::int64_t>(state.range(0), f.workload.tokens);
  const std::int64_t m = tokens / f.workload.config.hash_block_size;
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  for (std::int64_t r = 0; r < kLargeStore; ++r) {
    const span<const BlockDigest> request = f.request(r);
    digests.insert(digests.end(), request.begin(), request.begin() + m);
    offsets.push_back(static_cast<std::int64_t>(digests.size()));
  }
  const std::vector<std::int64_t> max_lengths(kLargeStore, tokens);
  prefixhit::LookupBatch batch;
  batch.digests = digests;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  prefixhit::BatchOptions options;
  options.num_threads = static_cast<int>(state.range(1));
  options.min_seconds_per_worker = 0;
  const BlockIndex::View view = f.index.view(static_cast<Namespace>(StoreShape::full));
  for (auto _ : state) {
    auto result = f.coordinator->find_longest_cache_hits(batch, view, options);
    benchmark::DoNotOptimize(result.hit_lengths.data());
  }
  state.SetItemsProcessed(state.iterations() * kLargeStore);
}

void register_all() {
  for (const std::string& name : prefixhit::cli::workload_names()) {
    benchmark::RegisterBenchmark(("lookup_full_store/" + name).c_str(), BM_Lookup, name,
                                 StoreShape::full)
        ->Arg(1)
        ->Arg(kLargeStore);
    benchmark::RegisterBenchmark(("lookup_with_hole/" + name).c_str(), BM_Lookup, name,
                                 StoreShape::with_hole)
        ->Arg(1);
    benchmark::RegisterBenchmark(("lookup_store_mask_roundtrip/" + name).c_str(), BM_Lookup, name,
                                 StoreShape::store_mask_roundtrip)
        ->Arg(1);
    benchmark::RegisterBenchmark(("store_mask/" + name).c_str(), BM_StoreMask, name);
    benchmark::RegisterBenchmark(("lookup_mask/" + name).c_str(), BM_LookupMask, name);
    benchmark::RegisterBenchmark(("load_mask/" + name).c_str(), BM_LoadMask, name);
    benchmark::RegisterBenchmark(("batch_lookup_8/" + name).c_str(), BM_BatchLookup, name)
        ->Arg(1)
        ->Arg(2)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("batch_prefixes_64/dsv4-flash", BM_BatchPrefixes, "dsv4-flash")
      ->ArgsProduct({{4096, 16384}, {1, 2}})
      ->ArgNames({"tokens", "threads"})
      ->UseRealTime();
}

const int registered = (register_all(), 0);

}  // namespace
