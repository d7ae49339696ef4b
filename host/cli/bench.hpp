// Workloads and result rows shared by `prefixhit bench` on the CPU and on the GPU, and the clocks
// and percentile that bench and `prefixhit route-bench` time with.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::cli {

/// CPU time of the calling thread: on a shared machine it leaves out the time the thread waits
/// for a core, which wall time would charge to the code (or to the memory system).
double thread_cpu_seconds();
/// CPU time of the whole process (every thread's).
double process_cpu_seconds();
/// The p-th percentile (p in [0, 1]) of `v`, nearest rank; 0 when empty.
double percentile(std::vector<double> v, double p);

/// A named model shape (SEMANTICS.md terms) and its default prompt length.
struct Workload {
  std::string name;
  Config config;
  std::int64_t tokens = 0;  ///< prompt length of every request
};

/// dsv4-flash, fa-3swa, fa-mamba-align.
const std::vector<std::string>& workload_names();
/// Throws InvalidArgument for an unknown name. tokens <= 0 keeps the workload's default.
Workload make_workload(const std::string& name, std::int64_t tokens = 0);

/// Hash chains of `requests` distinct prompts, concatenated: request r owns
/// [r*n, (r+1)*n) with n = tokens / H. Deterministic for a seed.
std::vector<BlockDigest> make_request_hashes(const Workload& workload, std::int64_t requests,
                                             std::uint64_t seed);

/// What the store holds for each request.
enum class StoreShape {
  full,                  ///< every block key of every group
  with_hole,             ///< full, less the blocks covering the token at 3/4 of the prompt
  store_mask_roundtrip,  ///< exactly what store_mask(aligned prompt) writes
};

/// Inserts the keys `shape` says a store holds for one request into `index` under `ns`.
void fill_store(BlockIndex& index, Namespace ns, const Coordinator& coordinator,
                span<const BlockDigest> hashes, std::int64_t tokens, StoreShape shape);

/// One line of bench output.
struct BenchRow {
  std::string workload;
  std::string backend;
  std::string op;
  std::int64_t requests = 0;  ///< requests per call
  std::int64_t tokens = 0;    ///< tokens per request
  double us_per_call = 0;     ///< end-to-end wall time per call
  double calls_per_s = 0;
  std::optional<double> device_us;      ///< GPU: device time per call (CUDA events)
  std::optional<double> keys_per_s;     ///< keys probed per second, where counted
  std::optional<double> p50_us;         ///< CPU: median of the per-call times
  std::optional<double> p99_us;         ///< CPU: 99th percentile of the per-call times
  std::optional<double> cpu_us;         ///< CPU: process CPU time per call (all threads)
  std::optional<double> keys_per_call;  ///< CPU: index keys probed per call
  int threads = 0;                      ///< CPU batch: threads asked for (0: not a batch)
  /// CPU lookup rows, timed in turns with the limit's reads (LimitTurns): over the turns, the
  /// median of the call's key rate as a % of the independent-read rate, and the median, 10th
  /// and 90th percentile of its time over its keys' hit lines.
  std::optional<double> pct_of_independent;
  std::optional<double> x_hit_lines;
  std::optional<double> x_hit_lines_p10;
  std::optional<double> x_hit_lines_p90;
  /// The issue's physical floor per request: its keys at one independent read each (the median
  /// turn's rate), what even an index that moved one line per key would cost.
  std::optional<double> one_line_floor_us;
  int limit_turns = 0;
  /// CPU batch on two threads whose worker is parked before each call: PoolWake::
  /// two_thread_ceiling of the one-thread batch's p50, the speed-up the machine's wake-ups leave
  /// possible.
  std::optional<double> two_thread_ceiling;
};

/// How the limit's independent reads are issued: plain loads, or each line prefetched ahead of
/// its load into L1 or into L2.
enum class Issue { loads, prefetched_l1, prefetched_l2 };
inline constexpr int kIssues = 3;
inline constexpr Issue kEveryIssue[kIssues] = {Issue::loads, Issue::prefetched_l1,
                                               Issue::prefetched_l2};
const char* issue_name(Issue issue);

/// ns per read (or per key) for each way of issuing the reads.
struct ReadWays {
  double ns[kIssues] = {0, 0, 0};
  double at(Issue issue) const { return ns[static_cast<int>(issue)]; }
  Issue fastest_issue() const;
  double fastest() const { return at(fastest_issue()); }
};

/// The memory system's limit over a buffer the size of the index, measured in the same run.
struct MemoryLimit {
  std::uint64_t bytes = 0;
  double dependent_ns = 0;  ///< per random 64-byte read that waits on the previous one
  /// Per random 64-byte read with no dependence between reads, each way of issuing them.
  ReadWays independent;
  /// The same on two threads at once: each thread's CPU ns per read (0: no second thread).
  double independent_2t_ns = 0;
  /// The share of the wall time the two threads had a core (their CPU time over twice the wall
  /// time): near 1 on a quiet machine; the scaling below holds only then.
  double two_thread_overlap = 0;
  /// A hit's own lines read independently, per key: the caller's digest where it lies (the
  /// probed keys of one pass of lookups, in order) and a header and a digest line of the buffer
  /// that the digest picks, as the index's hash does. What this layout's lookup would cost if
  /// it did nothing but move its lines (all 0: not measured). Each way of issuing the reads.
  ReadWays hit_lines;
  std::uint64_t checksum = 0;
  /// Per independent read, the fastest way.
  double independent_ns() const { return independent.fastest(); }
  /// Per key of a hit's lines, the fastest way (0: not measured).
  double hit_lines_ns() const { return hit_lines.fastest(); }
  /// Reads one core keeps in flight: DRAM latency over the independent-read time.
  double in_flight() const { return independent_ns() > 0 ? dependent_ns / independent_ns() : 0; }
  /// Two threads' independent-read rate over one thread's (2: the second core brings its own
  /// misses in flight; 1: the two share them).
  double two_thread_scaling() const {
    return independent_2t_ns > 0 ? 2 * independent_ns() / independent_2t_ns : 0;
  }
};

/// The buffer the in-run limit reads: the index's size, allocated like its table (huge pages
/// where allowed). It lives for the whole run, so that each lookup row can take turns with the
/// limit's reads and be compared with them under the same conditions (`LimitTurns`).
class LimitBuffer {
 public:
  LimitBuffer(std::uint64_t bytes, std::uint64_t seed);
  ~LimitBuffer();
  LimitBuffer(const LimitBuffer&) = delete;
  LimitBuffer& operator=(const LimitBuffer&) = delete;

  /// The whole limit at once: dependent reads, independent reads on one and two threads, and,
  /// where `probed` (the caller digests a pass of lookups probed) is not empty, a hit's lines.
  MemoryLimit measure(const std::vector<const BlockDigest*>& probed);
  /// Thread CPU ns per read of about `reads` independent random reads, a third issued each way
  /// (Issue): the fastest third's.
  double independent_ns(std::uint64_t reads);
  /// Thread CPU ns per key of a hit's lines read for about `keys` of `probed` (0 if empty), a
  /// third issued each way, each way its own keys, continuing where the last call stopped: the
  /// fastest third's.
  double hit_lines_ns(const std::vector<const BlockDigest*>& probed, std::size_t keys);
  std::uint64_t bytes() const;
  /// What the reads read, so that no read can be optimised away.
  std::uint64_t checksum() const;

 private:
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
};

/// What starting a batch's worker from the process's pool costs, in the same run (medians over
/// trials, each after the worker has parked, as between two scheduler steps). On a KVM guest whose
/// idle vCPUs halt, both sides take tens of microseconds; on a quiet bare-metal core, a few.
struct PoolWake {
  double caller_us = 0;  ///< the caller's time in the wake call: its own share starts this late
  double worker_us = 0;  ///< from the call to the job's start on the worker
  /// The most two threads can speed up work that takes `one_thread_us` on one, both shares
  /// starting late by these costs and ending together (0: not measured).
  double two_thread_ceiling(double one_thread_us) const;
};

/// Measures PoolWake over `trials` wake-ups of a parked pool thread.
PoolWake measure_pool_wake(int trials);

/// How long a caller works before a pool worker that has just finished has surely parked: its
/// idle spin plus 50 us. The wake-up measurement and the bench's parked rows pause this long.
std::chrono::microseconds park_pause();

/// Keeps the calling thread busy for `pause`, as a runtime's own work between two batches does
/// (a sleeping caller would add its own wake-up).
void busy_wait(std::chrono::microseconds pause);

/// The store and the memory limit the CPU rows are measured against.
struct CpuBenchContext {
  std::uint64_t store_keys = 0;
  /// The share of keys in the digest line a lookup prefetches with their header (one round
  /// trip to memory for a hit; BlockIndex::layout()).
  double in_prefetched_line = 0;
  /// The share of keys in the second bucket of their sequence (their home bucket full).
  double in_second_bucket = 0;
  std::uint64_t store_slots = 0;
  std::uint64_t store_bytes = 0;
  std::int64_t cycled_requests = 0;
  /// The lines one cycle of single full-store lookups reads: the caller digests' distinct lines
  /// (both of a digest that straddles two), and a header and a digest line per probed key. Where
  /// this fits in the L3, a cycle's lines stay partly cached and the lookups miss less than lookups
  /// of ever-new prompts would.
  std::uint64_t cycle_line_bytes = 0;
  std::uint64_t l3_bytes = 0;     // as the CPU reports it (0: unknown); a VM may get less of it
  bool huge_page_hashes = false;  // the requests' hashes on 2 MiB pages (else malloc's 4 KiB)
  /// Each call's request hashes read just before it, outside its timing (else cold: last read a
  /// cycle of lookups ago).
  bool hot_hashes = false;
  MemoryLimit limit;
  PoolWake wake;
  std::int64_t worker_spin_us = 0;  ///< how long the pool's workers spin before they park
};

/// Fills a resident index with `requests` requests of `workload` in each store shape, measures
/// the memory limit over a buffer of its size, and times the lookup rows (single lookups cycle
/// through the requests; batches of `batch_size` alternate between the first and the last).
std::vector<BenchRow> run_cpu_bench(const Workload& workload, std::int64_t requests,
                                    std::int64_t batch_size, double min_seconds,
                                    CpuBenchContext& context);

/// Times the lookup ops of `workload` on the GPU with batches of `requests` requests, for at
/// least `min_seconds` each. Throws Unavailable without CUDA or a device.
std::vector<BenchRow> run_gpu_bench(const Workload& workload, std::int64_t requests,
                                    double min_seconds);

}  // namespace prefixhit::cli
