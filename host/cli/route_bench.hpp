// `prefixhit route-bench`'s workload and measurements (route_bench.cpp): workers holding random
// shared documents in a residency index, batches of requests, and the timings of each way of
// routing them. The command's options, registration and output live in route_bench_command.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::cli {

struct RouteBenchOptions {
  std::string workload = "dsv4-flash";
  int workers = 128;
  std::int64_t requests = 1024;
  std::int64_t min_tokens = 8192;
  std::int64_t max_tokens = 131072;
  int documents = 32;
  double hold = 0.25;    ///< chance a worker holds a document
  double evict = 0.01;   ///< chance a held window-group key was evicted
  int depth_levels = 0;  ///< 0: a worker holds a document to any block; else to k/levels of it
  int naive_every = 8;   ///< run the naive W-lookup loop on every n-th request
  int top_k = 4;
  std::uint64_t seed = 1;
  bool json = false;
  bool gpu_table = false;  ///< also time the GPU path's host table pass, both fills
  int only_8k = 0;  ///< > 0: only score the 8K-token requests alone, this many rounds (profiling)
};

/// Per-request figures: wall-clock and thread CPU microseconds.
struct Latencies {
  std::vector<double> wall;
  std::vector<double> cpu;
};

/// A batch of requests, each also available as a batch of one.
struct Requests {
  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> max_lengths;
  std::vector<std::int64_t> tokens;

  LookupBatch one(std::size_t r) const {
    const auto off = static_cast<std::size_t>(offsets[r]);
    return LookupBatch{span<const BlockDigest>(digests.data() + off,
                                               static_cast<std::size_t>(offsets[r + 1]) - off),
                       span<const std::int64_t>(offset_pair_.data() + 2 * r, 2),
                       span<const std::int64_t>(max_lengths.data() + r, 1),
                       {}};
  }
  LookupBatch all() const { return LookupBatch{digests, offsets, max_lengths, {}}; }
  /// Builds the per-request offsets one() uses; call once the requests are all in.
  void finish() {
    offset_pair_.clear();
    for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
      offset_pair_.push_back(0);
      offset_pair_.push_back(offsets[r + 1] - offsets[r]);
    }
  }

 private:
  std::vector<std::int64_t> offset_pair_;
};

/// The workload, deterministic for the seed: documents (shared prefixes of min..max tokens),
/// each worker holding some of them to a random depth in the residency index (less a few
/// window-group evictions), and two batches of requests sharing the documents' prefixes.
struct RouteBenchWorkload {
  explicit RouteBenchWorkload(const RouteBenchOptions& o);

  Coordinator coordinator;
  std::mt19937_64 rng;  ///< the workload's draws, then the top-k's worker loads
  ResidencyIndex residency;
  ResidencyMemory memory;    ///< once filled
  std::size_t inserted = 0;  ///< (key, worker) pairs the inserts added
  double insert_s = 0;       ///< wall time of the inserts alone
  Requests requests;         ///< min..max tokens
  Requests small;            ///< 8K tokens each
};

/// --only-8k: the 8K-token requests scored alone, cold and warm, over a number of rounds.
struct Only8kProfile {
  Latencies cold;
  Latencies warm;  ///< CPU only: each request scored once untimed first
  RouterScores scores;
};
Only8kProfile profile_8k(const RouteBenchWorkload& w, int rounds);

/// The scorer against the naive loop (one single-store lookup per worker) on the sampled
/// requests, and how many per-worker results differ.
struct NaiveComparison {
  std::vector<std::size_t> sample;  ///< every n-th request
  double naive_s = 0;
  double scored_s = 0;
  double naive_cpu_s = 0;
  double scored_cpu_s = 0;
  double warm_naive_cpu_s = 0;   ///< keys in cache: each request once untimed first
  double warm_scored_cpu_s = 0;  ///< ditto
  std::size_t checked = 0;       ///< worker results compared
  std::size_t mismatches = 0;
};

/// The GPU path's host table pass with one fill, per sampled request.
struct GpuTableFigures {
  const char* fill = "";
  double index_reads = 0;
  double cpu_ms = 0;  ///< thread CPU, with the classes
  double finder_runs = 0;
  double classes = 0;
};

struct RouteBenchResults {
  RouterScores scores;  ///< the whole batch, 1 thread
  double batch1_s = 0;  ///< the whole batch scored on 1 thread
  double batch2_s = 0;  ///< ... and on 2
  NaiveComparison naive;
  Latencies all_1t;  ///< each request scored alone, 1 thread
  Latencies all_2t;
  Latencies small_1t;  ///< each 8K-token request scored alone
  Latencies small_2t;
  double top_k_s = 0;
  std::int64_t best_hit_tokens = 0;        ///< summed over requests: the hit of each's top worker
  std::vector<GpuTableFigures> gpu_table;  ///< every_probe, reached (with --gpu-table)
};

/// Every measurement of the run, in the order the command has always taken them. nullopt when a
/// scoring or lookup returned nothing (which would make its timing meaningless).
std::optional<RouteBenchResults> measure_route_bench(RouteBenchWorkload& w,
                                                     const RouteBenchOptions& o);

}  // namespace prefixhit::cli
