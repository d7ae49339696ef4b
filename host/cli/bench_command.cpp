// `prefixhit bench`: realistic lookup workloads, timed on the CPU engine (bench_cpu.cpp) or the
// GPU engine (bench_gpu.cpp); this file holds the command and its output.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "host/worker_pool.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::cli {

namespace {

/// The most tokens (requests x tokens) one bench run may hold: 2^32, 8 GiB of digests at H=16.
constexpr std::int64_t kMaxBenchTokens = std::int64_t{1} << 32;

struct BenchOptions {
  std::string backend = "cpu";
  std::vector<std::string> workloads;
  std::int64_t requests = 8;
  std::int64_t batch = 0;  // 0: every request
  std::int64_t tokens = 0;
  double min_seconds = 0.5;
  std::string hash_pages = "4k";
  std::string hashes = "cold";
  std::int64_t worker_spin_us = -1;  // -1: the pool's own
  bool json = false;
};

/// Lookup rows beside the memory limit: keys probed per DRAM latency (how many of a call's keys
/// are answered in the time of one dependent read, against the limit measured before the rows),
/// and, from the turns the row took with the limit's reads (LimitTurns, bench_cpu.cpp), the
/// call's key rate as a percentage of the independent-read rate and its time over its keys' hit
/// lines (what it costs beyond moving the lines its layout must move), as medians over the
/// turns. Both sides are CPU time (the call's over all its threads, the limit's on one thread),
/// so the ratios hold per core even on a shared machine.
void add_limit_columns(const BenchRow& row, const MemoryLimit& limit, nlohmann::json* line,
                       std::string* text) {
  if (!row.keys_per_call || !row.cpu_us || limit.dependent_ns <= 0) {
    return;
  }
  const double ns_per_call = *row.cpu_us * 1e3;
  const double per_latency = *row.keys_per_call * limit.dependent_ns / ns_per_call;
  const double pct = row.pct_of_independent.value_or(0);
  if (line != nullptr) {
    (*line)["keys_per_call"] = *row.keys_per_call;
    (*line)["keys_per_dram_latency"] = per_latency;
    (*line)["limit_turns"] = row.limit_turns;
    (*line)["pct_of_independent_reads"] = pct;
    if (row.x_hit_lines) {
      (*line)["x_hit_lines"] = *row.x_hit_lines;
      (*line)["x_hit_lines_p10"] = *row.x_hit_lines_p10;
      (*line)["x_hit_lines_p90"] = *row.x_hit_lines_p90;
    }
    if (row.one_line_floor_us) {
      (*line)["one_line_floor_us_per_request"] = *row.one_line_floor_us;
    }
  }
  if (text != nullptr) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %6.0f keys  %5.2f keys/latency  %5.1f%% of indep.",
                  *row.keys_per_call, per_latency, pct);
    *text += buf;
    if (row.x_hit_lines) {
      std::snprintf(buf, sizeof(buf), "  %4.2fx its hit lines (%4.2f-%4.2f, %d turns)",
                    *row.x_hit_lines, *row.x_hit_lines_p10, *row.x_hit_lines_p90, row.limit_turns);
      *text += buf;
    }
    if (row.one_line_floor_us) {
      std::snprintf(buf, sizeof(buf), "  floor %.2f us/req at one line per key",
                    *row.one_line_floor_us);
      *text += buf;
    }
  }
}

void print_context(const Workload& workload, const CpuBenchContext& c, bool json) {
  const MemoryLimit& l = c.limit;
  if (json) {
    nlohmann::json line = {{"workload", workload.name},
                           {"backend", "cpu"},
                           {"op", "memory_limit"},
                           {"store_keys", c.store_keys},
                           {"store_slots", c.store_slots},
                           {"keys_in_prefetched_line", c.in_prefetched_line},
                           {"keys_in_second_bucket", c.in_second_bucket},
                           {"store_bytes", c.store_bytes},
                           {"cycled_requests", c.cycled_requests},
                           {"cycle_line_bytes", c.cycle_line_bytes},
                           {"l3_bytes", c.l3_bytes},
                           {"hash_pages", c.huge_page_hashes ? "2m" : "4k"},
                           {"hashes", c.hot_hashes ? "hot" : "cold"},
                           {"buffer_bytes", l.bytes},
                           {"dependent_read_ns", l.dependent_ns},
                           {"independent_read_ns", l.independent_ns()},
                           {"reads_in_flight", l.in_flight()},
                           {"independent_read_ns_2threads", l.independent_2t_ns},
                           {"two_thread_read_scaling", l.two_thread_scaling()},
                           {"two_thread_core_share", l.two_thread_overlap},
                           {"hit_lines_ns_per_key", l.hit_lines_ns()},
                           {"pool_wake_caller_us", c.wake.caller_us},
                           {"pool_wake_worker_us", c.wake.worker_us},
                           {"worker_spin_us", c.worker_spin_us}};
    for (const Issue issue : kEveryIssue) {  // each way of issuing the reads
      line[std::string("independent_read_ns_") + issue_name(issue)] = l.independent.at(issue);
      line[std::string("hit_lines_ns_per_key_") + issue_name(issue)] = l.hit_lines.at(issue);
    }
    std::cout << line.dump() << "\n";
    return;
  }
  const std::string l3 =
      c.l3_bytes > 0 ? std::to_string(c.l3_bytes >> 20) + " MiB" : std::string("(size unknown)");
  std::printf(
      "# %s store: %llu keys resident in %llu slots (%.1f MiB), %.1f%% of them in the digest "
      "line a lookup prefetches with their header and %.1f%% in the second bucket of their "
      "sequence (their home bucket full); single lookups cycle through "
      "%lld stored requests, whose hashes lie on %s pages and are %s; a cycle reads %.1f MiB of "
      "lines (%s) against the L3 the CPU reports, "
      "%s (a VM's share may be smaller): a cycle that fits there stays partly cached, and its "
      "lookups miss less than lookups of new prompts (raise --requests)\n"
      "# memory limit over a %.1f MiB buffer (thread CPU time): dependent random read %.1f ns, "
      "independent %.2f ns (%.1f reads in flight; the fastest of plain loads, %.2f ns, loads "
      "prefetched ahead into L1, %.2f ns, and into L2, %.2f ns); two threads at once: %.2f ns "
      "per read per thread, %.2fx one thread's read rate (they had a core %.0f%% of the time: "
      "the ratio holds only near 100%%); a hit's lines (the caller's digest where it lies, a "
      "header and a digest line) read independently for the keys of a pass of full-store "
      "lookups: %.2f ns per key (the same three ways: %.2f, %.2f, %.2f; 0: not measured, as "
      "with hot hashes, whose warming evicts what such a pass would find cached)\n",
      workload.name.c_str(), static_cast<unsigned long long>(c.store_keys),
      static_cast<unsigned long long>(c.store_slots),
      static_cast<double>(c.store_bytes) / (1 << 20), 100 * c.in_prefetched_line,
      100 * c.in_second_bucket, static_cast<long long>(c.cycled_requests),
      c.huge_page_hashes ? "2 MiB" : "4 KiB",
      c.hot_hashes ? "read just before each call (hot)" : "last read a cycle ago (cold)",
      static_cast<double>(c.cycle_line_bytes) / (1 << 20),
      c.hot_hashes ? "a header and a digest line per key"
                   : "the caller's digests, and a header and a digest line per key",
      l3.c_str(), static_cast<double>(l.bytes) / (1 << 20), l.dependent_ns, l.independent_ns(),
      l.in_flight(), l.independent.at(Issue::loads), l.independent.at(Issue::prefetched_l1),
      l.independent.at(Issue::prefetched_l2), l.independent_2t_ns, l.two_thread_scaling(),
      100 * l.two_thread_overlap, l.hit_lines_ns(), l.hit_lines.at(Issue::loads),
      l.hit_lines.at(Issue::prefetched_l1), l.hit_lines.at(Issue::prefetched_l2));
  std::printf(
      "# waking a parked pool worker (a two-thread batch's start): %.1f us in the caller's wake "
      "call, %.1f us until the worker runs (medians); a worker spins %lld us for its next job "
      "before it parks\n",
      c.wake.caller_us, c.wake.worker_us, static_cast<long long>(c.worker_spin_us));
}

void print_rows(const std::vector<BenchRow>& rows, bool json, const MemoryLimit* limit) {
  for (const BenchRow& row : rows) {
    if (json) {
      nlohmann::json line = {{"workload", row.workload},
                             {"backend", row.backend},
                             {"op", row.op},
                             {"requests", row.requests},
                             {"tokens", row.tokens},
                             {"us_per_call", row.us_per_call},
                             {"calls_per_s", row.calls_per_s}};
      if (row.device_us) {
        line["device_us"] = *row.device_us;
      }
      if (row.keys_per_s) {
        line["keys_per_s"] = *row.keys_per_s;
      }
      if (row.p50_us) {
        line["p50_us"] = *row.p50_us;
        line["p99_us"] = *row.p99_us;
        line["cpu_us"] = *row.cpu_us;
      }
      if (row.threads > 0) {
        line["threads"] = row.threads;
        line["us_per_request"] = row.us_per_call / static_cast<double>(row.requests);
      }
      if (row.two_thread_ceiling) {
        line["two_thread_ceiling"] = *row.two_thread_ceiling;
      }
      if (limit != nullptr) {
        add_limit_columns(row, *limit, &line, nullptr);
      }
      std::cout << line.dump() << "\n";
      continue;
    }
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%-15s %-4s %-32s %6lld req %8lld tok %12.3f us/call %14.1f calls/s",
                  row.workload.c_str(), row.backend.c_str(), row.op.c_str(),
                  static_cast<long long>(row.requests), static_cast<long long>(row.tokens),
                  row.us_per_call, row.calls_per_s);
    std::string out = text;
    if (row.p50_us) {
      std::snprintf(text, sizeof(text), "  p50 %.3f p99 %.3f cpu %.3f us", *row.p50_us, *row.p99_us,
                    *row.cpu_us);
      out += text;
    }
    if (row.threads > 0) {
      std::snprintf(text, sizeof(text), "  %d thr %.3f us/req", row.threads,
                    row.us_per_call / static_cast<double>(row.requests));
      out += text;
    }
    if (row.two_thread_ceiling) {
      std::snprintf(text, sizeof(text), "  wake-ups leave %.2fx", *row.two_thread_ceiling);
      out += text;
    }
    if (row.device_us) {
      std::snprintf(text, sizeof(text), "  device %.3f us", *row.device_us);
      out += text;
    }
    if (row.keys_per_s) {
      std::snprintf(text, sizeof(text), "  %.3g keys/s", *row.keys_per_s);
      out += text;
    }
    if (limit != nullptr) {
      add_limit_columns(row, *limit, nullptr, &out);
    }
    std::cout << out << std::endl;
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time realistic lookup workloads: us per call and calls per second for each op");
  cmd->add_option("--backend", options->backend, "cpu or gpu")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_option("--workload", options->workloads,
                  "dsv4-flash, fa-3swa or fa-mamba-align (repeatable; default: all)")
      ->check(CLI::IsMember(workload_names()));
  cmd->add_option("--requests", options->requests,
                  "CPU: distinct requests cycled through and the batch size of "
                  "batch_lookup_full_store; GPU: requests per batch call")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--batch", options->batch,
                  "CPU: requests per batch call (default: --requests); batches alternate "
                  "between the first and the last stored requests")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  cmd->add_option("--tokens", options->tokens, "Prompt length (default 131072)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 26));
  cmd->add_option("--min-time", options->min_seconds, "Seconds spent timing each op")
      ->check(kFinite & CLI::Range(0.001, 600.0))
      ->capture_default_str();
  cmd->add_option("--worker-spin-us", options->worker_spin_us,
                  "CPU: how long a batch's worker spins for its next job before it parks "
                  "(default: the pool's, 100; 0 parks at once)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  cmd->add_option("--hash-pages", options->hash_pages,
                  "CPU: the pages the requests' hashes lie on: 4k (what malloc gives) or 2m "
                  "(2 MiB pages, madvise)")
      ->check(CLI::IsMember({"4k", "2m"}))
      ->capture_default_str();
  cmd->add_option("--hashes", options->hashes,
                  "CPU: cold (a lookup's request hashes were last read a cycle of lookups ago) "
                  "or hot (read just before each timed call, outside its timing, as a runtime "
                  "that has just hashed the prompt leaves them)")
      ->check(CLI::IsMember({"cold", "hot"}))
      ->capture_default_str();
  cmd->add_flag(
      "--json", options->json,
      "One JSON object per line: workload, backend, op, requests, tokens, "
      "us_per_call, calls_per_s[, device_us, keys_per_s]; CPU rows add p50_us, "
      "p99_us, cpu_us[, threads, us_per_request][, keys_per_call, "
      "keys_per_dram_latency, limit_turns, pct_of_independent_reads, x_hit_lines, "
      "x_hit_lines_p10, x_hit_lines_p90, one_line_floor_us_per_request]; two threads run "
      "back to back (batch_lookup_full_store_2threads: the worker still spins for work) and "
      "with the worker parked before each call (..._2threads_parked, as a batch per "
      "scheduler step finds it), which adds two_thread_ceiling (the speed-up the pool's "
      "wake-ups leave), and one thread that sleeps as long before each call "
      "(batch_lookup_full_store_after_halt: what an idle core costs the lookups after "
      "it); after one "
      "memory_limit line (store size, the share of keys in the digest line a lookup "
      "prefetches with their header, the requests' hash pages and whether their hashes "
      "are hot, the bytes of lines a cycle of single lookups "
      "reads and the L3 size the CPU reports, "
      "dependent and independent random-read ns, the independent reads on two threads at "
      "once, a hit's lines read independently per key, what waking a pool worker costs "
      "the caller and the worker, and worker_spin_us; independent reads are the fastest "
      "of plain loads and loads prefetched ahead into L1 or L2, each given). Lookup rows "
      "are timed in turns with the limit's reads; their ratios are medians over the "
      "turns");
  cmd->callback([options, cmd] {
    // The GPU rows time device batches of --requests: an option that shapes only the CPU rows
    // would be ignored there, so it is refused rather than silently dropped.
    for (const char* cpu_only : {"--batch", "--hash-pages", "--hashes", "--worker-spin-us"}) {
      if (options->backend == "gpu" && cmd->count(cpu_only) > 0) {
        throw InvalidArgument(std::string("bench: ") + cpu_only +
                              " applies to --backend cpu only (the GPU rows time batches of "
                              "--requests)");
      }
    }
    std::vector<std::string> names = options->workloads;
    if (names.empty()) {
      names = workload_names();
    }
    for (const std::string& name : names) {
      const Workload workload = make_workload(name, options->tokens);
      // Each request is its own hash chain, held at once: refuse what no machine could hold
      // with a message, rather than a bare std::bad_alloc halfway through.
      if (options->requests * workload.tokens > kMaxBenchTokens) {
        throw InvalidArgument("bench: --requests " + std::to_string(options->requests) + " x " +
                              std::to_string(workload.tokens) + " tokens is " +
                              std::to_string(options->requests * workload.tokens) +
                              " tokens in all; the limit is 2^32 (lower --requests or --tokens)");
      }
      if (options->backend == "gpu") {
        print_rows(run_gpu_bench(workload, options->requests, options->min_seconds), options->json,
                   nullptr);
        continue;
      }
      CpuBenchContext context;
      context.huge_page_hashes = options->hash_pages == "2m";
      context.hot_hashes = options->hashes == "hot";
      std::optional<detail::ScopedIdleSpin> spin;  // the pool's own unless given
      if (options->worker_spin_us >= 0) {
        spin.emplace(std::chrono::microseconds(options->worker_spin_us));
      }
      context.worker_spin_us = detail::pool_idle_spin().count();
      const std::vector<BenchRow> rows =
          run_cpu_bench(workload, options->requests, options->batch, options->min_seconds, context);
      print_context(workload, context, options->json);
      print_rows(rows, options->json, &context.limit);
    }
  });
}

}  // namespace prefixhit::cli
