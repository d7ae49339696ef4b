// A small fork-join helper: splits [0, n) into contiguous ranges over std::threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
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

/// Calls body(begin, end) on disjoint ranges covering [0, n); the calling thread takes one.
/// `body` must not throw.
template <class Body>
void parallel_for(std::size_t n, int threads, const Body& body) {
  if (threads <= 1 || n <= 1) {
    body(std::size_t{0}, n);
    return;
  }
  const std::size_t parts = std::min<std::size_t>(static_cast<std::size_t>(threads), n);
  std::vector<std::thread> workers;
  workers.reserve(parts - 1);
  for (std::size_t p = 1; p < parts; ++p) {
    workers.emplace_back([&body, n, parts, p] { body(n * p / parts, n * (p + 1) / parts); });
  }
  body(0, n / parts);
  for (std::thread& w : workers) {
    w.join();
  }
}

}  // namespace prefixhit::detail
