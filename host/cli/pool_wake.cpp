// The cost of starting a batch's worker, measured in `prefixhit bench`'s own run: what part of
// two threads' shortfall from 2x one thread's speed the machine's thread wake-ups explain.
#include <atomic>
#include <chrono>
#include <vector>

#include "host/cli/bench.hpp"
#include "host/worker_pool.hpp"

namespace prefixhit::cli {

double PoolWake::two_thread_ceiling(double one_thread_us) const {
  // The caller's share starts caller_us late and the worker's worker_us late; at best both end
  // together: (T - caller_us) + (T - worker_us) = one_thread_us.
  const double wall = (one_thread_us + caller_us + worker_us) / 2;
  return wall > 0 && one_thread_us > 0 ? one_thread_us / wall : 0;
}

void busy_wait(std::chrono::microseconds pause) {
  const auto resume = std::chrono::steady_clock::now() + pause;
  while (std::chrono::steady_clock::now() < resume) {
  }
}

std::chrono::microseconds park_pause() {
  return detail::pool_idle_spin() + std::chrono::microseconds(50);
}

PoolWake measure_pool_wake(int trials) {
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  };
  std::vector<double> caller;
  std::vector<double> worker;
  for (int t = 0; t < trials; ++t) {
    // As between two scheduler steps: the worker has finished, spun for work and parked; the
    // caller works on.
    busy_wait(park_pause());
    std::atomic<bool> started{false};
    Clock::time_point started_at;
    const auto begin = Clock::now();
    detail::PooledJob job = detail::run_pooled([&] {
      started_at = Clock::now();
      started.store(true, std::memory_order_release);
    });
    const auto returned = Clock::now();
    while (!started.load(std::memory_order_acquire)) {
    }
    job.join();
    caller.push_back(us(returned - begin));
    worker.push_back(us(started_at - begin));
  }
  PoolWake wake;
  wake.caller_us = percentile(caller, 0.5);
  wake.worker_us = percentile(worker, 0.5);
  return wake;
}

}  // namespace prefixhit::cli
