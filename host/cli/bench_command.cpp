// `prefixhit bench`: realistic lookup workloads, timed on the CPU engine (or the GPU engine).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::cli {

namespace {

std::atomic<std::int64_t> g_bench_sink{0};

/// The most tokens (requests x tokens) one bench run may hold: 2^32, 8 GiB of digests at H=16.
constexpr std::int64_t kMaxBenchTokens = std::int64_t{1} << 32;

struct Timing {
  double us_per_call = 0;
  double calls_per_s = 0;
};

/// Median over 5 rounds of the mean time per call; each round runs for min_seconds / 5.
template <class Op>
Timing time_op(const Op& op, double min_seconds) {
  using clock = std::chrono::steady_clock;
  std::vector<double> rounds;
  const double round_seconds = std::max(min_seconds / 5.0, 0.002);
  op();  // warm up caches and allocations
  for (int round = 0; round < 5; ++round) {
    std::int64_t calls = 0;
    const auto start = clock::now();
    double elapsed = 0;
    do {
      op();
      ++calls;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < round_seconds);
    rounds.push_back(elapsed * 1e6 / static_cast<double>(calls));
  }
  std::sort(rounds.begin(), rounds.end());
  Timing t;
  t.us_per_call = rounds[rounds.size() / 2];
  t.calls_per_s = 1e6 / t.us_per_call;
  return t;
}

struct BenchOptions {
  std::string backend = "cpu";
  std::vector<std::string> workloads;
  std::int64_t requests = 8;
  std::int64_t tokens = 0;
  double min_seconds = 0.5;
  bool json = false;
};

std::vector<BenchRow> run_cpu_bench(const Workload& workload, std::int64_t requests,
                                    double min_seconds) {
  const Coordinator coordinator(workload.config);
  const std::int64_t h = workload.config.hash_block_size;
  const std::int64_t n = workload.tokens / h;
  const std::vector<BlockDigest> hashes = make_request_hashes(workload, requests, 0x5EED);
  auto request_hashes = [&](std::int64_t r) {
    return span<const BlockDigest>(hashes.data() + r * n, static_cast<std::size_t>(n));
  };
  // One resident index, one namespace per store shape.
  BlockIndex index;
  const StoreShape shapes[] = {StoreShape::full, StoreShape::with_hole,
                               StoreShape::store_mask_roundtrip};
  for (std::int64_t r = 0; r < requests; ++r) {
    for (const StoreShape shape : shapes) {
      fill_store(index, static_cast<Namespace>(shape), coordinator, request_hashes(r),
                 workload.tokens, shape);
    }
  }
  const std::int64_t max_length = workload.tokens - 1;
  const std::int64_t aligned = coordinator.align_lookup_length(workload.tokens);
  std::vector<BenchRow> rows;
  auto add = [&](const std::string& op, std::int64_t per_call, const Timing& t) {
    BenchRow row;
    row.workload = workload.name;
    row.backend = "cpu";
    row.op = op;
    row.requests = per_call;
    row.tokens = workload.tokens;
    row.us_per_call = t.us_per_call;
    row.calls_per_s = t.calls_per_s;
    rows.push_back(row);
  };
  const std::pair<const char*, StoreShape> lookups[] = {
      {"lookup_full_store", StoreShape::full},
      {"lookup_with_hole", StoreShape::with_hole},
      {"lookup_store_mask_roundtrip", StoreShape::store_mask_roundtrip}};
  std::int64_t sink = 0;
  for (const auto& [name, shape] : lookups) {
    const BlockIndex::View view = index.view(static_cast<Namespace>(shape));
    std::int64_t next = 0;
    add(name, 1,
        time_op(
            [&] {
              sink += coordinator.find_longest_cache_hit(request_hashes(next), max_length, view)
                          .hit_length;
              next = (next + 1) % requests;
            },
            min_seconds));
  }
  add("load_mask", 1,
      time_op([&] { sink += coordinator.load_mask(n, max_length).hit_length; }, min_seconds));
  add("store_mask", 1,
      time_op(
          [&] {
            sink += static_cast<std::int64_t>(
                coordinator.store_mask(aligned, 0, workload.tokens).size());
          },
          min_seconds));
  add("lookup_mask", 1,
      time_op([&] { sink += static_cast<std::int64_t>(coordinator.lookup_mask(aligned).size()); },
              min_seconds));
  // The batch API over every request at once, on all hardware threads.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(requests) + 1);
  for (std::int64_t r = 0; r <= requests; ++r) {
    offsets[static_cast<std::size_t>(r)] = r * n;
  }
  const std::vector<std::int64_t> max_lengths(static_cast<std::size_t>(requests), max_length);
  LookupBatch batch;
  batch.digests = hashes;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  const BlockIndex::View full = index.view(static_cast<Namespace>(StoreShape::full));
  add("batch_lookup_full_store", requests,
      time_op([&] { sink += coordinator.find_longest_cache_hits(batch, full).hit_lengths[0]; },
              min_seconds));
  // Publishing the results keeps the timed calls from being optimised away.
  g_bench_sink.store(sink, std::memory_order_relaxed);
  return rows;
}

void print_rows(const std::vector<BenchRow>& rows, bool json) {
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
      std::cout << line.dump() << "\n";
      continue;
    }
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%-15s %-4s %-28s %6lld req %8lld tok %12.3f us/call %14.1f calls/s",
                  row.workload.c_str(), row.backend.c_str(), row.op.c_str(),
                  static_cast<long long>(row.requests), static_cast<long long>(row.tokens),
                  row.us_per_call, row.calls_per_s);
    std::cout << text;
    if (row.device_us) {
      std::printf("  device %.3f us", *row.device_us);
    }
    if (row.keys_per_s) {
      std::printf("  %.3g keys/s", *row.keys_per_s);
    }
    std::cout << std::endl;
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
  cmd->add_option("--tokens", options->tokens, "Prompt length (default 131072)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 26));
  cmd->add_option("--min-time", options->min_seconds, "Seconds spent timing each op")
      ->check(kFinite & CLI::Range(0.001, 600.0))
      ->capture_default_str();
  cmd->add_flag("--json", options->json,
                "One JSON object per line: workload, backend, op, requests, tokens, "
                "us_per_call, calls_per_s[, device_us, keys_per_s]");
  cmd->callback([options] {
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
      const std::vector<BenchRow> rows =
          options->backend == "gpu"
              ? run_gpu_bench(workload, options->requests, options->min_seconds)
              : run_cpu_bench(workload, options->requests, options->min_seconds);
      print_rows(rows, options->json);
    }
  });
}

}  // namespace prefixhit::cli
