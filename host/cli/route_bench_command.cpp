// `prefixhit route-bench`: a synthetic multi-worker routing workload (route_bench.cpp builds and
// times it). This file registers the command and prints what it measured: the speed ratio of
// scoring every worker in one pass against one single-store lookup per worker, per-request
// latency percentiles at 1 and 2 threads, top-k cost and memory per (key, worker) pair.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "host/cli/route_bench.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit::cli {

namespace {

/// Throws InvalidArgument naming the option out of range.
void check_route_bench_options(const RouteBenchOptions& o) {
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    throw InvalidArgument("--workers must be in [1, " + std::to_string(kMaxWorkers) + "]");
  }
  if (o.requests < 1 || o.documents < 1 || o.naive_every < 1 || o.top_k < 1 || o.depth_levels < 0) {
    throw InvalidArgument("--requests, --documents, --naive-every and --top-k must be positive");
  }
  if (o.min_tokens < 1 || o.max_tokens < o.min_tokens) {
    throw InvalidArgument("--min-tokens must be positive and at most --max-tokens");
  }
}

nlohmann::json percentiles(const Latencies& lat) {
  return {{"p50", percentile(lat.wall, 0.5)},
          {"p99", percentile(lat.wall, 0.99)},
          {"cpu_p50", percentile(lat.cpu, 0.5)},
          {"cpu_p99", percentile(lat.cpu, 0.99)}};
}

void print_only_8k(const RouteBenchOptions& o, const Only8kProfile& p) {
  const RouterScores& s = p.scores;
  const auto n8 = static_cast<double>(o.requests);
  std::printf(
      "8K, 1t, %d rounds: wall p50/p99 %.1f/%.1f  cpu p50/p99 %.1f/%.1f us; per request %.1f "
      "classes (%.1f finder runs), %.0f index reads, %.0f probes; warm (scored twice) cpu "
      "p50/p99 %.1f/%.1f us\n",
      o.only_8k, percentile(p.cold.wall, 0.5), percentile(p.cold.wall, 0.99),
      percentile(p.cold.cpu, 0.5), percentile(p.cold.cpu, 0.99),
      static_cast<double>(s.classes) / n8, static_cast<double>(s.runs) / n8,
      static_cast<double>(s.index_reads) / n8, static_cast<double>(s.probes) / n8,
      percentile(p.warm.cpu, 0.5), percentile(p.warm.cpu, 0.99));
}

/// Per-request and per-second figures derived from the raw timings, shared by both outputs.
struct Figures {
  double n_req = 0;           ///< requests in the batch
  std::size_t sampled = 0;    ///< whole requests checked against the naive loop
  double ratio = 0;           ///< naive over scored, wall
  double cpu_ratio = 0;       ///< naive over scored, thread CPU
  double warm_cpu_ratio = 0;  ///< naive over scored, thread CPU, keys in cache
  double insert_pairs_per_s = 0;
  double per_sampled(double sec) const { return sec * 1e6 / static_cast<double>(sampled); }
};

Figures figures(const RouteBenchOptions& o, const RouteBenchWorkload& w,
                const RouteBenchResults& r) {
  const NaiveComparison& n = r.naive;
  Figures f;
  f.n_req = static_cast<double>(o.requests);
  f.sampled = n.checked / static_cast<std::size_t>(o.workers);
  f.ratio = n.scored_s > 0 ? n.naive_s / n.scored_s : 0;
  f.cpu_ratio = n.scored_cpu_s > 0 ? n.naive_cpu_s / n.scored_cpu_s : 0;
  f.warm_cpu_ratio = n.warm_scored_cpu_s > 0 ? n.warm_naive_cpu_s / n.warm_scored_cpu_s : 0;
  f.insert_pairs_per_s = w.insert_s > 0 ? static_cast<double>(w.inserted) / w.insert_s : 0;
  return f;
}

nlohmann::json route_bench_json(const RouteBenchOptions& o, const RouteBenchWorkload& w,
                                const RouteBenchResults& r) {
  const Figures f = figures(o, w, r);
  const ResidencyMemory& mem = w.memory;
  const NaiveComparison& n = r.naive;
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
        {"insert_pairs_per_s", f.insert_pairs_per_s}}},
      {"classes_per_request", static_cast<double>(r.scores.classes) / f.n_req},
      {"index_reads_per_request", static_cast<double>(r.scores.index_reads) / f.n_req},
      {"probes_per_request", static_cast<double>(r.scores.probes) / f.n_req},
      {"batch_requests_per_s_1t", f.n_req / r.batch1_s},
      {"batch_requests_per_s_2t", f.n_req / r.batch2_s},
      {"naive_vs_scored",
       {{"requests", f.sampled},
        {"naive_us_per_request", f.per_sampled(n.naive_s)},
        {"scored_us_per_request", f.per_sampled(n.scored_s)},
        {"speedup", f.ratio},
        {"naive_cpu_us_per_request", f.per_sampled(n.naive_cpu_s)},
        {"scored_cpu_us_per_request", f.per_sampled(n.scored_cpu_s)},
        {"cpu_speedup", f.cpu_ratio},
        {"warm_naive_cpu_us_per_request", f.per_sampled(n.warm_naive_cpu_s)},
        {"warm_scored_cpu_us_per_request", f.per_sampled(n.warm_scored_cpu_s)},
        {"warm_cpu_speedup", f.warm_cpu_ratio},
        {"mismatches", n.mismatches}}},
      {"latency_us",
       {{"all_1t", percentiles(r.all_1t)},
        {"all_2t", percentiles(r.all_2t)},
        {"8k_1t", percentiles(r.small_1t)},
        {"8k_2t", percentiles(r.small_2t)}}},
      {"top_k",
       {{"k", o.top_k},
        {"us_per_request", r.top_k_s * 1e6 / f.n_req},
        {"mean_best_hit_tokens", static_cast<double>(r.best_hit_tokens) / f.n_req}}}};
  if (o.gpu_table) {
    nlohmann::json& gpu_table = j["gpu_table"];
    gpu_table = nlohmann::json::object();
    for (const GpuTableFigures& t : r.gpu_table) {
      gpu_table[t.fill] = {{"index_reads_per_request", t.index_reads},
                           {"cpu_ms_per_request", t.cpu_ms},
                           {"finder_runs_per_request", t.finder_runs},
                           {"classes_per_request", t.classes}};
    }
  }
  return j;
}

void print_route_bench_text(const RouteBenchOptions& o, const RouteBenchWorkload& w,
                            const RouteBenchResults& r) {
  const Figures f = figures(o, w, r);
  const ResidencyMemory& mem = w.memory;
  const NaiveComparison& n = r.naive;
  std::printf("route-bench %s: %d workers, %lld requests of %lld-%lld tokens\n", o.workload.c_str(),
              o.workers, static_cast<long long>(o.requests), static_cast<long long>(o.min_tokens),
              static_cast<long long>(o.max_tokens));
  std::printf(
      "  residency: %zu keys, %zu (key, worker) pairs, %zu worker sets, %.2f B/pair "
      "beyond the key, %.1f M pair inserts/s\n",
      mem.keys, mem.pairs, mem.worker_sets, mem.bytes_per_pair_beyond_key(),
      f.insert_pairs_per_s / 1e6);
  std::printf("  scoring: %.0f index reads, %.0f probes/request\n",
              static_cast<double>(r.scores.index_reads) / f.n_req,
              static_cast<double>(r.scores.probes) / f.n_req);
  std::printf("  scoring: %.1f classes/request; batch %.0f requests/s (1 thread), %.0f (2)\n",
              static_cast<double>(r.scores.classes) / f.n_req, f.n_req / r.batch1_s,
              f.n_req / r.batch2_s);
  std::printf(
      "  vs naive W-lookup loop (%zu requests): %.1f us vs %.1f us per request = "
      "%.1fx (thread CPU: %.1f vs %.1f us = %.1fx); %zu mismatches in %zu worker results\n",
      f.sampled, f.per_sampled(n.scored_s), f.per_sampled(n.naive_s), f.ratio,
      f.per_sampled(n.scored_cpu_s), f.per_sampled(n.naive_cpu_s), f.cpu_ratio, n.mismatches,
      n.checked);
  std::printf("  warm (keys in cache), thread CPU: %.1f us vs %.1f us per request = %.1fx\n",
              f.per_sampled(n.warm_scored_cpu_s), f.per_sampled(n.warm_naive_cpu_s),
              f.warm_cpu_ratio);
  const auto line = [](const char* what, const Latencies& l) {
    std::printf("    %-10s wall p50/p99 %.1f/%.1f  cpu p50/p99 %.1f/%.1f\n", what,
                percentile(l.wall, 0.5), percentile(l.wall, 0.99), percentile(l.cpu, 0.5),
                percentile(l.cpu, 0.99));
  };
  std::printf("  per-request latency us:\n");
  line("all, 1t", r.all_1t);
  line("all, 2t", r.all_2t);
  line("8K, 1t", r.small_1t);
  line("8K, 2t", r.small_2t);
  std::printf("  top-%d: %.2f us/request\n", o.top_k, r.top_k_s * 1e6 / f.n_req);
  for (const GpuTableFigures& t : r.gpu_table) {
    std::printf(
        "  GPU host table (%s, %zu requests): %.0f index reads, %.2f ms thread CPU, %.1f "
        "finder runs, %.1f classes per request\n",
        t.fill, n.sample.size(), t.index_reads, t.cpu_ms, t.finder_runs, t.classes);
  }
}

int run_route_bench(const RouteBenchOptions& o) {
  check_route_bench_options(o);
  RouteBenchWorkload w(o);
  if (o.only_8k > 0) {
    // Profiling: nothing but the 8K-token requests scored alone, so a profile shows only them.
    print_only_8k(o, profile_8k(w, o.only_8k));
    return 0;
  }
  const std::optional<RouteBenchResults> r = measure_route_bench(w, o);
  if (!r) {
    return 1;
  }
  if (o.json) {
    std::cout << route_bench_json(o, w, *r).dump(2) << "\n";
  } else {
    print_route_bench_text(o, w, *r);
  }
  if (r->naive.mismatches != 0) {
    std::cerr << "prefixhit route-bench: " << r->naive.mismatches
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
