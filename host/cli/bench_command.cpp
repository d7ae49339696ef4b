// `prefixhit bench`: realistic lookup workloads, timed on the CPU engine (or the GPU engine).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/block_index_table.hpp"
#include "host/cli/bench.hpp"
#include "host/cli/commands.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::cli {

namespace {

std::atomic<std::int64_t> g_bench_sink{0};

/// The most tokens (requests x tokens) one bench run may hold: 2^32, 8 GiB of digests at H=16.
constexpr std::int64_t kMaxBenchTokens = std::int64_t{1} << 32;

struct Timing {
  double us_per_call = 0;  ///< mean wall time per call
  double calls_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us = 0;  ///< process CPU time per call (every thread's)
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Calls `op` for at least min_seconds after one warm-up call, timing every call: the mean,
/// median and 99th percentile wall time per call, and the CPU time per call.
template <class Op>
Timing time_op(const Op& op, double min_seconds) {
  using clock = std::chrono::steady_clock;
  op();  // warm up caches and allocations
  std::vector<double> samples;
  samples.reserve(1 << 16);
  const double cpu_start = process_cpu_seconds();
  const auto start = clock::now();
  auto last = start;
  double elapsed = 0;
  do {
    op();
    const auto now = clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(now - last).count());
    last = now;
    elapsed = std::chrono::duration<double>(now - start).count();
  } while (elapsed < min_seconds);
  const auto calls = static_cast<double>(samples.size());
  Timing t;
  t.us_per_call = elapsed * 1e6 / calls;
  t.calls_per_s = 1e6 / t.us_per_call;
  t.cpu_us = (process_cpu_seconds() - cpu_start) * 1e6 / calls;
  std::sort(samples.begin(), samples.end());
  t.p50_us = samples[samples.size() / 2];
  t.p99_us = samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
  return t;
}

/// Counts the index keys a lookup asks its store about (each member group's key once), and
/// records where their caller digests lie when given a vector.
class CountingSource final : public ExistenceSource {
 public:
  explicit CountingSource(const ExistenceSource& inner,
                          std::vector<const BlockDigest*>* probed = nullptr)
      : inner_(inner), probed_(probed) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override {
    note(hashes, first, step, count);
    return inner_.probe(group_id, hashes, first, step, count);
  }
  bool prefers_probe_many() const noexcept override { return inner_.prefers_probe_many(); }
  void probe_many(const ProbeWindow* windows, std::size_t n, std::uint64_t* out) const override {
    for (std::size_t w = 0; w < n; ++w) {
      note(windows[w].hashes, windows[w].first, windows[w].step, windows[w].count);
    }
    inner_.probe_many(windows, n, out);
  }
  std::int64_t keys() const { return keys_; }

 private:
  void note(const BlockDigest* hashes, std::int64_t first, std::int64_t step, int count) const {
    keys_ += count;
    for (int k = 0; probed_ != nullptr && k < count; ++k) {
      probed_->push_back(hashes + first + static_cast<std::int64_t>(k) * step);
    }
  }

  const ExistenceSource& inner_;
  std::vector<const BlockDigest*>* probed_;
  mutable std::int64_t keys_ = 0;
};

struct BenchOptions {
  std::string backend = "cpu";
  std::vector<std::string> workloads;
  std::int64_t requests = 8;
  std::int64_t batch = 0;  // 0: every request
  std::int64_t tokens = 0;
  double min_seconds = 0.5;
  std::string hash_pages = "4k";
  bool json = false;
};

/// The store and the memory limit the CPU rows are measured against.
struct CpuBenchContext {
  std::uint64_t store_keys = 0;
  std::uint64_t store_slots = 0;
  std::uint64_t store_bytes = 0;
  std::int64_t cycled_requests = 0;
  bool huge_page_hashes = false;  // the requests' hashes on 2 MiB pages (else malloc's 4 KiB)
  MemoryLimit limit;
};

std::vector<BenchRow> run_cpu_bench(const Workload& workload, std::int64_t requests,
                                    std::int64_t batch_size, double min_seconds,
                                    CpuBenchContext& context) {
  const Coordinator coordinator(workload.config);
  const std::int64_t h = workload.config.hash_block_size;
  const std::int64_t n = workload.tokens / h;
  const std::vector<BlockDigest> chains = make_request_hashes(workload, requests, 0x5EED);
  // A lookup of a long prompt reads a new 4 KiB page of its hashes every few probes, and each
  // costs a page walk on top of the miss: --hash-pages 2m shows what huge pages save.
  cpu_index::AlignedArray<BlockDigest> huge_copy;
  const BlockDigest* hashes = chains.data();
  if (context.huge_page_hashes) {
    huge_copy = cpu_index::allocate_aligned<BlockDigest>(chains.size(), "request hashes");
    std::copy(chains.begin(), chains.end(), huge_copy.get());
    hashes = huge_copy.get();
  }
  auto request_hashes = [&](std::int64_t r) {
    return span<const BlockDigest>(hashes + r * n, static_cast<std::size_t>(n));
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
  context.store_keys = index.size();
  context.store_slots = index.capacity();
  // Per slot: a 1-byte tag, a 4-byte namespace/group word and the 32-byte digest.
  context.store_bytes = detail::table_bytes_of_slots(context.store_slots);
  context.cycled_requests = requests;
  const std::int64_t max_length = workload.tokens - 1;
  // The caller digests one pass of full-store lookups probes, in order: the limit replays their
  // lines (and a header and a digest line each) as independent reads.
  std::vector<const BlockDigest*> probed;
  {
    const BlockIndex::View full = index.view(static_cast<Namespace>(StoreShape::full));
    const CountingSource recorder(full, &probed);
    for (std::int64_t r = 0; r < requests; ++r) {
      coordinator.find_longest_cache_hit(request_hashes(r), max_length, recorder);
    }
  }
  context.limit = measure_memory_limit(context.store_bytes, 0x5EED, probed);
  const std::int64_t aligned = coordinator.align_lookup_length(workload.tokens);
  std::vector<BenchRow> rows;
  auto add = [&](const std::string& op, std::int64_t per_call, const Timing& t,
                 std::optional<double> keys, int threads) {
    BenchRow row;
    row.workload = workload.name;
    row.backend = "cpu";
    row.op = op;
    row.requests = per_call;
    row.tokens = workload.tokens;
    row.us_per_call = t.us_per_call;
    row.calls_per_s = t.calls_per_s;
    row.p50_us = t.p50_us;
    row.p99_us = t.p99_us;
    row.cpu_us = t.cpu_us;
    row.keys_per_call = keys;
    row.threads = threads;
    rows.push_back(row);
  };
  const std::pair<const char*, StoreShape> lookups[] = {
      {"lookup_full_store", StoreShape::full},
      {"lookup_with_hole", StoreShape::with_hole},
      {"lookup_store_mask_roundtrip", StoreShape::store_mask_roundtrip}};
  std::int64_t sink = 0;
  for (const auto& [name, shape] : lookups) {
    const BlockIndex::View view = index.view(static_cast<Namespace>(shape));
    const CountingSource counter(view);
    for (std::int64_t r = 0; r < requests; ++r) {
      sink += coordinator.find_longest_cache_hit(request_hashes(r), max_length, counter).hit_length;
    }
    std::int64_t next = 0;
    // Each call looks up the next stored request, so calls do not find the last one's lines.
    const Timing t = time_op(
        [&] {
          sink +=
              coordinator.find_longest_cache_hit(request_hashes(next), max_length, view).hit_length;
          next = (next + 1) % requests;
        },
        min_seconds);
    add(name, 1, t, static_cast<double>(counter.keys()) / static_cast<double>(requests), 0);
  }
  add("load_mask", 1,
      time_op([&] { sink += coordinator.load_mask(n, max_length).hit_length; }, min_seconds),
      std::nullopt, 0);
  add("store_mask", 1,
      time_op(
          [&] {
            sink += static_cast<std::int64_t>(
                coordinator.store_mask(aligned, 0, workload.tokens).size());
          },
          min_seconds),
      std::nullopt, 0);
  add("lookup_mask", 1,
      time_op([&] { sink += static_cast<std::int64_t>(coordinator.lookup_mask(aligned).size()); },
              min_seconds),
      std::nullopt, 0);
  // The batch API: batches of batch_size requests, alternating between the first and the last
  // batch_size stored requests, on one thread and then on two.
  const std::int64_t b = std::min(batch_size > 0 ? batch_size : requests, requests);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(b) + 1);
  for (std::int64_t r = 0; r <= b; ++r) {
    offsets[static_cast<std::size_t>(r)] = r * n;
  }
  const std::vector<std::int64_t> max_lengths(static_cast<std::size_t>(b), max_length);
  LookupBatch batches[2];
  for (int k = 0; k < 2; ++k) {
    const std::int64_t first = k == 0 ? 0 : requests - b;
    batches[k].digests =
        span<const BlockDigest>(hashes + first * n, static_cast<std::size_t>(b * n));
    batches[k].offsets = offsets;
    batches[k].max_lengths = max_lengths;
  }
  const BlockIndex::View full = index.view(static_cast<Namespace>(StoreShape::full));
  const CountingSource counter(full);
  sink += coordinator.find_longest_cache_hits(batches[0], counter).hit_lengths[0];
  for (const int threads : {1, 2}) {
    BatchOptions options;
    options.num_threads = threads;
    int which = 0;
    const Timing t = time_op(
        [&] {
          sink += coordinator.find_longest_cache_hits(batches[which], full, options).hit_lengths[0];
          which ^= 1;
        },
        min_seconds);
    add(threads == 1 ? "batch_lookup_full_store" : "batch_lookup_full_store_2threads", b, t,
        static_cast<double>(counter.keys()), threads);
  }
  // Publishing the results keeps the timed calls from being optimised away.
  g_bench_sink.store(sink + static_cast<std::int64_t>(context.limit.checksum & 1U),
                     std::memory_order_relaxed);
  return rows;
}

/// Lookup rows beside the memory limit: keys probed per DRAM latency (how many of a call's keys
/// are answered in the time of one dependent read) and the call's key rate as a percentage of
/// the independent-read rate. Both sides are CPU time (the call's over all its threads, the
/// limit's on one thread), so the ratios hold per core even on a shared machine.
void add_limit_columns(const BenchRow& row, const MemoryLimit& limit, nlohmann::json* line,
                       std::string* text) {
  if (!row.keys_per_call || !row.cpu_us || limit.dependent_ns <= 0) {
    return;
  }
  const double ns_per_call = *row.cpu_us * 1e3;
  const double per_latency = *row.keys_per_call * limit.dependent_ns / ns_per_call;
  const double pct = 100.0 * *row.keys_per_call * limit.independent_ns / ns_per_call;
  // The call's time over its keys' hit lines read independently: what the lookup costs beyond
  // moving the lines its layout must move.
  const double over_lines =
      limit.hit_lines_ns > 0 ? ns_per_call / (*row.keys_per_call * limit.hit_lines_ns) : 0;
  if (line != nullptr) {
    (*line)["keys_per_call"] = *row.keys_per_call;
    (*line)["keys_per_dram_latency"] = per_latency;
    (*line)["pct_of_independent_reads"] = pct;
    if (over_lines > 0) {
      (*line)["x_hit_lines"] = over_lines;
    }
  }
  if (text != nullptr) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %6.0f keys  %5.2f keys/latency  %5.1f%% of indep.",
                  *row.keys_per_call, per_latency, pct);
    *text += buf;
    if (over_lines > 0) {
      std::snprintf(buf, sizeof(buf), "  %4.2fx its hit lines", over_lines);
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
                           {"store_bytes", c.store_bytes},
                           {"cycled_requests", c.cycled_requests},
                           {"hash_pages", c.huge_page_hashes ? "2m" : "4k"},
                           {"buffer_bytes", l.bytes},
                           {"dependent_read_ns", l.dependent_ns},
                           {"independent_read_ns", l.independent_ns},
                           {"reads_in_flight", l.in_flight()},
                           {"independent_read_ns_2threads", l.independent_2t_ns},
                           {"two_thread_read_scaling", l.two_thread_scaling()},
                           {"two_thread_core_share", l.two_thread_overlap},
                           {"hit_lines_ns_per_key", l.hit_lines_ns}};
    std::cout << line.dump() << "\n";
    return;
  }
  std::printf(
      "# %s store: %llu keys resident in %llu slots (%.1f MiB); single lookups cycle through "
      "%lld stored requests, whose hashes lie on %s pages\n"
      "# memory limit over a %.1f MiB buffer (thread CPU time): dependent random read %.1f ns, "
      "independent %.2f ns (%.1f reads in flight); two threads at once: %.2f ns per read per "
      "thread, %.2fx one thread's read rate (they had a core %.0f%% of the time: the ratio "
      "holds only near 100%%); a hit's lines (the caller's digest where it lies, a header and a "
      "digest line) read independently for the keys of a pass of full-store lookups: %.2f ns "
      "per key\n",
      workload.name.c_str(), static_cast<unsigned long long>(c.store_keys),
      static_cast<unsigned long long>(c.store_slots),
      static_cast<double>(c.store_bytes) / (1 << 20), static_cast<long long>(c.cycled_requests),
      c.huge_page_hashes ? "2 MiB" : "4 KiB", static_cast<double>(l.bytes) / (1 << 20),
      l.dependent_ns, l.independent_ns, l.in_flight(), l.independent_2t_ns, l.two_thread_scaling(),
      100 * l.two_thread_overlap, l.hit_lines_ns);
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
  cmd->add_option("--hash-pages", options->hash_pages,
                  "CPU: the pages the requests' hashes lie on: 4k (what malloc gives) or 2m "
                  "(2 MiB pages, madvise)")
      ->check(CLI::IsMember({"4k", "2m"}))
      ->capture_default_str();
  cmd->add_flag(
      "--json", options->json,
      "One JSON object per line: workload, backend, op, requests, tokens, "
      "us_per_call, calls_per_s[, device_us, keys_per_s]; CPU rows add p50_us, "
      "p99_us, cpu_us[, threads, us_per_request][, keys_per_call, "
      "keys_per_dram_latency, pct_of_independent_reads, x_hit_lines], after one "
      "memory_limit line (store size, dependent and independent random-read ns, the "
      "independent reads on two threads at once, a hit's lines read independently per key)");
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
      if (options->backend == "gpu") {
        print_rows(run_gpu_bench(workload, options->requests, options->min_seconds), options->json,
                   nullptr);
        continue;
      }
      CpuBenchContext context;
      context.huge_page_hashes = options->hash_pages == "2m";
      const std::vector<BenchRow> rows =
          run_cpu_bench(workload, options->requests, options->batch, options->min_seconds, context);
      print_context(workload, context, options->json);
      print_rows(rows, options->json, &context.limit);
    }
  });
}

}  // namespace prefixhit::cli
