// A small fork-join helper: splits [0, n) into contiguous ranges over std::threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

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

/// Starts a std::thread running `work`; the default starter of parallel_for.
struct StartThread {
  template <class Work>
  std::thread operator()(Work&& work) const {
    return std::thread(std::forward<Work>(work));
  }
};

/// Calls body(begin, end) on disjoint ranges covering [0, n); the calling thread takes one.
/// A worker that cannot be started (thread or memory limit: std::system_error, bad_alloc) is
/// not an error: its range runs on the calling thread instead, so a batch under a thread limit
/// is slower, never lost. If `body` throws, the first exception is rethrown here once every
/// range has finished. `start` (tests only) creates the threads.
template <class Body, class Start = StartThread>
void parallel_for(std::size_t n, int threads, const Body& body, const Start& start = Start{}) {
  if (threads <= 1 || n <= 1) {
    body(std::size_t{0}, n);
    return;
  }
  const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(threads), n);
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto run = [&](std::size_t p) noexcept {
    try {
      body(n * p / parts, n * (p + 1) / parts);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) {
        failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> workers;
  std::size_t started = 1;  // part 0 is the calling thread's
  try {
    workers.reserve(parts - 1);
    for (; started < parts; ++started) {
      workers.push_back(start([&run, p = started] { run(p); }));
    }
  } catch (const std::system_error&) {
    // No more threads: the remaining parts run below, on this thread.
  } catch (const std::bad_alloc&) {
  }
  run(0);
  for (std::size_t p = started; p < parts; ++p) {
    run(p);
  }
  for (std::thread& w : workers) {
    w.join();
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

}  // namespace prefixhit::detail
