// `prefixhit route-bench`: a synthetic multi-worker routing workload. It fills a residency index
// (workers holding random shared documents to random depths, with evictions), scores every
// worker for every request in one pass (score_workers), checks the scores against the naive loop
// of one single-store lookup per worker, and reports the speed ratio, per-request latency
// percentiles at 1 and 2 threads, top-k cost and memory per (key, worker) pair.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <time.h>  // NOLINT(modernize-deprecated-headers): clock_gettime

#include <nlohmann/json.hpp>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::cli {

namespace {

using clock_type = std::chrono::steady_clock;

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

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

/// CPU time of the calling thread: on a shared host, the code's own cost without the time other
/// jobs held the core (wall-clock percentiles there are scheduler slices).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// Per-request figures: wall-clock and thread CPU microseconds.
struct Latencies {
  std::vector<double> wall;
  std::vector<double> cpu;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

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
  void finish() {
    offset_pair_.clear();
    for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
      offset_pair_.push_back(0);
      offset_pair_.push_back(offsets[r + 1] - offsets[r]);
    }
  }
  LookupBatch all() const { return LookupBatch{digests, offsets, max_lengths, {}}; }

 private:
  std::vector<std::int64_t> offset_pair_;
};

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
  ScoreOptions options;
  options.num_threads = 1;
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

nlohmann::json percentiles(const Latencies& lat) {
  return {{"p50", percentile(lat.wall, 0.5)},
          {"p99", percentile(lat.wall, 0.99)},
          {"cpu_p50", percentile(lat.cpu, 0.5)},
          {"cpu_p99", percentile(lat.cpu, 0.99)}};
}

int run_route_bench(const RouteBenchOptions& o) {
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    throw InvalidArgument("--workers must be in [1, " + std::to_string(kMaxWorkers) + "]");
  }
  if (o.requests < 1 || o.documents < 1 || o.naive_every < 1 || o.top_k < 1 || o.depth_levels < 0) {
    throw InvalidArgument("--requests, --documents, --naive-every and --top-k must be positive");
  }
  if (o.min_tokens < 1 || o.max_tokens < o.min_tokens) {
    throw InvalidArgument("--min-tokens must be positive and at most --max-tokens");
  }
  const Workload w = make_workload(o.workload, o.max_tokens);
  const Coordinator c(w.config);
  const Config& config = c.config();
  std::mt19937_64 rng(o.seed);
  const std::int64_t h = config.hash_block_size;
  const std::int64_t step = config.scheduler_block_size;

  // Documents: shared prefixes of min..max tokens.
  std::vector<std::vector<BlockDigest>> docs(static_cast<std::size_t>(o.documents));
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const std::int64_t t =
        std::uniform_int_distribution<std::int64_t>(o.min_tokens / step, o.max_tokens / step)(rng) *
        step;
    docs[d] = make_request_hashes(make_workload(o.workload, t), 1, rng());
  }

  // Residency: each worker holds some documents to a random depth, minus a few evictions in
  // the window groups (holes that split workers at window boundaries).
  ResidencyIndex residency(ResidencyOptions{o.workers, 1, 1 << 16, 0});
  std::uniform_real_distribution<double> unit(0, 1);
  std::size_t inserted = 0;
  double insert_s = 0;
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
        inserted += residency.insert(static_cast<WorkerId>(wk), 0, static_cast<int>(g), keys);
        insert_s += seconds_since(start);
      }
    }
  }
  const ResidencyMemory mem = residency.memory();

  const Requests req = make_requests(rng, config, docs, o.requests, o.min_tokens, o.max_tokens);
  const Requests small = make_requests(rng, config, docs, o.requests, 8192, 8192);
  ScoreOptions one;
  one.num_threads = 1;
  if (o.only_8k > 0) {
    // Profiling: nothing but the 8K-token requests scored alone, so a profile shows only them.
    Latencies all;
    Latencies warm;
    for (int round = 0; round < o.only_8k; ++round) {
      const Latencies l = per_request_latencies(c, small, residency, 1);
      all.wall.insert(all.wall.end(), l.wall.begin(), l.wall.end());
      all.cpu.insert(all.cpu.end(), l.cpu.begin(), l.cpu.end());
      const Latencies lw = per_request_latencies(c, small, residency, 1, true);
      warm.cpu.insert(warm.cpu.end(), lw.cpu.begin(), lw.cpu.end());
    }
    const RouterScores s = score_workers(c, small.all(), residency, one);
    const auto n8 = static_cast<double>(o.requests);
    std::printf(
        "8K, 1t, %d rounds: wall p50/p99 %.1f/%.1f  cpu p50/p99 %.1f/%.1f us; per request %.1f "
        "classes (%.1f finder runs), %.0f index reads, %.0f probes; warm (scored twice) cpu "
        "p50/p99 %.1f/%.1f us\n",
        o.only_8k, percentile(all.wall, 0.5), percentile(all.wall, 0.99), percentile(all.cpu, 0.5),
        percentile(all.cpu, 0.99), static_cast<double>(s.classes) / n8,
        static_cast<double>(s.runs) / n8, static_cast<double>(s.index_reads) / n8,
        static_cast<double>(s.probes) / n8, percentile(warm.cpu, 0.5), percentile(warm.cpu, 0.99));
    return 0;
  }

  // Whole batch, 1 and 2 threads.
  ScoreOptions two;
  two.num_threads = 2;
  (void)score_workers(c, req.all(), residency, one);  // warm up
  auto start = clock_type::now();
  const RouterScores scores = score_workers(c, req.all(), residency, one);
  const double batch1_s = seconds_since(start);
  start = clock_type::now();
  (void)score_workers(c, req.all(), residency, two);
  const double batch2_s = seconds_since(start);

  // Naive loop on every n-th request: W single-store lookups against each worker's view;
  // the same requests scored alone for the ratio. Also checks the scores are exact.
  // Each loop runs over all sampled requests in turn, so neither warms the cache for the other.
  double naive_s = 0;
  double scored_s = 0;
  std::size_t checked = 0;
  std::size_t mismatches = 0;
  std::vector<std::size_t> sample;
  for (std::size_t r = 0; r < req.max_lengths.size();
       r += static_cast<std::size_t>(o.naive_every)) {
    sample.push_back(r);
  }
  double cpu = thread_cpu_seconds();
  start = clock_type::now();
  for (const std::size_t r : sample) {
    if (score_workers(c, req.one(r), residency, one).hit_lengths.empty()) {
      return 1;
    }
  }
  scored_s = seconds_since(start);
  const double scored_cpu_s = thread_cpu_seconds() - cpu;
  std::vector<LookupResult> naive;
  naive.reserve(sample.size() * static_cast<std::size_t>(o.workers));
  cpu = thread_cpu_seconds();
  start = clock_type::now();
  for (const std::size_t r : sample) {
    const LookupBatch b = req.one(r);
    for (int wk = 0; wk < o.workers; ++wk) {
      const ResidencyIndex::WorkerView view(residency, static_cast<WorkerId>(wk), 0);
      naive.push_back(c.find_longest_cache_hit(b.digests, b.max_lengths[0], view));
    }
  }
  naive_s = seconds_since(start);
  const double naive_cpu_s = thread_cpu_seconds() - cpu;
  for (std::size_t i = 0; i < sample.size(); ++i) {
    for (int wk = 0; wk < o.workers; ++wk) {
      const LookupResult& want =
          naive[i * static_cast<std::size_t>(o.workers) + static_cast<std::size_t>(wk)];
      const LookupResult got = scores.result(sample[i], wk);
      bool same = want.hit_length == got.hit_length && want.groups.size() == got.groups.size();
      for (std::size_t g = 0; same && g < want.groups.size(); ++g) {
        same = want.groups[g].num_blocks == got.groups[g].num_blocks &&
               want.groups[g].num_placeholders == got.groups[g].num_placeholders;
      }
      mismatches += same ? 0 : 1;
      ++checked;
    }
  }

  // Warm: each sampled request once untimed, then timed, for each loop in turn (its keys and
  // hashes in cache): the compute part of each, without the first-touch misses both share.
  double warm_scored_cpu_s = 0;
  double warm_naive_cpu_s = 0;
  for (const std::size_t r : sample) {
    const LookupBatch b = req.one(r);
    for (int pass = 0; pass < 2; ++pass) {
      cpu = thread_cpu_seconds();
      if (score_workers(c, b, residency, one).hit_lengths.empty()) {
        return 1;
      }
      warm_scored_cpu_s += pass == 1 ? thread_cpu_seconds() - cpu : 0;
    }
    for (int pass = 0; pass < 2; ++pass) {
      cpu = thread_cpu_seconds();
      for (int wk = 0; wk < o.workers; ++wk) {
        const ResidencyIndex::WorkerView view(residency, static_cast<WorkerId>(wk), 0);
        if (c.find_longest_cache_hit(b.digests, b.max_lengths[0], view).groups.empty()) {
          return 1;
        }
      }
      warm_naive_cpu_s += pass == 1 ? thread_cpu_seconds() - cpu : 0;
    }
  }

  const Latencies lat1 = per_request_latencies(c, req, residency, 1);
  const Latencies lat2 = per_request_latencies(c, req, residency, 2);
  const Latencies small1 = per_request_latencies(c, small, residency, 1);
  const Latencies small2 = per_request_latencies(c, small, residency, 2);

  std::vector<double> load(static_cast<std::size_t>(o.workers));
  for (double& l : load) {
    l = unit(rng);
  }
  start = clock_type::now();
  const std::vector<std::int32_t> top = top_k_workers(scores, o.top_k, load);
  const double topk_s = seconds_since(start);

  // The GPU path's host pass (no GPU needed) on the sampled requests, each fill over all of
  // them in turn: keys read, thread CPU time (with the classes), and the classes (GPU threads).
  nlohmann::json gpu_table;
  if (o.gpu_table) {
    for (const gpu::TableFill fill : {gpu::TableFill::every_probe, gpu::TableFill::reached}) {
      std::size_t reads = 0;
      std::size_t runs = 0;
      std::size_t classes = 0;
      double table_s = 0;
      for (const std::size_t r : sample) {
        const LookupBatch b = req.one(r);
        cpu = thread_cpu_seconds();
        gpu::WorkerClasses k;  // the reached pass's own classes, else build_worker_classes'
        const gpu::WorkerSetTable t = gpu::build_worker_set_table(c, b, residency, one, fill, &k);
        table_s += thread_cpu_seconds() - cpu;
        reads += t.index_reads;
        runs += t.finder_runs;
        classes += k.num_classes();
      }
      const auto per = [&](double x) { return x / static_cast<double>(sample.size()); };
      gpu_table[fill == gpu::TableFill::reached ? "reached" : "every_probe"] = {
          {"index_reads_per_request", per(static_cast<double>(reads))},
          {"cpu_ms_per_request", per(table_s) * 1e3},
          {"finder_runs_per_request", per(static_cast<double>(runs))},
          {"classes_per_request", per(static_cast<double>(classes))}};
    }
  }

  std::int64_t hits = 0;
  for (std::size_t r = 0; r < scores.num_requests; ++r) {
    hits += scores.hit_lengths[r * static_cast<std::size_t>(o.workers) +
                               static_cast<std::size_t>(std::max(top[r * o.top_k], 0))];
  }
  // Whole requests checked against the naive loop (every worker of each sampled request).
  const std::size_t sampled = checked / static_cast<std::size_t>(o.workers);
  const auto n_req = static_cast<double>(o.requests);
  const double ratio = scored_s > 0 ? naive_s / scored_s : 0;
  const double cpu_ratio = scored_cpu_s > 0 ? naive_cpu_s / scored_cpu_s : 0;
  const auto per_req = [&](double sec) { return sec * 1e6 / static_cast<double>(sampled); };
  nlohmann::json j = {
      {"workload", o.workload},
      {"workers", o.workers},
      {"requests", o.requests},
      {"tokens", {o.min_tokens, o.max_tokens}},
      {"residency",
       {{"keys", mem.keys},
        {"pairs", mem.pairs},
        {"worker_sets", mem.worker_sets},
        {"table_bytes", mem.table_bytes},
        {"set_bytes", mem.set_bytes},
        {"bytes_per_pair_beyond_key", mem.bytes_per_pair_beyond_key()},
        {"insert_pairs_per_s", insert_s > 0 ? static_cast<double>(inserted) / insert_s : 0}}},
      {"classes_per_request", static_cast<double>(scores.classes) / n_req},
      {"index_reads_per_request", static_cast<double>(scores.index_reads) / n_req},
      {"probes_per_request", static_cast<double>(scores.probes) / n_req},
      {"batch_requests_per_s_1t", n_req / batch1_s},
      {"batch_requests_per_s_2t", n_req / batch2_s},
      {"naive_vs_scored",
       {{"requests", sampled},
        {"naive_us_per_request", per_req(naive_s)},
        {"scored_us_per_request", per_req(scored_s)},
        {"speedup", ratio},
        {"naive_cpu_us_per_request", per_req(naive_cpu_s)},
        {"scored_cpu_us_per_request", per_req(scored_cpu_s)},
        {"cpu_speedup", cpu_ratio},
        {"warm_naive_cpu_us_per_request", per_req(warm_naive_cpu_s)},
        {"warm_scored_cpu_us_per_request", per_req(warm_scored_cpu_s)},
        {"warm_cpu_speedup", warm_scored_cpu_s > 0 ? warm_naive_cpu_s / warm_scored_cpu_s : 0},
        {"mismatches", mismatches}}},
      {"latency_us",
       {{"all_1t", percentiles(lat1)},
        {"all_2t", percentiles(lat2)},
        {"8k_1t", percentiles(small1)},
        {"8k_2t", percentiles(small2)}}},
      {"top_k",
       {{"k", o.top_k},
        {"us_per_request", topk_s * 1e6 / n_req},
        {"mean_best_hit_tokens", static_cast<double>(hits) / n_req}}}};
  if (o.gpu_table) {
    j["gpu_table"] = gpu_table;
  }
  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("route-bench %s: %d workers, %lld requests of %lld-%lld tokens\n",
                o.workload.c_str(), o.workers, static_cast<long long>(o.requests),
                static_cast<long long>(o.min_tokens), static_cast<long long>(o.max_tokens));
    std::printf(
        "  residency: %zu keys, %zu (key, worker) pairs, %zu worker sets, %.2f B/pair "
        "beyond the key, %.1f M pair inserts/s\n",
        mem.keys, mem.pairs, mem.worker_sets, mem.bytes_per_pair_beyond_key(),
        insert_s > 0 ? static_cast<double>(inserted) / insert_s / 1e6 : 0.0);
    std::printf("  scoring: %.0f index reads, %.0f probes/request\n",
                static_cast<double>(scores.index_reads) / n_req,
                static_cast<double>(scores.probes) / n_req);
    std::printf("  scoring: %.1f classes/request; batch %.0f requests/s (1 thread), %.0f (2)\n",
                static_cast<double>(scores.classes) / n_req, n_req / batch1_s, n_req / batch2_s);
    std::printf(
        "  vs naive W-lookup loop (%zu requests): %.1f us vs %.1f us per request = "
        "%.1fx (thread CPU: %.1f vs %.1f us = %.1fx); %zu mismatches in %zu worker results\n",
        sampled, per_req(scored_s), per_req(naive_s), ratio, per_req(scored_cpu_s),
        per_req(naive_cpu_s), cpu_ratio, mismatches, checked);
    std::printf("  warm (keys in cache), thread CPU: %.1f us vs %.1f us per request = %.1fx\n",
                per_req(warm_scored_cpu_s), per_req(warm_naive_cpu_s),
                warm_scored_cpu_s > 0 ? warm_naive_cpu_s / warm_scored_cpu_s : 0.0);
    const auto line = [](const char* what, const Latencies& l) {
      std::printf("    %-10s wall p50/p99 %.1f/%.1f  cpu p50/p99 %.1f/%.1f\n", what,
                  percentile(l.wall, 0.5), percentile(l.wall, 0.99), percentile(l.cpu, 0.5),
                  percentile(l.cpu, 0.99));
    };
    std::printf("  per-request latency us:\n");
    line("all, 1t", lat1);
    line("all, 2t", lat2);
    line("8K, 1t", small1);
    line("8K, 2t", small2);
    std::printf("  top-%d: %.2f us/request\n", o.top_k, topk_s * 1e6 / n_req);
    for (const auto& [fill, t] : gpu_table.items()) {
      std::printf(
          "  GPU host table (%s, %zu requests): %.0f index reads, %.2f ms thread CPU, %.1f "
          "finder runs, %.1f classes per request\n",
          fill.c_str(), sample.size(), t["index_reads_per_request"].get<double>(),
          t["cpu_ms_per_request"].get<double>(), t["finder_runs_per_request"].get<double>(),
          t["classes_per_request"].get<double>());
    }
  }
  if (mismatches != 0) {
    std::cerr << "prefixhit route-bench: " << mismatches
              << " per-worker results differ from the single-store lookups\n";
    return 1;
  }
  return 0;
}

}  // namespace

void add_route_bench_command(CLI::App& app) {
  auto o = std::make_shared<RouteBenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "route-bench",
      "Synthetic multi-worker routing: residency index, exact per-worker scoring, top-k; checks "
      "the scores against one lookup per worker and reports the speed ratio");
  cmd->add_option("--workload", o->workload, "dsv4-flash, fa-3swa or fa-mamba-align")
      ->capture_default_str();
  cmd->add_option("--workers", o->workers, "workers")->capture_default_str();
  cmd->add_option("--requests", o->requests, "requests in the batch")->capture_default_str();
  cmd->add_option("--min-tokens", o->min_tokens, "shortest request")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "longest request")->capture_default_str();
  cmd->add_option("--documents", o->documents, "shared prefixes the workers hold")
      ->capture_default_str();
  cmd->add_option("--hold", o->hold, "chance a worker holds a document")->capture_default_str();
  cmd->add_option("--evict", o->evict, "chance a window-group block was evicted")
      ->capture_default_str();
  cmd->add_option(
         "--depth-levels", o->depth_levels,
         "0: a worker holds a document to a random block; k: to 1/k, 2/k, ... or all of it")
      ->capture_default_str();
  cmd->add_option("--naive-every", o->naive_every,
                  "time the naive W-lookup loop on every n-th request")
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "workers per request in the top-k")->capture_default_str();
  cmd->add_option("--seed", o->seed, "workload seed")->capture_default_str();
  cmd->add_flag("--gpu-table", o->gpu_table,
                "also time the GPU path's host table pass (every probe vs reached keys) on the "
                "sampled requests");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->add_option("--only-8k", o->only_8k,
                  "profiling: only score the 8K-token requests one by one, this many rounds, and "
                  "print their latency (no naive loop, no check)")
      ->capture_default_str();
  cmd->callback([o] {
    const int rc = run_route_bench(*o);
    if (rc != 0) {
      throw CLI::RuntimeError(rc);
    }
  });
}

}  // namespace prefixhit::cli
