// The process-wide worker pool behind the batch helpers (host/worker_pool.hpp): threads are reused
// from call to call, end when idle, survive fork() in the child, report a job's exception, a join
// spins before it sleeps, and a worker spins for its next job before it parks.
#include <gtest/gtest.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "host/parallel.hpp"
#include "host/worker_pool.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {
namespace {

/// Every item of [0, n) seen exactly once by parallel_for over `threads`.
bool covers_once(std::size_t n, int threads) {
  std::vector<std::atomic<int>> seen(n);
  detail::parallel_for(n, threads, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      seen[i].fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (std::size_t i = 0; i < n; ++i) {
    if (seen[i].load() != 1) {
      return false;
    }
  }
  return true;
}

/// Polls `done` until it holds or `limit` passes; returns whether it held.
template <class Done>
bool holds_within(std::chrono::seconds limit, const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(WorkerPool, BackToBackCallsReuseTheParkedThreads) {
  // ctest runs each test in its own process, where the pool starts empty; a whole-binary run
  // may have left parked threads.
  std::mt19937_64 rng(std::random_device{}());
  const int threads = 2 + static_cast<int>(rng() % 3);
  const std::size_t before = detail::pool_threads();
  ASSERT_TRUE(covers_once(1000, threads));
  // A worker that finishes its part before the next one starts takes that part too, so the
  // pool may hold fewer threads than the call's workers, never more.
  const std::size_t most = std::max(before, static_cast<std::size_t>(threads - 1));
  EXPECT_GE(detail::pool_threads(), std::max<std::size_t>(before, 1));
  EXPECT_LE(detail::pool_threads(), most);
  for (int call = 0; call < 200; ++call) {
    ASSERT_TRUE(covers_once(100 + rng() % 1000, threads)) << "call " << call;
  }
  // A new thread per call would leave hundreds of parked threads here.
  EXPECT_LE(detail::pool_threads(), most);
}

TEST(WorkerPool, ParkedThreadsEndAfterTheIdleTime) {
  const auto idle = detail::pool_idle_exit();
  detail::set_pool_idle_exit(std::chrono::milliseconds(20));
  ASSERT_TRUE(covers_once(1000, 4));
  holds_within(std::chrono::seconds(30), [] { return detail::pool_threads() == 0; });
  EXPECT_EQ(detail::pool_threads(), 0U);
  // The pool starts threads again afterwards.
  EXPECT_TRUE(covers_once(1000, 3));
  detail::set_pool_idle_exit(idle);
}

TEST(WorkerPool, AForkedChildRunsBatchesOnItsOwnThreads) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer ends a multithreaded process's child that starts threads";
#endif
  // The parent's threads are parked when it forks; the child has none of them, and a child that
  // woke them would wait for ever.
  ASSERT_TRUE(covers_once(1000, 3));
  // At least one thread, and every thread parked at the fork. Not two threads: under load the
  // first worker may take every part before the second starts. All parked: a worker that has
  // just signalled its job done still frees it, and under ASan a fork at that moment leaves the
  // child's allocator locked (the child then hung until the deadline).
  ASSERT_GE(detail::pool_threads(), 1U);
  holds_within(std::chrono::seconds(10),
               [] { return detail::pool_parked_threads() == detail::pool_threads(); });
  ASSERT_EQ(detail::pool_parked_threads(), detail::pool_threads());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bool ok = true;
    for (int call = 0; call < 20 && ok; ++call) {
      ok = covers_once(1000, 3);
    }
    // Exit 1: an item ran twice or never; 10 + n: the child's pool holds n threads, not 1 or 2.
    const std::size_t held = detail::pool_threads();
    _exit(!ok ? 1 : held >= 1 && held <= 2 ? 0 : 10 + static_cast<int>(held));
  }
  int status = 0;
  pid_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((done = waitpid(child, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child's batch did not finish in 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(covers_once(1000, 3));  // and the parent's pool still works
}

TEST(WorkerPool, AJobsExceptionReachesItsJoin) {
  detail::PooledJob job = detail::run_pooled([] { throw InvalidArgument("job failed"); });
  EXPECT_THROW(job.join(), InvalidArgument);
  std::atomic<int> ran{0};
  detail::PooledJob next = detail::run_pooled([&] { ++ran; });
  next.join();
  EXPECT_EQ(ran.load(), 1);  // the thread that ran the failing job still serves
}

TEST(WorkerPool, AJoinSpinsBeforeItSleeps) {
  // A job that ends 20 ms after its join began: seen in a 2 s spin without sleeping, slept on
  // with no spin. Milliseconds and seconds, so that a loaded machine (ctest -j2, a sanitizer)
  // cannot turn one case into the other.
  const auto join_after = [](std::chrono::microseconds spin) {
    const std::chrono::microseconds old = detail::join_spin();
    detail::set_join_spin(spin);
    std::atomic<bool> joining{false};
    std::atomic<bool> ended{false};
    detail::PooledJob job = detail::run_pooled([&] {
      while (!joining.load()) {
        std::this_thread::yield();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ended.store(true);
    });
    const std::size_t before = detail::pool_join_sleeps();
    joining.store(true);
    job.join();
    detail::set_join_spin(old);
    EXPECT_TRUE(ended.load());
    return detail::pool_join_sleeps() - before;
  };
  EXPECT_EQ(join_after(std::chrono::seconds(2)), 0U);
  EXPECT_EQ(join_after(std::chrono::microseconds(0)), 1U);
  // A job that outlasts the spin: join sleeps, and returns only once the job has ended.
  std::mt19937_64 rng(std::random_device{}());
  const auto work = std::chrono::milliseconds(5 + rng() % 20);
  std::atomic<bool> ended{false};
  const std::size_t sleeps = detail::pool_join_sleeps();
  const auto start = std::chrono::steady_clock::now();
  detail::PooledJob slow = detail::run_pooled([&] {
    std::this_thread::sleep_for(work);
    ended.store(true);
  });
  slow.join();
  EXPECT_TRUE(ended.load());
  EXPECT_GE(std::chrono::steady_clock::now() - start, work);
  EXPECT_EQ(detail::pool_join_sleeps(), sleeps + 1);
}

TEST(WorkerPool, AWorkerSpinningForWorkTakesTheNextJobWithoutAWakeUp) {
  // The worker signals its job done under the pool's lock and counts itself spinning before it
  // lets go of it, so a job submitted right after the join always finds it spinning: with a 1 s
  // spin it takes the job in its spin, on the same thread; with none, it parks and is woken.
  const auto next_job_after_a_join = [](std::chrono::microseconds spin) {
    const detail::ScopedIdleSpin scope(spin);
    std::atomic<int> ran{0};
    detail::run_pooled([&] { ++ran; }).join();
    const std::size_t threads = detail::pool_threads();
    const std::size_t handoffs = detail::pool_spin_handoffs();
    detail::run_pooled([&] { ++ran; }).join();
    EXPECT_EQ(ran.load(), 2);
    EXPECT_EQ(detail::pool_threads(), threads);  // no thread started for the second job
    return detail::pool_spin_handoffs() - handoffs;
  };
  EXPECT_EQ(next_job_after_a_join(std::chrono::seconds(1)), 1U);
  EXPECT_EQ(next_job_after_a_join(std::chrono::microseconds(0)), 0U);
  // A spin that ends without work parks the thread, which still serves after a wake-up.
  {
    const detail::ScopedIdleSpin scope(std::chrono::milliseconds(5));
    ASSERT_TRUE(covers_once(1000, 2));
    EXPECT_TRUE(holds_within(std::chrono::seconds(10), [] {
      return detail::pool_parked_threads() == detail::pool_threads();
    }));
    const std::size_t handoffs = detail::pool_spin_handoffs();
    std::atomic<int> ran{0};
    detail::run_pooled([&] { ++ran; }).join();
    EXPECT_EQ(ran.load(), 1);
    EXPECT_EQ(detail::pool_spin_handoffs(), handoffs);
  }
}

TEST(WorkerPool, JobsSubmittedAsASpinEndsAreNeverLost) {
  // A submitter skips the wake-up when a spinning worker will take its job; a spin that ends at
  // that moment must still see the job under the lock. Random spins and gaps around the spin's
  // end, from two callers at once: every job runs and every join returns. A lost job would wait
  // until a parked thread's idle time ends, set to an hour here, so a watchdog ends the test.
  const auto idle = detail::pool_idle_exit();
  detail::set_pool_idle_exit(std::chrono::hours(1));
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!finished.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!finished.load()) {
      std::fprintf(stderr, "a pooled job was never run: its join waited 120 s\n");
      std::abort();
    }
  });
  std::mt19937_64 seed_rng(std::random_device{}());
  const detail::ScopedIdleSpin scope(std::chrono::microseconds(1 + seed_rng() % 50));
  std::atomic<int> ran{0};
  std::vector<std::thread> callers;
  constexpr int kJobs = 1000;
  for (int c = 0; c < 2; ++c) {
    callers.emplace_back([&, seed = seed_rng()] {
      std::mt19937_64 rng(seed);
      for (int j = 0; j < kJobs; ++j) {
        detail::run_pooled([&] { ++ran; }).join();
        const auto gap = std::chrono::microseconds(rng() % 100);
        const auto resume = std::chrono::steady_clock::now() + gap;
        while (std::chrono::steady_clock::now() < resume) {
        }
      }
    });
  }
  for (std::thread& t : callers) {
    t.join();
  }
  finished.store(true);
  watchdog.join();
  detail::set_pool_idle_exit(idle);
  EXPECT_EQ(ran.load(), 2 * kJobs);
}

/// Sets an environment variable for one scope (unset: nullptr), and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    set(value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }

 private:
  void set(const char* value) {
    if (value != nullptr) {
      ::setenv(name_, value, 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(WorkerPool, TheWorkerSpinComesFromTheEnvironmentOrIsRefused) {
  std::mt19937_64 rng(std::random_device{}());
  const auto valid = static_cast<std::int64_t>(rng() % (detail::kMaxWorkerSpinUs + 1));
  {
    const ScopedEnv env(detail::kWorkerSpinVariable, std::to_string(valid).c_str());
    EXPECT_EQ(detail::worker_spin_from_environment(), valid);
  }
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    const ScopedEnv env(detail::kWorkerSpinVariable, unset);
    EXPECT_EQ(detail::worker_spin_from_environment(), detail::kDefaultWorkerSpinUs);
  }
  for (const char* bad : {"-1", "1000001", "fast", "12us", "1e3", "99999999999999999999"}) {
    const ScopedEnv env(detail::kWorkerSpinVariable, bad);
    try {
      (void)detail::worker_spin_from_environment();
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(detail::kWorkerSpinVariable), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // The setter refuses the same range, and a refused value changes nothing.
  const std::chrono::microseconds before = detail::pool_idle_spin();
  EXPECT_THROW(detail::set_pool_idle_spin(std::chrono::microseconds(-1)), InvalidArgument);
  EXPECT_THROW(detail::set_pool_idle_spin(std::chrono::microseconds(detail::kMaxWorkerSpinUs + 1)),
               InvalidArgument);
  EXPECT_EQ(detail::pool_idle_spin(), before);
}

TEST(WorkerPool, ManyCallersShareThePool) {
  const std::size_t before = detail::pool_threads();
  std::mt19937_64 seed_rng(std::random_device{}());
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&, seed = seed_rng()] {
      std::mt19937_64 rng(seed);
      for (int call = 0; call < 100; ++call) {
        if (!covers_once(1 + rng() % 2000, 1 + static_cast<int>(rng() % 4))) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : callers) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  // A thread starts only when fewer threads are idle than jobs wait, so the pool never holds
  // more than the jobs outstanding at once (6 callers x 3 workers), or what it held before.
  EXPECT_LE(detail::pool_threads(), std::max<std::size_t>(before, 18));
}

}  // namespace
}  // namespace prefixhit
