// CPU BlockIndex benchmarks: bulk contains (hits and misses apart), the lookup path
// (View::probe windows of 8 and 64 keys, as the finders call it) and bulk insert.
//
//   prefixhit_benchmarks --benchmark_filter=BlockIndex
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "prefixhit/block_index.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::BlockIndex;
using prefixhit::BlockIndexOptions;
using prefixhit::span;

std::vector<BlockDigest> random_digests(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<BlockDigest> out(n);
  for (auto& d : out) {
    for (int w = 0; w < 4; ++w) {
      const std::uint64_t word = rng();
      std::memcpy(d.bytes.data() + 8 * w, &word, 8);
    }
  }
  return out;
}

/// An index with a capacity of `capacity` slots filled to a load of 0.78 (just under the 0.8
/// growth limit: the worst steady state), and as many absent keys; built once per size.
struct Fixture {
  std::unique_ptr<BlockIndex> index;
  std::vector<BlockDigest> present;
  std::vector<BlockDigest> absent;
};

const Fixture& fixture(std::size_t capacity) {
  static std::vector<std::pair<std::size_t, std::unique_ptr<Fixture>>> cache;
  for (auto& entry : cache) {
    if (entry.first == capacity) {
      return *entry.second;
    }
  }
  auto f = std::make_unique<Fixture>();
  BlockIndexOptions options;
  options.initial_capacity = capacity;
  options.seed = 42;
  f->index = std::make_unique<BlockIndex>(options);
  const auto n = static_cast<std::size_t>(0.78 * static_cast<double>(capacity));
  f->present = random_digests(n, 1);
  f->absent = random_digests(n, 2);
  f->index->insert(1, 0, span<const BlockDigest>(f->present.data(), f->present.size()));
  cache.emplace_back(capacity, std::move(f));
  return *cache.back().second;
}

void set_counters(benchmark::State& state, const Fixture& f, std::int64_t keys) {
  state.SetItemsProcessed(keys);
  state.counters["load"] =
      static_cast<double>(f.index->size()) / static_cast<double>(f.index->capacity());
  state.counters["keys"] = static_cast<double>(f.index->size());
  // Seconds per key (printed with an SI prefix, e.g. "18n" = 18 ns per key).
  state.counters["per_key"] = benchmark::Counter(
      static_cast<double>(keys), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_BlockIndexContains(benchmark::State& state, bool hits) {
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  const std::vector<BlockDigest>& keys = hits ? f.present : f.absent;
  constexpr std::size_t kBatch = 4096;
  std::vector<std::uint8_t> out(kBatch);
  std::size_t offset = 0;
  for (auto _ : state) {
    if (offset + kBatch > keys.size()) {
      offset = 0;
    }
    f.index->contains(1, 0, span<const BlockDigest>(keys.data() + offset, kBatch), out.data());
    benchmark::DoNotOptimize(out.data());
    offset += kBatch;
  }
  set_counters(state, f, static_cast<std::int64_t>(state.iterations()) * kBatch);
}

/// The lookup path: View::probe windows as the finders issue them (one shared lock each).
void BM_BlockIndexViewProbe(benchmark::State& state, bool hits) {
  const int window = static_cast<int>(state.range(1));
  const Fixture& f = fixture(static_cast<std::size_t>(state.range(0)));
  const std::vector<BlockDigest>& keys = hits ? f.present : f.absent;
  const BlockIndex::View view = f.index->view(1);
  std::int64_t first = 0;
  const auto limit = static_cast<std::int64_t>(keys.size()) - window;
  std::uint64_t sink = 0;
  for (auto _ : state) {
    if (first >= limit) {
      first = 0;
    }
    sink ^= view.probe(0, keys.data(), first, 1, window);
    first += window;
  }
  benchmark::DoNotOptimize(sink);
  set_counters(state, f, static_cast<std::int64_t>(state.iterations()) * window);
}

/// Bulk insert of fresh keys into an index reserved for them (no rehash in the timed part).
void BM_BlockIndexInsert(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<BlockDigest> keys = random_digests(n, 3);
  BlockIndexOptions options;
  options.initial_capacity = static_cast<std::size_t>(static_cast<double>(n) / 0.7);
  for (auto _ : state) {
    state.PauseTiming();
    auto index = std::make_unique<BlockIndex>(options);
    state.ResumeTiming();
    benchmark::DoNotOptimize(index->insert(1, 0, span<const BlockDigest>(keys.data(), n)));
    state.PauseTiming();
    index.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
  state.counters["per_key"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK_CAPTURE(BM_BlockIndexContains, hit, true)->Arg(1 << 17)->Arg(1 << 21)->Arg(1 << 24);
BENCHMARK_CAPTURE(BM_BlockIndexContains, miss, false)->Arg(1 << 17)->Arg(1 << 21)->Arg(1 << 24);
BENCHMARK_CAPTURE(BM_BlockIndexViewProbe, hit, true)
    ->Args({1 << 17, 8})
    ->Args({1 << 17, 64})
    ->Args({1 << 21, 8})
    ->Args({1 << 21, 64})
    ->Args({1 << 24, 64});
BENCHMARK_CAPTURE(BM_BlockIndexViewProbe, miss, false)
    ->Args({1 << 17, 8})
    ->Args({1 << 17, 64})
    ->Args({1 << 21, 8})
    ->Args({1 << 21, 64})
    ->Args({1 << 24, 64});
BENCHMARK(BM_BlockIndexInsert)->Arg(1 << 16)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

}  // namespace
