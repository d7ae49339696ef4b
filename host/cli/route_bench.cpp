// `prefixhit route-bench`'s workload and measurements: fills a residency index (workers holding
// random shared documents to random depths, with evictions), scores every worker for every
// request in one pass (score_workers), checks the scores against the naive loop of one
// single-store lookup per worker, and times both, per-request latency at 1 and 2 threads, the
// top-k and (optionally) the GPU path's host table pass.
#include "host/cli/route_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "host/cli/bench.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

ScoreOptions one_thread() {
  ScoreOptions options;
  options.num_threads = 1;
  return options;
}

/// Shared prefixes of min..max tokens (multiples of the scheduler block).
std::vector<std::vector<BlockDigest>> make_documents(const RouteBenchOptions& o,
                                                     const Config& config, std::mt19937_64& rng) {
  const std::int64_t step = config.scheduler_block_size;
  std::vector<std::vector<BlockDigest>> docs(static_cast<std::size_t>(o.documents));
  for (auto& doc : docs) {
    const std::int64_t t =
        std::uniform_int_distribution<std::int64_t>(o.min_tokens / step, o.max_tokens / step)(rng) *
        step;
    doc = make_request_hashes(make_workload(o.workload, t), 1, rng());
  }
  return docs;
}

/// Each worker holds some documents to a random depth, minus a few evictions in the window
/// groups (holes that split workers at window boundaries). Times the inserts alone.
void hold_documents(const RouteBenchOptions& o, const std::vector<std::vector<BlockDigest>>& docs,
                    RouteBenchWorkload& w) {
  const Coordinator& c = w.coordinator;
  const Config& config = c.config();
  const std::int64_t h = config.hash_block_size;
  const std::int64_t step = config.scheduler_block_size;
  std::mt19937_64& rng = w.rng;
  std::uniform_real_distribution<double> unit(0, 1);
  for (int wk = 0; wk < o.workers; ++wk) {
    for (const auto& doc : docs) {
      if (unit(rng) >= o.hold) {
        continue;
      }
      const auto depth_blocks = static_cast<std::int64_t>(doc.size()) * h / step;
      std::int64_t depth =
          (1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(depth_blocks))) * step;
      if (o.depth_levels > 0) {
        const auto level =
            static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(o.depth_levels)) + 1;
        depth = std::max<std::int64_t>(1, depth_blocks * level / o.depth_levels) * step;
      }
      const span<const BlockDigest> prefix(doc.data(), static_cast<std::size_t>(depth / h));
      for (std::size_t g = 0; g < config.groups.size(); ++g) {
        std::vector<BlockDigest> keys = c.chunk_keys(prefix, config.groups[g].block_size);
        if ((config.groups[g].kind == GroupKind::sliding_window ||
             config.groups[g].kind == GroupKind::sliding_window_mla) &&
            o.evict > 0) {
          keys.erase(std::remove_if(keys.begin(), keys.end(),
                                    [&](const BlockDigest&) { return unit(rng) < o.evict; }),
                     keys.end());
        }
        const auto start = clock_type::now();
        w.inserted += w.residency.insert(static_cast<WorkerId>(wk), 0, static_cast<int>(g), keys);
        w.insert_s += seconds_since(start);
      }
    }
  }
}

/// Requests of T tokens (uniform in [lo, hi], multiples of the scheduler block): a document's
/// prefix, then fresh tokens. max_length = T - 1, as a scheduler asks for a prompt of T tokens.
Requests make_requests(std::mt19937_64& rng, const Config& config,
                       const std::vector<std::vector<BlockDigest>>& docs, std::int64_t count,
                       std::int64_t lo, std::int64_t hi) {
  Requests out;
  const std::int64_t h = config.hash_block_size;
  const std::int64_t step = config.scheduler_block_size;
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int64_t t =
        std::uniform_int_distribution<std::int64_t>(lo / step, hi / step)(rng) * step;
    const auto& doc = docs[rng() % docs.size()];
    const auto n = static_cast<std::size_t>(t / h);
    const std::size_t shared = std::min(n, doc.size());
    out.digests.insert(out.digests.end(), doc.begin(),
                       doc.begin() + static_cast<std::ptrdiff_t>(shared));
    for (std::size_t i = shared; i < n; ++i) {
      BlockDigest d;
      for (auto& b : d.bytes) {
        b = static_cast<std::uint8_t>(rng());
      }
      out.digests.push_back(d);
    }
    out.offsets.push_back(static_cast<std::int64_t>(out.digests.size()));
    out.max_lengths.push_back(t - 1);
    out.tokens.push_back(t);
  }
  out.finish();
  return out;
}

/// Latencies (us, wall and thread CPU) of scoring each request alone, on `threads` threads
/// splitting the requests.
Latencies per_request_latencies(const Coordinator& c, const Requests& req,
                                const ResidencyIndex& residency, int threads, bool warm = false) {
  const std::size_t r = req.max_lengths.size();
  Latencies lat{std::vector<double>(r, 0), std::vector<double>(r, 0)};
  const ScoreOptions options = one_thread();
  auto body = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      if (warm && score_workers(c, req.one(i), residency, options).hit_lengths.empty()) {
        std::abort();  // untimed: brings the request's keys into cache
      }
      const double cpu = thread_cpu_seconds();
      const auto start = clock_type::now();
      const RouterScores s = score_workers(c, req.one(i), residency, options);
      lat.wall[i] = seconds_since(start) * 1e6;
      lat.cpu[i] = (thread_cpu_seconds() - cpu) * 1e6;
      if (s.hit_lengths.empty()) {
        std::abort();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(body, r * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads),
                      r * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads));
  }
  body(0, r / static_cast<std::size_t>(threads));
  for (auto& t : pool) {
    t.join();
  }
  return lat;
}

/// The whole batch scored on 1 thread (after a warm-up) and on 2.
void time_batch(const RouteBenchWorkload& w, RouteBenchResults& out) {
  const ScoreOptions one = one_thread();
  ScoreOptions two;
  two.num_threads = 2;
  (void)score_workers(w.coordinator, w.requests.all(), w.residency, one);  // warm up
  auto start = clock_type::now();
  out.scores = score_workers(w.coordinator, w.requests.all(), w.residency, one);
  out.batch1_s = seconds_since(start);
  start = clock_type::now();
  (void)score_workers(w.coordinator, w.requests.all(), w.residency, two);
  out.batch2_s = seconds_since(start);
}

/// The sampled requests scored alone, in turn. False if a scoring returned nothing.
bool time_scored_alone(const RouteBenchWorkload& w, NaiveComparison& n) {
  const ScoreOptions one = one_thread();
  const double cpu = thread_cpu_seconds();
  const auto start = clock_type::now();
  for (const std::size_t r : n.sample) {
    if (score_workers(w.coordinator, w.requests.one(r), w.residency, one).hit_lengths.empty()) {
      return false;
    }
  }
  n.scored_s = seconds_since(start);
  n.scored_cpu_s = thread_cpu_seconds() - cpu;
  return true;
}

/// The naive loop on the sampled requests: one single-store lookup per worker against that
/// worker's view. Returns the results, request-major.
std::vector<LookupResult> time_naive_loop(const RouteBenchWorkload& w, int workers,
                                          NaiveComparison& n) {
  std::vector<LookupResult> naive;
  naive.reserve(n.sample.size() * static_cast<std::size_t>(workers));
  const double cpu = thread_cpu_seconds();
  const auto start = clock_type::now();
  for (const std::size_t r : n.sample) {
    const LookupBatch b = w.requests.one(r);
    for (int wk = 0; wk < workers; ++wk) {
      const ResidencyIndex::WorkerView view(w.residency, static_cast<WorkerId>(wk), 0);
      naive.push_back(w.coordinator.find_longest_cache_hit(b.digests, b.max_lengths[0], view));
    }
  }
  n.naive_s = seconds_since(start);
  n.naive_cpu_s = thread_cpu_seconds() - cpu;
  return naive;
}

/// Compares the batch's scores with the naive loop's results, worker by worker.
void count_mismatches(const RouterScores& scores, const std::vector<LookupResult>& naive,
                      int workers, NaiveComparison& n) {
  for (std::size_t i = 0; i < n.sample.size(); ++i) {
    for (int wk = 0; wk < workers; ++wk) {
      const LookupResult& want =
          naive[i * static_cast<std::size_t>(workers) + static_cast<std::size_t>(wk)];
      const LookupResult got = scores.result(n.sample[i], wk);
      bool same = want.hit_length == got.hit_length && want.groups.size() == got.groups.size();
      for (std::size_t g = 0; same && g < want.groups.size(); ++g) {
        same = want.groups[g].num_blocks == got.groups[g].num_blocks &&
               want.groups[g].num_placeholders == got.groups[g].num_placeholders;
      }
      n.mismatches += same ? 0 : 1;
      ++n.checked;
    }
  }
}

/// Warm: each sampled request once untimed, then timed, for each loop in turn (its keys and
/// hashes in cache): the compute part of each, without the first-touch misses both share.
/// False if a scoring or lookup returned nothing.
bool time_warm(const RouteBenchWorkload& w, int workers, NaiveComparison& n) {
  const ScoreOptions one = one_thread();
  for (const std::size_t r : n.sample) {
    const LookupBatch b = w.requests.one(r);
    for (int pass = 0; pass < 2; ++pass) {
      const double cpu = thread_cpu_seconds();
      if (score_workers(w.coordinator, b, w.residency, one).hit_lengths.empty()) {
        return false;
      }
      n.warm_scored_cpu_s += pass == 1 ? thread_cpu_seconds() - cpu : 0;
    }
    for (int pass = 0; pass < 2; ++pass) {
      const double cpu = thread_cpu_seconds();
      for (int wk = 0; wk < workers; ++wk) {
        const ResidencyIndex::WorkerView view(w.residency, static_cast<WorkerId>(wk), 0);
        if (w.coordinator.find_longest_cache_hit(b.digests, b.max_lengths[0], view)
                .groups.empty()) {
          return false;
        }
      }
      n.warm_naive_cpu_s += pass == 1 ? thread_cpu_seconds() - cpu : 0;
    }
  }
  return true;
}

/// The naive loop on every n-th request against the same requests scored alone, for the ratio;
/// also checks the scores are exact. Each loop runs over all sampled requests in turn, so
/// neither warms the cache for the other. nullopt if a scoring or lookup returned nothing.
std::optional<NaiveComparison> compare_with_naive(const RouteBenchWorkload& w,
                                                  const RouteBenchOptions& o,
                                                  const RouterScores& scores) {
  NaiveComparison n;
  for (std::size_t r = 0; r < w.requests.max_lengths.size();
       r += static_cast<std::size_t>(o.naive_every)) {
    n.sample.push_back(r);
  }
  if (!time_scored_alone(w, n)) {
    return std::nullopt;
  }
  const std::vector<LookupResult> naive = time_naive_loop(w, o.workers, n);
  count_mismatches(scores, naive, o.workers, n);
  if (!time_warm(w, o.workers, n)) {
    return std::nullopt;
  }
  return n;
}

/// The top-k under random worker loads; sums the hit of each request's best worker.
void time_top_k(RouteBenchWorkload& w, const RouteBenchOptions& o, RouteBenchResults& out) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> load(static_cast<std::size_t>(o.workers));
  for (double& l : load) {
    l = unit(w.rng);
  }
  const auto start = clock_type::now();
  const std::vector<std::int32_t> top = top_k_workers(out.scores, o.top_k, load);
  out.top_k_s = seconds_since(start);
  for (std::size_t r = 0; r < out.scores.num_requests; ++r) {
    out.best_hit_tokens +=
        out.scores.hit_lengths[r * static_cast<std::size_t>(o.workers) +
                               static_cast<std::size_t>(std::max(top[r * o.top_k], 0))];
  }
}

/// The GPU path's host pass (no GPU needed) on the sampled requests, each fill over all of
/// them in turn: keys read, thread CPU time (with the classes), and the classes (GPU threads).
std::vector<GpuTableFigures> time_gpu_table(const RouteBenchWorkload& w,
                                            const std::vector<std::size_t>& sample) {
  const ScoreOptions one = one_thread();
  std::vector<GpuTableFigures> out;
  for (const gpu::TableFill fill : {gpu::TableFill::every_probe, gpu::TableFill::reached}) {
    std::size_t reads = 0;
    std::size_t runs = 0;
    std::size_t classes = 0;
    double table_s = 0;
    for (const std::size_t r : sample) {
      const LookupBatch b = w.requests.one(r);
      const double cpu = thread_cpu_seconds();
      gpu::WorkerClasses k;  // the reached pass's own classes, else build_worker_classes'
      const gpu::WorkerSetTable t =
          gpu::build_worker_set_table(w.coordinator, b, w.residency, one, fill, &k);
      table_s += thread_cpu_seconds() - cpu;
      reads += t.index_reads;
      runs += t.finder_runs;
      classes += k.num_classes();
    }
    const auto per = [&](double x) { return x / static_cast<double>(sample.size()); };
    out.push_back({fill == gpu::TableFill::reached ? "reached" : "every_probe",
                   per(static_cast<double>(reads)), per(table_s) * 1e3,
                   per(static_cast<double>(runs)), per(static_cast<double>(classes))});
  }
  return out;
}

}  // namespace

RouteBenchWorkload::RouteBenchWorkload(const RouteBenchOptions& o)
    : coordinator(make_workload(o.workload, o.max_tokens).config),
      rng(o.seed),
      residency(ResidencyOptions{o.workers, 1, 1 << 16, 0}) {
  const Config& config = coordinator.config();
  const std::vector<std::vector<BlockDigest>> docs = make_documents(o, config, rng);
  hold_documents(o, docs, *this);
  memory = residency.memory();
  requests = make_requests(rng, config, docs, o.requests, o.min_tokens, o.max_tokens);
  small = make_requests(rng, config, docs, o.requests, 8192, 8192);
}

Only8kProfile profile_8k(const RouteBenchWorkload& w, int rounds) {
  Only8kProfile p;
  for (int round = 0; round < rounds; ++round) {
    const Latencies l = per_request_latencies(w.coordinator, w.small, w.residency, 1);
    p.cold.wall.insert(p.cold.wall.end(), l.wall.begin(), l.wall.end());
    p.cold.cpu.insert(p.cold.cpu.end(), l.cpu.begin(), l.cpu.end());
    const Latencies lw = per_request_latencies(w.coordinator, w.small, w.residency, 1, true);
    p.warm.cpu.insert(p.warm.cpu.end(), lw.cpu.begin(), lw.cpu.end());
  }
  p.scores = score_workers(w.coordinator, w.small.all(), w.residency, one_thread());
  return p;
}

std::optional<RouteBenchResults> measure_route_bench(RouteBenchWorkload& w,
                                                     const RouteBenchOptions& o) {
  RouteBenchResults out;
  time_batch(w, out);
  std::optional<NaiveComparison> naive = compare_with_naive(w, o, out.scores);
  if (!naive) {
    return std::nullopt;
  }
  out.naive = std::move(*naive);
  out.all_1t = per_request_latencies(w.coordinator, w.requests, w.residency, 1);
  out.all_2t = per_request_latencies(w.coordinator, w.requests, w.residency, 2);
  out.small_1t = per_request_latencies(w.coordinator, w.small, w.residency, 1);
  out.small_2t = per_request_latencies(w.coordinator, w.small, w.residency, 2);
  time_top_k(w, o, out);
  if (o.gpu_table) {
    out.gpu_table = time_gpu_table(w, out.naive.sample);
  }
  return out;
}

}  // namespace prefixhit::cli
