// Batches that remember their pace (host/parallel.hpp: Pace, parallel_ranges_paced): a known
// pace that says the work is worth workers starts them before any range runs; an unknown or
// cheap pace falls back to timing the first range; every item runs once either way.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "host/parallel.hpp"

namespace prefixhit {
namespace {

/// Starts real threads, counting them and noting whether any range had run before the first.
struct WatchingStarter {
  std::atomic<int>* started;
  const std::atomic<bool>* body_ran;
  std::atomic<bool>* started_after_body;
  template <class Work>
  std::thread operator()(Work&& work) const {
    if (started->fetch_add(1) == 0) {
      started_after_body->store(body_ran->load());
    }
    return std::thread(std::forward<Work>(work));
  }
};

struct WatchedRun {
  std::vector<std::atomic<int>> seen;
  std::atomic<bool> body_ran{false};
  std::atomic<int> started{0};
  std::atomic<bool> started_after_body{false};

  explicit WatchedRun(std::size_t n) : seen(n) {}
  WatchingStarter starter() { return WatchingStarter{&started, &body_ran, &started_after_body}; }
  auto body(std::chrono::microseconds per_range) {
    return [this, per_range](std::size_t b, std::size_t e) {
      body_ran.store(true);
      for (std::size_t i = b; i < e; ++i) {
        ++seen[i];
      }
      std::this_thread::sleep_for(per_range);
    };
  }
  void expect_each_item_once() const {
    for (std::size_t i = 0; i < seen.size(); ++i) {
      ASSERT_EQ(seen[i].load(), 1) << "item " << i;
    }
  }
};

TEST(Pace, StartsUnknownAndAveragesItsSamples) {
  detail::Pace pace;
  EXPECT_EQ(pace.seconds_per_unit(), 0.0);
  pace.record(2.0, 4.0);
  EXPECT_DOUBLE_EQ(pace.seconds_per_unit(), 0.5);
  pace.record(1.0, 1.0);  // the newest call weighs a quarter
  EXPECT_DOUBLE_EQ(pace.seconds_per_unit(), 0.625);
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [seconds, units] : std::vector<std::pair<double, double>>{
           {1.0, 0.0}, {1.0, -2.0}, {-1.0, 1.0}, {inf, 1.0}, {std::nan(""), 1.0}}) {
    pace.record(seconds, units);
    EXPECT_DOUBLE_EQ(pace.seconds_per_unit(), 0.625) << seconds << " s for " << units;
  }
}

TEST(ParallelRangesPaced, AKnownPaceStartsWorkersBeforeAnyRangeRuns) {
  detail::Pace pace;
  pace.record(1e-3, 1.0);  // 1 ms a unit: 40 units are worth a worker per 1 ms
  WatchedRun run(40);
  detail::parallel_ranges_paced(run.seen.size(), 40.0, 4, 16, 2, 1e-3, pace,
                                run.body(std::chrono::microseconds(200)), run.starter());
  run.expect_each_item_once();
  EXPECT_EQ(run.started.load(), 1);
  EXPECT_FALSE(run.started_after_body.load()) << "the worker waited for a timed range";
  EXPECT_GT(pace.seconds_per_unit(), 0.0);
  EXPECT_NE(pace.seconds_per_unit(), 1e-3) << "the call's own pace was not folded in";
}

TEST(ParallelRangesPaced, WithoutAPaceTheFirstRangeIsTimedFirstAndThePaceRecorded) {
  detail::Pace pace;
  WatchedRun run(40);
  // Ranges of 2 ms, a worker worth every 1 us of work: parallel_ranges_if_worth's path, which
  // runs [0, 1) alone before it starts the worker.
  detail::parallel_ranges_paced(run.seen.size(), 40.0, 4, 16, 2, 1e-6, pace,
                                run.body(std::chrono::milliseconds(2)), run.starter());
  run.expect_each_item_once();
  EXPECT_EQ(run.started.load(), 1);
  EXPECT_TRUE(run.started_after_body.load());
  EXPECT_GT(pace.seconds_per_unit(), 0.0);
}

TEST(ParallelRangesPaced, ACheapPaceOrOneThreadStartsNoWorker) {
  detail::Pace pace;
  pace.record(1e-12, 1.0);
  WatchedRun run(100);
  // A worker per second of work: the pace predicts none, and the timed path (which falls back
  // on it) none either, however slow an instrumented build makes the timed range.
  detail::parallel_ranges_paced(run.seen.size(), 100.0, 8, 16, 4, 1.0, pace,
                                run.body(std::chrono::microseconds(0)), run.starter());
  run.expect_each_item_once();
  EXPECT_EQ(run.started.load(), 0);
  WatchedRun alone(100);
  pace.record(1.0, 1.0);
  detail::parallel_ranges_paced(alone.seen.size(), 100.0, 8, 16, 1, 0.0, pace,
                                alone.body(std::chrono::microseconds(0)), alone.starter());
  alone.expect_each_item_once();
  EXPECT_EQ(alone.started.load(), 0);
}

}  // namespace
}  // namespace prefixhit
