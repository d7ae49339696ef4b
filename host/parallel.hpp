// Small fork-join helpers: contiguous ranges (parallel_for) or ranges claimed from a shared
// counter (parallel_claim_ranges; parallel_ranges_if_worth and parallel_ranges_paced decide
// whether workers are worth starting), run on the calling thread and the process's worker pool
// (worker_pool.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "host/worker_pool.hpp"

namespace prefixhit::detail {

/// Number of workers for `n` items when each worker should get at least `min_per_thread`.
inline int choose_threads(std::size_t n, int requested, std::size_t min_per_thread) {
  // hardware_concurrency() reads /sys on glibc (about 9 us here): once per process, not per batch.
  static const unsigned hw = std::max(1U, std::thread::hardware_concurrency());
  const std::size_t cap = requested > 0 ? static_cast<std::size_t>(requested) : hw;
  const std::size_t by_work =
      std::max<std::size_t>(1, n / std::max<std::size_t>(1, min_per_thread));
  return static_cast<int>(std::min(cap, by_work));
}

/// Runs part(p) for p in [0, parts): parts 1.. on threads from `start` (the pool's by default),
/// part 0 and any part whose thread could not be started on the calling thread. A worker that
/// cannot be started (thread or memory limit: std::system_error, bad_alloc) is not an error, so
/// work under a thread limit is slower, never lost. If a part throws, the first exception is
/// rethrown here once every part has finished.
template <class Part, class Start>
void run_parts(std::size_t parts, const Part& part, const Start& start) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto run = [&](std::size_t p) noexcept {
    try {
      part(p);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) {
        failure = std::current_exception();
      }
    }
  };
  const auto run_part = [&run](std::size_t p) { return [&run, p] { run(p); }; };
  std::vector<std::invoke_result_t<const Start&, decltype(run_part(0))>> workers;
  std::size_t started = 1;  // part 0 is the calling thread's
  try {
    workers.reserve(parts - 1);
    for (; started < parts; ++started) {
      workers.push_back(start(run_part(started)));
    }
  } catch (const std::system_error&) {
    // No more threads: the remaining parts run below, on this thread.
  } catch (const std::bad_alloc&) {
  }
  run(0);
  for (std::size_t p = started; p < parts; ++p) {
    run(p);
  }
  for (auto& w : workers) {
    w.join();
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

/// Calls body(begin, end) on disjoint ranges covering [0, n); the calling thread takes one.
/// Threads that cannot start and exceptions are handled as in run_parts. `start` (tests only)
/// creates the threads.
template <class Body, class Start = StartPooled>
void parallel_for(std::size_t n, int threads, const Body& body, const Start& start = Start{}) {
  if (threads <= 1 || n <= 1) {
    body(std::size_t{0}, n);
    return;
  }
  const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(threads), n);
  run_parts(
      parts, [&](std::size_t p) { body(n * p / parts, n * (p + 1) / parts); }, start);
}

/// Calls body(begin, end) on ranges covering [begin, n) that threads claim from a shared counter
/// (guided self-scheduling): each claim takes the items left divided by 2 x the threads, at most
/// `largest` and at least `smallest`. Early ranges are long (their probes overlap in one pipeline)
/// and the last ones short, so that the threads finish within about `smallest` items of each
/// other: with fixed ranges of 8 lookups, a thread left alone with the last range idled the other
/// for up to 8 lookups. A worker can start late (a parked pool thread takes 5-45 us to wake, a
/// new thread 18-70 us, more when the other core sleeps): under a static split the caller, done
/// with its half, would wait for a late worker's whole half; here a late worker takes only what
/// is left. Threads that cannot start and exceptions are handled as in run_parts; after a range
/// throws, no new range is claimed. Returns the parts run (threads, counting the caller).
template <class Body, class Start = StartPooled>
std::size_t parallel_claim_ranges(std::size_t begin, std::size_t n, std::size_t smallest,
                                  std::size_t largest, int threads, const Body& body,
                                  const Start& start = Start{}) {
  if (begin >= n) {
    return 0;
  }
  smallest = std::max<std::size_t>(smallest, 1);
  largest = std::max(largest, smallest);
  const std::size_t parts = std::min(static_cast<std::size_t>(std::max(threads, 1)),
                                     (n - begin + smallest - 1) / smallest);
  std::atomic<std::size_t> next{begin};
  std::atomic<bool> failed{false};
  const auto claim = [&](std::size_t& from, std::size_t& to) {
    from = next.load(std::memory_order_relaxed);
    do {
      if (from >= n) {
        return false;
      }
      to = from + std::clamp((n - from) / (2 * parts), smallest, largest);
      to = std::min(to, n);
    } while (!next.compare_exchange_weak(from, to, std::memory_order_relaxed));
    return true;
  };
  run_parts(
      parts,
      [&](std::size_t) {
        try {
          std::size_t from = 0;
          std::size_t to = 0;
          while (!failed.load(std::memory_order_relaxed) && claim(from, to)) {
            body(from, to);
          }
        } catch (...) {
          failed.store(true, std::memory_order_relaxed);
          throw;
        }
      },
      start);
  return parts;
}

/// Workers worth starting for `seconds` of work: one per `min_seconds_per_worker`, at most
/// `threads` (all of them when min_seconds_per_worker is 0).
inline int workers_worth(double seconds, int threads, double min_seconds_per_worker) {
  if (min_seconds_per_worker <= 0) {
    return threads;
  }
  return static_cast<int>(std::min<double>(threads, std::floor(seconds / min_seconds_per_worker)));
}

/// The shortest claimed range: as many items as take about 8 us at `item_seconds` each, within
/// [at_least, at_most]. A range has a fixed cost (its probe pipeline fills and drains) that one or
/// two short lookups do not repay. Bounded in double before the conversion: an item that timed
/// as 0 s must not convert inf.
inline std::size_t shortest_range(double item_seconds, std::size_t at_least, std::size_t at_most) {
  constexpr double kShortestRangeSeconds = 8e-6;
  const double items =
      item_seconds > 0 ? kShortestRangeSeconds / item_seconds : static_cast<double>(at_most);
  return std::clamp<std::size_t>(
      static_cast<std::size_t>(std::min(items, static_cast<double>(at_most))), at_least, at_most);
}

/// Calls body(begin, end) on ranges covering [0, n), for work whose cost is not known up front.
/// Ranges of `large` items run best on one thread (their probes overlap in one pipeline). The
/// calling thread first runs a quarter of a `small` range, [0, max(1, small / 4)), and times it,
/// then starts workers only as many as the items left are worth at that pace, one per
/// `min_seconds_per_worker` of remaining work (0: up to `threads` regardless), and these claim
/// the rest in guided ranges of at most `small` items (parallel_claim_ranges), down to as many as
/// take about 8 us at that pace. Worth none, the caller runs the rest in ranges of `large`. A
/// worker costs a wake-up (a start, for the pool's first call), and short ranges lose the overlap:
/// 64 lookups of 4096-token prompts (270-320 us on one thread) took 1.1-1.8x as long on two
/// threads, fixed ranges of 8, as on one (paired medians), and guided ranges of up to 64 (larger
/// first claims) cost those 12% more again. The timed range is short so that the work done before
/// any worker starts stays small.
template <class Body, class Start = StartPooled>
std::size_t parallel_ranges_if_worth(std::size_t n, std::size_t small, std::size_t large,
                                     int threads, double min_seconds_per_worker, const Body& body,
                                     const Start& start = Start{}) {
  small = std::max<std::size_t>(small, 1);
  large = std::max<std::size_t>(large, 1);
  const auto serial_from = [&](std::size_t begin) {
    for (; begin < n; begin += large) {
      body(begin, std::min(n, begin + large));
    }
  };
  if (threads <= 1 || n <= small) {
    serial_from(0);
    return 1;
  }
  const std::size_t first = std::max<std::size_t>(1, small / 4);
  const auto first_start = std::chrono::steady_clock::now();
  body(std::size_t{0}, first);
  const double first_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
  const double item_seconds = first_seconds / static_cast<double>(first);
  const int workers =
      workers_worth(item_seconds * static_cast<double>(n - first), threads, min_seconds_per_worker);
  if (workers <= 1) {
    serial_from(first);
    return 1;
  }
  const std::size_t shortest = shortest_range(item_seconds, first, small);
  return std::max<std::size_t>(
      1, parallel_claim_ranges(first, n, shortest, small, workers, body, start));
}

/// The pace of one call site's recent work, in thread seconds per unit of work (a batch's
/// hashes, say); 0 until a call is recorded. Shared by the threads that call there; a racing
/// update loses a sample, which a hint can afford.
class Pace {
 public:
  double seconds_per_unit() const noexcept { return seconds_.load(std::memory_order_relaxed); }

  /// Folds in a call that took `seconds` of thread time for `units`: a running average that
  /// weighs the newest call a quarter. Meaningless samples (no units, not finite) are ignored.
  void record(double seconds, double units) noexcept {
    if (!(units > 0) || !(seconds >= 0) || !std::isfinite(seconds / units)) {
      return;
    }
    const double sample = seconds / units;
    const double old = seconds_.load(std::memory_order_relaxed);
    seconds_.store(old > 0 ? 0.75 * old + 0.25 * sample : sample, std::memory_order_relaxed);
  }

 private:
  std::atomic<double> seconds_{0};
};

/// parallel_ranges_if_worth for a call site that runs similar work again and again (a runtime's
/// batch each scheduler step). When `pace` says this call's `units` are worth workers (one per
/// `min_seconds_per_worker`, at least two), they start at once and claim guided ranges of at
/// most `small`, the shortest taking about 8 us at that pace: nothing is timed first. Else the
/// call times its first range as parallel_ranges_if_worth does. Either way its thread time (wall
/// time x threads) per unit updates `pace`. Why: a parked worker of a virtual machine can take
/// tens of microseconds to wake, and the timed first range runs alone before it. A 64-request
/// batch of 131072-token lookups at 10.1M keys ran 1.63-1.72x one thread's speed on two against
/// 1.57-1.67x with the timed start (docs/perf/cpu.md, nineteenth round). A pace gone stale only
/// starts a worker that was not needed, or times a call that did not need timing.
template <class Body, class Start = StartPooled>
void parallel_ranges_paced(std::size_t n, double units, std::size_t small, std::size_t large,
                           int threads, double min_seconds_per_worker, Pace& pace, const Body& body,
                           const Start& start = Start{}) {
  small = std::max<std::size_t>(small, 1);
  const auto started = std::chrono::steady_clock::now();
  const double predicted = pace.seconds_per_unit() * units;
  const int workers = threads > 1 && n > small && predicted > 0
                          ? workers_worth(predicted, threads, min_seconds_per_worker)
                          : 1;
  std::size_t used = 0;
  if (workers > 1) {
    const std::size_t shortest = shortest_range(predicted / static_cast<double>(n), 1, small);
    used = parallel_claim_ranges(0, n, shortest, small, workers, body, start);
  } else {
    used = parallel_ranges_if_worth(n, small, large, threads, min_seconds_per_worker, body, start);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  pace.record(seconds * static_cast<double>(std::max<std::size_t>(used, 1)), units);
}

}  // namespace prefixhit::detail
