// Google Benchmark suite of the GPU batch lookup (gpu.hpp).
//
// Batches of 1, 64 and 1024 requests of 131072 tokens for the dsv4-flash, fa-3swa and
// fa-mamba-align workloads, over full stores and stores with a hole, through both existence
// sources (the resident DeviceBlockIndex and a caller's presence table). Three families:
//   BatchLookupDevice    device time per batch (CUDA events around the kernel, manual time)
//   BatchLookupEndToEnd  wall time of the synchronous device-array call: launch + stream sync
//   BatchLookupGraph     the same call replayed as a captured CUDA graph
// Counters: requests/s and keys probed/s (keys the warp probe asks its source for, counted by
// the probe's CPU twin on request 0; every request of a batch has the same shape).
// Targets on an H200 (issue 4): 1024 dsv4-flash requests <= 200 us device time; one request
// <= 20 us end to end. Without a usable device nothing is registered and the binary says why.
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/gather.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/tabulate.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/cli/bench.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/warp_probe.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/gpu.hpp"

namespace {

using prefixhit::BlockDigest;
using prefixhit::Config;
namespace gpu = prefixhit::gpu;

constexpr std::int64_t kTokens = 131072;
constexpr std::int64_t kMaxRequests = 1024;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

/// Distinct pseudo-random digests: digest i is four splitmix64 outputs of (seed, i).
struct DigestOf {
  std::uint64_t seed;
  __host__ __device__ BlockDigest operator()(std::int64_t i) const {
    BlockDigest d;
    auto* words = reinterpret_cast<std::uint64_t*>(&d);
    std::uint64_t state = seed ^ (static_cast<std::uint64_t>(i) * 0xD1B54A32D192ED03ULL);
    for (int w = 0; w < 4; ++w) {
      std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      words[w] = z ^ (z >> 31);
    }
    return d;
  }
};

/// The digest index of the k-th kept chunk key of one group over all requests: block j of
/// request r is keyed by hashes[r*n + (j+1)*s - 1] (SEMANTICS.md 1.2); `hole` (or -1) is the
/// block left out of every request.
struct ChunkKeyIndex {
  std::int64_t n;
  std::int64_t s;
  std::int64_t kept;  ///< kept blocks per request
  std::int64_t hole;
  __host__ __device__ std::int64_t operator()(std::int64_t k) const {
    const std::int64_t r = k / kept;
    std::int64_t j = k % kept;
    if (hole >= 0 && j >= hole) {
      ++j;
    }
    return r * n + (j + 1) * s - 1;
  }
};

/// The presence table of the same store: cell (r, g, i) is set iff hash i is a kept block key
/// of group g.
struct PresenceOf {
  std::int64_t n;
  int groups;
  std::int64_t s[prefixhit::kMaxGroups];
  std::int64_t hole[prefixhit::kMaxGroups];
  __host__ __device__ std::uint8_t operator()(std::int64_t cell) const {
    const std::int64_t within = cell % (groups * n);
    const auto g = static_cast<int>(within / n);
    const std::int64_t i = within % n;
    if ((i + 1) % s[g] != 0) {
      return 0;
    }
    return (i + 1) / s[g] - 1 == hole[g] ? 0 : 1;
  }
};

/// Counts the keys the warp probe asks for: its CPU twin over the presence table of request 0.
struct CountingTable {
  prefixhit::detail::PresenceTableSource table;
  std::int64_t* probes;
  bool contains(int group_id, std::int64_t index) const {
    ++*probes;
    return table.contains(group_id, index);
  }
};

enum class StoreShape { full, with_hole };
enum class Source { index, presence };

/// One workload on the device: 1024 requests' digests, an index holding both store shapes
/// (one namespace each), a presence table per shape, output arrays, and the key counts.
struct Dataset {
  std::string name;
  std::unique_ptr<prefixhit::Coordinator> coordinator;
  std::unique_ptr<gpu::BatchLookupEngine> engine;
  std::unique_ptr<prefixhit::DeviceBlockIndex> index;
  std::int64_t n = 0;
  std::int64_t max_length = 0;
  BlockDigest* digests = nullptr;
  std::int64_t* offsets = nullptr;
  std::int64_t* max_lengths = nullptr;
  std::uint8_t* presence[2] = {nullptr, nullptr};
  gpu::DeviceLookupOutput out;
  std::int64_t keys_per_request[2][2] = {};  ///< [store shape][source]
  std::vector<void*> allocations;

  ~Dataset() {
    for (void* p : allocations) {
      cudaFree(p);
    }
  }
  template <class T>
  T* alloc(std::size_t count) {
    void* p = nullptr;
    check(cudaMalloc(&p, count * sizeof(T) + 1), "cudaMalloc");
    allocations.push_back(p);
    return static_cast<T*>(p);
  }
  gpu::DeviceBatch batch(std::int64_t requests) const {
    gpu::DeviceBatch b;
    b.digests = digests;
    b.offsets = offsets;
    b.max_lengths = max_lengths;
    b.num_requests = requests;
    return b;
  }
};

/// Keys the kernel with `Lookahead` probes for request 0 (whose table is `table`).
template <int Lookahead>
std::int64_t count_probes(const Dataset& d, const prefixhit::detail::PresenceTableSource& table) {
  std::int64_t probes = 0;
  std::int64_t scratch[2 * prefixhit::kMaxGroups + 1];
  prefixhit::ErrorKind status = prefixhit::ErrorKind::ok;
  const prefixhit::detail::KernelWarpProbe<CountingTable, Lookahead> probe{
      &d.coordinator->plan(), CountingTable{table, &probes}, d.n};
  prefixhit::detail::lookup_request(
      d.coordinator->plan(), d.n, d.max_length, true, probe, 0, 0, 1,
      prefixhit::detail::RequestOutputs{scratch, scratch + 1, scratch + 1 + prefixhit::kMaxGroups,
                                        &status});
  return probes;
}

std::unique_ptr<Dataset> build_dataset(const std::string& name, const Config& config) {
  auto d = std::make_unique<Dataset>();
  d->name = name;
  d->coordinator = std::make_unique<prefixhit::Coordinator>(config);
  d->engine = std::make_unique<gpu::BatchLookupEngine>(*d->coordinator);
  const int groups = d->coordinator->num_groups();
  const std::int64_t h = config.hash_block_size;
  d->n = kTokens / h;
  d->max_length = kTokens - 1;  // as `prefixhit bench`
  const std::int64_t total = d->n * kMaxRequests;
  const auto policy = thrust::cuda::par;

  d->digests = d->alloc<BlockDigest>(static_cast<std::size_t>(total));
  thrust::tabulate(policy, d->digests, d->digests + total, DigestOf{0x5EEDULL});
  std::vector<std::int64_t> offsets(kMaxRequests + 1);
  for (std::int64_t r = 0; r <= kMaxRequests; ++r) {
    offsets[static_cast<std::size_t>(r)] = r * d->n;
  }
  d->offsets = d->alloc<std::int64_t>(offsets.size());
  check(cudaMemcpy(d->offsets, offsets.data(), offsets.size() * sizeof(std::int64_t),
                   cudaMemcpyHostToDevice),
        "offsets");
  const std::vector<std::int64_t> lengths(kMaxRequests, d->max_length);
  d->max_lengths = d->alloc<std::int64_t>(lengths.size());
  check(cudaMemcpy(d->max_lengths, lengths.data(), lengths.size() * sizeof(std::int64_t),
                   cudaMemcpyHostToDevice),
        "max_lengths");

  // Both store shapes: every block key of every group, and the same less the block covering
  // the token at 3/4 of the prompt (the CLI bench's with_hole).
  std::size_t keys_total = 0;
  for (const prefixhit::GroupSpec& g : config.groups) {
    keys_total += static_cast<std::size_t>(2 * (kTokens / g.block_size) * kMaxRequests);
  }
  prefixhit::DeviceBlockIndexOptions options;
  options.initial_capacity = keys_total * 5 / 4 + 1;
  d->index = std::make_unique<prefixhit::DeviceBlockIndex>(options);
  BlockDigest* keys = d->alloc<BlockDigest>(static_cast<std::size_t>(total));
  for (int shape = 0; shape < 2; ++shape) {
    PresenceOf presence_of{d->n, groups, {}, {}};
    for (int g = 0; g < groups; ++g) {
      const std::int64_t b = config.groups[static_cast<std::size_t>(g)].block_size;
      const std::int64_t s = b / h;
      const std::int64_t blocks = d->n / s;
      const std::int64_t hole = shape == 1 ? kTokens * 3 / 4 / b : -1;
      const std::int64_t kept = blocks - (hole >= 0 && hole < blocks ? 1 : 0);
      const std::int64_t count = kept * kMaxRequests;
      const auto map = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0),
                                                       ChunkKeyIndex{d->n, s, kept, hole});
      thrust::gather(policy, map, map + count, d->digests, keys);
      d->index->insert(static_cast<prefixhit::Namespace>(shape), g, keys,
                       static_cast<std::size_t>(count));
      presence_of.s[g] = s;
      presence_of.hole[g] = hole;
    }
    const std::int64_t cells = total * groups;
    d->presence[shape] = d->alloc<std::uint8_t>(static_cast<std::size_t>(cells));
    thrust::tabulate(policy, d->presence[shape], d->presence[shape] + cells, presence_of);

    // Keys probed per request, by the warp probe's CPU twin on request 0's table.
    std::vector<std::uint8_t> row(static_cast<std::size_t>(groups * d->n));
    for (std::size_t c = 0; c < row.size(); ++c) {
      row[c] = presence_of(static_cast<std::int64_t>(c));
    }
    const prefixhit::detail::PresenceTableSource table{row.data(), d->n};
    d->keys_per_request[shape][static_cast<int>(Source::index)] =
        count_probes<prefixhit::detail::kIndexLookahead>(*d, table);
    d->keys_per_request[shape][static_cast<int>(Source::presence)] =
        count_probes<prefixhit::detail::kPresenceLookahead>(*d, table);
  }
  const auto cells = static_cast<std::size_t>(kMaxRequests * groups);
  d->out.hit_lengths = d->alloc<std::int64_t>(kMaxRequests);
  d->out.num_blocks = d->alloc<std::int64_t>(cells);
  d->out.num_placeholders = d->alloc<std::int64_t>(cells);
  d->out.status = d->alloc<prefixhit::ErrorKind>(kMaxRequests);
  check(cudaDeviceSynchronize(), "dataset");
  return d;
}

Dataset& dataset(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Dataset>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    cache.clear();  // one workload on the device at a time
    const Config config = prefixhit::cli::make_workload(name).config;
    it = cache.emplace(name, build_dataset(name, config)).first;
  }
  return *it->second;
}

void lookup(const Dataset& d, std::int64_t requests, StoreShape shape, Source source,
            cudaStream_t stream, gpu::LookupTiming* timing) {
  const auto s = static_cast<int>(shape);
  if (source == Source::index) {
    d.engine->lookup(d.batch(requests), d.index->ref(), static_cast<prefixhit::Namespace>(s), d.out,
                     stream, timing);
  } else {
    d.engine->lookup(d.batch(requests), d.presence[s], d.out, stream, timing);
  }
}

void set_counters(benchmark::State& state, const Dataset& d, std::int64_t requests,
                  StoreShape shape, Source source, double device_s) {
  const double keys = static_cast<double>(
      d.keys_per_request[static_cast<int>(shape)][static_cast<int>(source)] * requests);
  state.counters["requests/s"] = benchmark::Counter(static_cast<double>(requests),
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["keys_probed"] = keys;
  if (device_s > 0) {
    state.counters["keys_probed/s(device)"] =
        keys * static_cast<double>(state.iterations()) / device_s;
  }
}

void device_time(benchmark::State& state, const std::string& workload, StoreShape shape,
                 Source source) {
  const Dataset& d = dataset(workload);
  const std::int64_t requests = state.range(0);
  gpu::LookupTiming timing;
  lookup(d, requests, shape, source, nullptr, &timing);  // warm-up
  double device_s = 0;
  for (auto _ : state) {
    lookup(d, requests, shape, source, nullptr, &timing);
    state.SetIterationTime(timing.device_us * 1e-6);
    device_s += timing.device_us * 1e-6;
  }
  set_counters(state, d, requests, shape, source, device_s);
  state.counters["device_us"] = benchmark::Counter(
      device_s * 1e6 /
      static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1)));
}

void end_to_end(benchmark::State& state, const std::string& workload, StoreShape shape,
                Source source) {
  const Dataset& d = dataset(workload);
  const std::int64_t requests = state.range(0);
  lookup(d, requests, shape, source, nullptr, nullptr);
  for (auto _ : state) {
    lookup(d, requests, shape, source, nullptr, nullptr);
  }
  set_counters(state, d, requests, shape, source, 0);
}

void graph_replay(benchmark::State& state, const std::string& workload, StoreShape shape,
                  Source source) {
  const Dataset& d = dataset(workload);
  const std::int64_t requests = state.range(0);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  const auto s = static_cast<int>(shape);
  if (source == Source::index) {
    d.engine->lookup_async(d.batch(requests), d.index->ref(), static_cast<prefixhit::Namespace>(s),
                           d.out, stream);
  } else {
    d.engine->lookup_async(d.batch(requests), d.presence[s], d.out, stream);
  }
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  check(cudaStreamSynchronize(stream), "sync");
  for (auto _ : state) {
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream), "sync");
  }
  set_counters(state, d, requests, shape, source, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

bool register_all() {
  if (!gpu::device_available()) {
    std::fprintf(stderr, "prefixhit batch lookup benchmarks skipped: %s\n",
                 gpu::describe_device().c_str());
    return false;
  }
  for (const char* workload : {"dsv4-flash", "fa-3swa", "fa-mamba-align"}) {
    for (const StoreShape shape : {StoreShape::full, StoreShape::with_hole}) {
      for (const Source source : {Source::index, Source::presence}) {
        const std::string suffix = std::string(workload) + "/" +
                                   (shape == StoreShape::full ? "full" : "hole") + "/" +
                                   (source == Source::index ? "index" : "presence");
        const std::string w = workload;
        benchmark::RegisterBenchmark(
            ("BatchLookupDevice/" + suffix).c_str(),
            [=](benchmark::State& st) { device_time(st, w, shape, source); })
            ->ArgName("requests")
            ->Arg(1)
            ->Arg(64)
            ->Arg(kMaxRequests)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(
            ("BatchLookupEndToEnd/" + suffix).c_str(),
            [=](benchmark::State& st) { end_to_end(st, w, shape, source); })
            ->ArgName("requests")
            ->Arg(1)
            ->Arg(64)
            ->Arg(kMaxRequests)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(
            ("BatchLookupGraph/" + suffix).c_str(),
            [=](benchmark::State& st) { graph_replay(st, w, shape, source); })
            ->ArgName("requests")
            ->Arg(1)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}

const bool kRegistered = register_all();

}  // namespace
