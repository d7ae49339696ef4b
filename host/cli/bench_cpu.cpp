// `prefixhit bench` on the CPU engine: the resident store, the in-run memory limit and the timed
// lookup rows (the command and its output: bench_command.cpp; how rows are timed:
// bench_turns.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "host/block_index_table.hpp"
#include "host/cli/bench.hpp"
#include "host/cli/bench_turns.hpp"
#include "prefixhit/detail/index_capacity.hpp"

namespace prefixhit::cli {

namespace {

std::atomic<std::int64_t> g_bench_sink{0};

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

}  // namespace

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
  std::int64_t sink = 0;
  // --hashes hot: a call's request hashes are read just before it, outside its timing, as a
  // runtime that has just hashed the prompt (or copied its hashes) leaves them.
  const auto warm = [&](span<const BlockDigest> digests) {
    if (!context.hot_hashes || digests.empty()) {
      return;
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(digests.data());
    const std::size_t size = digests.size() * sizeof(BlockDigest);
    std::int64_t read = bytes[size - 1];
    for (std::size_t at = 0; at < size; at += 64) {
      read += bytes[at];
    }
    sink += read;
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
  const BlockIndex::Layout layout = index.layout();
  const auto share = [&](std::size_t keys) {
    return static_cast<double>(keys) / static_cast<double>(std::max<std::size_t>(1, layout.keys));
  };
  context.in_prefetched_line = share(layout.in_prefetched_line);
  context.in_second_bucket = share(layout.in_second_bucket);
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
  {
    constexpr std::uintptr_t kLineBytes = 64;
    // Both lines of a digest that straddles two, as the limit's pass over a hit's lines reads;
    // none with hot hashes, which a cycle finds in cache.
    std::vector<std::uintptr_t> caller_lines;
    if (!context.hot_hashes) {
      for (const BlockDigest* d : probed) {
        caller_lines.push_back(reinterpret_cast<std::uintptr_t>(d->bytes.data()) / kLineBytes);
        caller_lines.push_back(
            reinterpret_cast<std::uintptr_t>(d->bytes.data() + BlockDigest::kSize - 1) /
            kLineBytes);
      }
    }
    std::sort(caller_lines.begin(), caller_lines.end());
    const auto distinct = static_cast<std::uint64_t>(
        std::unique(caller_lines.begin(), caller_lines.end()) - caller_lines.begin());
    context.cycle_line_bytes =
        (distinct + 2 * static_cast<std::uint64_t>(probed.size())) * kLineBytes;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    context.l3_bytes = l3 > 0 ? static_cast<std::uint64_t>(l3) : 0;
  }
  // No pass over a hit's lines with hot hashes: warming a request's hashes streams them
  // through the caches (1 MiB for dsv4-flash) and evicts the lines earlier calls left there,
  // which a pass over the cycle's lines alone would keep (it would state a limit from cache).
  // The rows keep the independent-read rate, which no cache helps.
  if (context.hot_hashes) {
    probed.clear();
  }
  LimitBuffer limit_buffer(context.store_bytes, 0x5EED);
  context.limit = limit_buffer.measure(probed);
  LimitTurns turns(limit_buffer, probed, context.limit);
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
    if (!t.pct_of_independent.empty()) {
      row.pct_of_independent = percentile(t.pct_of_independent, 0.5);
      row.limit_turns = static_cast<int>(t.pct_of_independent.size());
    }
    if (keys && !t.independent_ns.empty() && per_call > 0) {
      row.one_line_floor_us =
          *keys * percentile(t.independent_ns, 0.5) * 1e-3 / static_cast<double>(per_call);
    }
    if (!t.x_hit_lines.empty()) {
      row.x_hit_lines = percentile(t.x_hit_lines, 0.5);
      row.x_hit_lines_p10 = percentile(t.x_hit_lines, 0.1);
      row.x_hit_lines_p90 = percentile(t.x_hit_lines, 0.9);
    }
    rows.push_back(row);
  };
  const std::pair<const char*, StoreShape> lookups[] = {
      {"lookup_full_store", StoreShape::full},
      {"lookup_with_hole", StoreShape::with_hole},
      {"lookup_store_mask_roundtrip", StoreShape::store_mask_roundtrip}};
  for (const auto& [name, shape] : lookups) {
    const BlockIndex::View view = index.view(static_cast<Namespace>(shape));
    const CountingSource counter(view);
    for (std::int64_t r = 0; r < requests; ++r) {
      sink += coordinator.find_longest_cache_hit(request_hashes(r), max_length, counter).hit_length;
    }
    const double keys = static_cast<double>(counter.keys()) / static_cast<double>(requests);
    turns.keys_per_call = keys;
    std::int64_t next = 0;
    // Each call looks up the next stored request, so calls do not find the last one's lines.
    const Timing t = time_op(
        [&] {
          sink +=
              coordinator.find_longest_cache_hit(request_hashes(next), max_length, view).hit_length;
          next = (next + 1) % requests;
        },
        min_seconds, &turns, [&] { warm(request_hashes(next)); });
    add(name, 1, t, keys, 0);
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
  turns.keys_per_call = static_cast<double>(counter.keys());
  double one_thread_p50 = 0;   // the one-thread batch, for the two-thread rows
  std::size_t parked_row = 0;  // the row that states what wake-ups leave
  // Two threads twice: back to back, where the worker is still spinning for work when the next
  // batch comes (host/worker_pool.hpp), and with the worker parked before each call, as a batch
  // per scheduler step finds it. The caller works through the pause rather than sleeps, as a
  // runtime does between steps. Then one thread whose core halts for the same pause, as a parked
  // worker's does: what a halt costs the lookups that follow it on this machine (on a shared
  // host, other work runs on the idle core). Pauses are outside the timing. The rows take turns
  // (time_rows), so the two-thread speed-ups compare calls timed in the same minutes.
  enum class Pause { none, busy, sleep };
  const auto pause = park_pause();
  struct BatchRow {
    const char* op;
    int threads;
    Pause before;
  };
  const BatchRow configs[] = {{"batch_lookup_full_store", 1, Pause::none},
                              {"batch_lookup_full_store_2threads", 2, Pause::none},
                              {"batch_lookup_full_store_2threads_parked", 2, Pause::busy},
                              {"batch_lookup_full_store_after_halt", 1, Pause::sleep}};
  // Each row alternates between two batches of its own, the first and the last b requests.
  int which[std::size(configs)] = {};
  std::vector<InterleavedRow> timed;
  timed.reserve(std::size(configs));
  for (std::size_t c = 0; c < std::size(configs); ++c) {
    const BatchRow& config = configs[c];
    BatchOptions options;
    options.num_threads = config.threads;
    timed.push_back(InterleavedRow{
        [&, options, c] {
          sink +=
              coordinator.find_longest_cache_hits(batches[which[c]], full, options).hit_lengths[0];
          which[c] ^= 1;
        },
        [&, config, c] {
          double slept = 0;
          if (config.before == Pause::busy) {
            busy_wait(pause);
          } else if (config.before == Pause::sleep) {
            const auto begin = std::chrono::steady_clock::now();
            std::this_thread::sleep_for(pause);
            slept = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
          }
          warm(batches[which[c]].digests);
          return slept;
        }});
  }
  const std::vector<Timing> timings = time_rows(timed, min_seconds, turns);
  for (std::size_t c = 0; c < std::size(configs); ++c) {
    const BatchRow& config = configs[c];
    add(config.op, b, timings[c], static_cast<double>(counter.keys()), config.threads);
    if (config.threads == 1 && config.before == Pause::none) {
      one_thread_p50 = timings[c].p50_us;
    }
    if (config.threads == 2 && config.before == Pause::busy) {
      parked_row = rows.size() - 1;
    }
  }
  // What the machine's thread wake-ups leave of 2x, beside the row whose worker they wake.
  context.wake = measure_pool_wake(200);
  rows[parked_row].two_thread_ceiling = context.wake.two_thread_ceiling(one_thread_p50);
  // Publishing the results keeps the timed calls from being optimised away.
  g_bench_sink.store(sink + static_cast<std::int64_t>(limit_buffer.checksum() & 1U),
                     std::memory_order_relaxed);
  return rows;
}

}  // namespace prefixhit::cli
