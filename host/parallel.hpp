// Small fork-join helpers: contiguous ranges (parallel_for) or items claimed one at a time
// (parallel_claim), run on the calling thread and the process's worker pool (worker_pool.hpp).
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

/// Calls body(item) once for every item in [0, n), the calling thread and up to threads - 1
/// workers each claiming the next item from a shared counter. A worker can start late (a parked
/// pool thread takes about 5 us to wake, a new thread 18-70 us, more when the other core sleeps),
/// so under a static split the caller, done with its half, would wait for a late worker's whole
/// half; here a late worker takes only what is left. After an item throws, no new item is claimed;
/// the first exception is rethrown once every thread has stopped.
template <class Body, class Start = StartPooled>
void parallel_claim(std::size_t n, int threads, const Body& body, const Start& start = Start{}) {
  if (threads <= 1 || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) {
      body(i);
    }
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(threads), n);
  run_parts(
      parts,
      [&](std::size_t) {
        try {
          for (std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
               i < n && !failed.load(std::memory_order_relaxed);
               i = next.fetch_add(1, std::memory_order_relaxed)) {
            body(i);
          }
        } catch (...) {
          failed.store(true, std::memory_order_relaxed);
          throw;
        }
      },
      start);
}

/// Calls body(begin, end) on ranges covering [0, n), for work whose cost is not known up front.
/// Ranges of `large` items run best on one thread (their probes overlap in one pipeline); ranges of
/// `small` items share out among threads. The calling thread first runs a quarter of a small
/// range, [0, max(1, small / 4)), and times it, then starts workers only as many as the items
/// left are worth at that pace, one per `min_seconds_per_worker` of remaining work (0: up to
/// `threads` regardless), and these claim the rest in ranges of `small` (parallel_claim). Worth
/// none, the caller runs the rest in ranges of `large`. A worker costs a wake-up (a start, for
/// the pool's first call), and small ranges lose the overlap: 64 lookups of 4096-token prompts
/// (270-320 us on one thread) took 1.1-1.8x as long on two threads, ranges of 8, as on one (paired
/// medians). The timed range is short so that the work done before any worker starts stays small.
template <class Body, class Start = StartPooled>
void parallel_ranges_if_worth(std::size_t n, std::size_t small, std::size_t large, int threads,
                              double min_seconds_per_worker, const Body& body,
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
    return;
  }
  const std::size_t first = std::max<std::size_t>(1, small / 4);
  const auto first_start = std::chrono::steady_clock::now();
  body(std::size_t{0}, first);
  const double first_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
  int workers = threads;
  if (min_seconds_per_worker > 0) {
    const double left_seconds =
        first_seconds * static_cast<double>(n - first) / static_cast<double>(first);
    workers = static_cast<int>(
        std::min<double>(threads, std::floor(left_seconds / min_seconds_per_worker)));
  }
  if (workers <= 1) {
    serial_from(first);
    return;
  }
  parallel_claim((n - first + small - 1) / small, workers,
                 [&](std::size_t k) {
                   const std::size_t begin = first + small * k;
                   body(begin, std::min(n, begin + small));
                 },
                 start);
}

}  // namespace prefixhit::detail
