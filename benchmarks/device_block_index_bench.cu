// DeviceBlockIndex benchmarks (Google Benchmark, CUDA-event timing).
//
//   prefixhit_gpu_benchmarks --benchmark_filter=DeviceIndex
//   PREFIXHIT_INDEX_BENCH_KEYS=100000000   minimum keys in the big tables (default 100M)
//
// Cases: contains with hits and misses reported apart at load factors 0.5, 0.8 and 0.9 (the
// table is filled to that load of its capacity, with at least PREFIXHIT_INDEX_BENCH_KEYS keys),
// insert and erase of the same number of keys, and the time per call of small batches (1K and
// 64K keys). Counters:
//   items_per_second   keys per second (device time between CUDA events)
//   bytes_per_key      device memory of the table divided by its keys
//   model_bytes        DRAM bytes one key moves by the model of docs/design/device-index.md
//   pct_d2d            model_bytes * keys/s as a percentage of the device-to-device cudaMemcpy
//                      bandwidth (read + write) measured in the same run
//   us_per_call        wall time of one synchronous call (small batches)
// Without a usable GPU every case reports an error ("skipped: ...") and the run exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "prefixhit/device_block_index.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::DeviceBlockIndex;
using prefixhit::DeviceBlockIndexOptions;

/// Why the GPU benchmarks cannot run, or an empty string.
std::string gpu_unavailable() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("skipped: no usable CUDA device (") + cudaGetErrorName(status) + ")";
  }
  return count == 0 ? "skipped: no CUDA device" : "";
}

bool skip_without_gpu(benchmark::State& state) {
  static const std::string reason = gpu_unavailable();
  if (!reason.empty()) {
    state.SkipWithError(reason.c_str());
    return true;
  }
  return false;
}

#define BENCH_CUDA(call)                                                                           \
  do {                                                                                             \
    const cudaError_t bench_status = (call);                                                       \
    if (bench_status != cudaSuccess) {                                                             \
      state.SkipWithError((std::string(#call) + ": " + cudaGetErrorString(bench_status)).c_str()); \
      return;                                                                                      \
    }                                                                                              \
  } while (false)

std::size_t min_keys() {
  if (const char* env = std::getenv("PREFIXHIT_INDEX_BENCH_KEYS")) {
    const unsigned long long value = std::strtoull(env, nullptr, 10);
    if (value >= 1024) {
      return static_cast<std::size_t>(value);
    }
  }
  return 100'000'000;
}

__device__ __forceinline__ std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// Pseudo-random digests, distinct per (seed, index) in practice.
__global__ void fill_random_digests(BlockDigest* out, std::size_t n, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    ulonglong2* p = reinterpret_cast<ulonglong2*>(out + i);
    const std::uint64_t base = seed * 0x9E3779B97F4A7C15ULL + 4 * i;
    p[0] = make_ulonglong2(mix(base), mix(base + 1));
    p[1] = make_ulonglong2(mix(base + 2), mix(base + 3));
  }
}

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      ptr = nullptr;
    }
  }
  ~DeviceMemory() { cudaFree(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

/// The device-to-device copy bandwidth (bytes read + written per second), measured once.
double d2d_bandwidth() {
  static const double bandwidth = [] {
    const std::size_t bytes = std::size_t{1} << 31;
    DeviceMemory a(bytes);
    DeviceMemory b(bytes);
    if (a.ptr == nullptr || b.ptr == nullptr) {
      return 0.0;
    }
    cudaMemcpy(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice);  // warm up
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start);
    constexpr int kReps = 5;
    for (int r = 0; r < kReps; ++r) {
      cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice);
    }
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return 2.0 * static_cast<double>(bytes) * kReps / (static_cast<double>(ms) * 1e-3);
  }();
  return bandwidth;
}

/// A table holding load * capacity() keys (at least min_keys()), the keys present and as many
/// absent ones, and an output buffer. One fixture lives at a time (they are large).
struct Fixture {
  double load = 0;
  std::size_t keys = 0;
  std::unique_ptr<DeviceBlockIndex> index;
  std::unique_ptr<DeviceMemory> present;
  std::unique_ptr<DeviceMemory> absent;
  std::unique_ptr<DeviceMemory> out;

  BlockDigest* present_keys() const { return static_cast<BlockDigest*>(present->ptr); }
  BlockDigest* absent_keys() const { return static_cast<BlockDigest*>(absent->ptr); }
  std::uint8_t* out_bytes() const { return static_cast<std::uint8_t*>(out->ptr); }
};

/// Returns nullptr (and the reason) when the fixture cannot be built.
Fixture* fixture(double load, std::size_t wanted_keys, std::string& error) {
  static std::unique_ptr<Fixture> current;
  if (current && current->load == load && current->keys >= wanted_keys) {
    return current.get();
  }
  current.reset();  // free the previous tables first
  auto f = std::make_unique<Fixture>();
  f->load = load;
  try {
    DeviceBlockIndexOptions options;
    options.initial_capacity =
        static_cast<std::size_t>(static_cast<double>(wanted_keys) / load) + 1;
    options.max_load_factor = 0.95;  // so that 0.9 does not grow the table
    options.seed = 0x5EED;
    f->index = std::make_unique<DeviceBlockIndex>(options);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
  // The index rounds its capacity up (12-slot buckets, a power of two of them): fill what it
  // has to the named load, so that a case named 80 runs at 0.8.
  f->keys = static_cast<std::size_t>(load * static_cast<double>(f->index->capacity()));
  f->present = std::make_unique<DeviceMemory>(f->keys * sizeof(BlockDigest));
  f->absent = std::make_unique<DeviceMemory>(f->keys * sizeof(BlockDigest));
  f->out = std::make_unique<DeviceMemory>(f->keys);
  if (f->present->ptr == nullptr || f->absent->ptr == nullptr || f->out->ptr == nullptr) {
    error = "cudaMalloc of the benchmark keys failed";
    return nullptr;
  }
  fill_random_digests<<<1024, 256>>>(f->present_keys(), f->keys, 1);
  fill_random_digests<<<1024, 256>>>(f->absent_keys(), f->keys, 2);
  try {
    f->index->insert(1, 0, f->present_keys(), f->keys);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
  current = std::move(f);
  return current.get();
}

/// Times `work` (enqueued on the default stream) between two CUDA events; seconds.
template <class Work>
double time_device(const Work& work) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  work();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) * 1e-3;
}

void report(benchmark::State& state, const Fixture& f, double keys_total, double seconds_total,
            double model_bytes_per_key) {
  state.SetItemsProcessed(static_cast<std::int64_t>(keys_total));
  const prefixhit::DeviceBlockIndexStats stats = f.index->stats();
  state.counters["keys_in_table"] = static_cast<double>(stats.size);
  state.counters["load"] = static_cast<double>(stats.size) / static_cast<double>(stats.capacity);
  state.counters["bytes_per_key"] =
      static_cast<double>(stats.bytes) / static_cast<double>(stats.size == 0 ? 1 : stats.size);
  state.counters["model_bytes"] = model_bytes_per_key;
  const double bandwidth = d2d_bandwidth();
  if (bandwidth > 0 && seconds_total > 0) {
    state.counters["pct_d2d"] =
        100.0 * model_bytes_per_key * keys_total / seconds_total / bandwidth;
    state.counters["d2d_GBps"] = bandwidth * 1e-9;
  }
}

// Bytes per key by the model of docs/design/device-index.md (32-byte sectors): the query digest,
// the home bucket header's first sector (its tags), and for a hit the header sector holding the
// meta word (the first one for lanes 0-3) and the digest sectors; one output byte.
constexpr double kHitBytes = 32 + 32 + 32 + 32 + 1;
constexpr double kMissBytes = 32 + 32 + 1;
constexpr double kInsertBytes = 32 + 32 + 32 + 32;  // query, tag sector, meta and digest writes
constexpr double kEraseBytes = 32 + 32 + 32 + 32;   // query, tags, meta and digest compare

void BM_DeviceIndexContains(benchmark::State& state, bool hits) {
  if (skip_without_gpu(state)) {
    return;
  }
  const double load = static_cast<double>(state.range(0)) / 100.0;
  std::string error;
  Fixture* f = fixture(load, min_keys(), error);
  if (f == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const BlockDigest* keys = hits ? f->present_keys() : f->absent_keys();
  double seconds = 0;
  for (auto _ : state) {
    const double s = time_device(
        [&] { f->index->contains_async(1, 0, keys, f->keys, f->out_bytes(), nullptr); });
    state.SetIterationTime(s);
    seconds += s;
  }
  BENCH_CUDA(cudaGetLastError());
  // Check the answers once: all hits or all misses.
  std::uint8_t first = 2;
  std::uint8_t last = 2;
  BENCH_CUDA(cudaMemcpy(&first, f->out_bytes(), 1, cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(&last, f->out_bytes() + f->keys - 1, 1, cudaMemcpyDeviceToHost));
  if (first != (hits ? 1 : 0) || last != (hits ? 1 : 0)) {
    state.SkipWithError("contains returned wrong answers");
    return;
  }
  report(state, *f, static_cast<double>(f->keys) * static_cast<double>(state.iterations()), seconds,
         hits ? kHitBytes : kMissBytes);
}

/// Insert (erase): every iteration clears the table (refills it), untimed, then inserts
/// (erases) all the fixture's keys, timed.
void BM_DeviceIndexInsertErase(benchmark::State& state, bool insert) {
  if (skip_without_gpu(state)) {
    return;
  }
  const double load = static_cast<double>(state.range(0)) / 100.0;
  std::string error;
  Fixture* f = fixture(load, min_keys(), error);
  if (f == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  double seconds = 0;
  try {
    for (auto _ : state) {
      if (insert) {
        f->index->clear();
      } else if (f->index->size() != f->keys) {
        f->index->insert(1, 0, f->present_keys(), f->keys);
      }
      const double s = time_device([&] {
        if (insert) {
          f->index->insert_async(1, 0, f->present_keys(), f->keys, nullptr);
        } else {
          f->index->erase_async(1, 0, f->present_keys(), f->keys, nullptr);
        }
      });
      state.SetIterationTime(s);
      seconds += s;
    }
    // Leave the table full for the next case.
    if (f->index->size() != f->keys) {
      f->index->insert(1, 0, f->present_keys(), f->keys);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  report(state, *f, static_cast<double>(f->keys) * static_cast<double>(state.iterations()), seconds,
         insert ? kInsertBytes : kEraseBytes);
}

/// Small synchronous calls: wall time per call (launch, kernel, synchronisation).
void BM_DeviceIndexSmallBatch(benchmark::State& state, int op) {
  if (skip_without_gpu(state)) {
    return;
  }
  const auto batch = static_cast<std::size_t>(state.range(0));
  std::string error;
  // A 16M-key table is enough for latency: small batches never leave the L2 working set anyway.
  Fixture* f = fixture(0.8, std::min<std::size_t>(min_keys(), std::size_t{1} << 24), error);
  if (f == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const BlockDigest* fresh = f->absent_keys();
  double seconds = 0;
  try {
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      if (op == 0) {
        f->index->contains(1, 0, f->present_keys(), batch, f->out_bytes());
      } else {
        f->index->insert(1, 0, fresh, batch);
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (op == 1) {
        state.PauseTiming();
        f->index->erase(1, 0, fresh, batch);  // keep the load where it was
        state.ResumeTiming();
      }
      const double s = std::chrono::duration<double>(t1 - t0).count();
      state.SetIterationTime(s);
      seconds += s;
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(batch * state.iterations()));
  state.counters["us_per_call"] =
      seconds * 1e6 / static_cast<double>(state.iterations() == 0 ? 1 : state.iterations());
}

// Load factors in percent; hits and misses of one load share its (large) table.
BENCHMARK_CAPTURE(BM_DeviceIndexContains, hit, true)
    ->Arg(50)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexContains, miss, false)
    ->Arg(50)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexContains, hit, true)
    ->Arg(90)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexContains, miss, false)
    ->Arg(90)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexContains, hit, true)
    ->Arg(80)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexContains, miss, false)
    ->Arg(80)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_DeviceIndexInsertErase, insert, true)
    ->Arg(80)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_DeviceIndexInsertErase, erase, false)
    ->Arg(80)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_DeviceIndexSmallBatch, contains, 0)
    ->Arg(1 << 10)
    ->Arg(1 << 16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DeviceIndexSmallBatch, insert, 1)
    ->Arg(1 << 10)
    ->Arg(1 << 16)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
