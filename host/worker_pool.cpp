#include "host/worker_pool.hpp"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "prefixhit/errors.hpp"

namespace prefixhit::detail {

struct PooledJob::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  // Set under `mutex` (the condition variable's predicate); atomic so that join's spin can read
  // it without the lock.
  std::atomic<bool> done{false};
  std::exception_ptr failure;
};

namespace {

/// One iteration of a spin-wait: tells the core it is spinning (no speculative memory-order
/// flush when the flag changes, and the other hyperthread gets the pipeline).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins until done() holds or `spin` has passed, checking the clock only every 64 pauses;
/// returns whether done() held. Join and an idle worker both wait this way before they sleep.
template <class Done>
bool spin_until(std::chrono::microseconds spin, const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + spin;
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
      spin_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return done();
    }
  }
  return true;
}

/// How long join spins before it sleeps: 100 us by default, about two wake-ups of an idle vCPU
/// here.
std::atomic<std::int64_t> g_join_spin_us{100};

std::atomic<std::size_t> g_join_sleeps{0};

/// How long a worker spins for its next job before it parks: PREFIXHIT_WORKER_SPIN_US, else
/// 100 us. A batch's worker that is still spinning when the next batch comes takes it without a
/// wake-up on either side (12 us in the caller's wake call and 30-45 us before the worker runs,
/// here). kSpinUnread until the environment is read.
constexpr std::int64_t kSpinUnread = -1;
std::atomic<std::int64_t> g_idle_spin_us{kSpinUnread};

std::atomic<std::size_t> g_spin_handoffs{0};

}  // namespace

void PooledJob::join() {
  // The caller joins when its own share of a batch is done, and the worker's last range is then
  // a few lookups from its end. Sleeping on the condition variable would charge the batch a
  // wake-up of the caller's thread after that: 55 us here (a KVM guest whose idle vCPU halts),
  // twice the last range itself. So spin first, for about as long as a wake-up costs.
  spin_until(join_spin(), [&] { return state_->done.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->done.load(std::memory_order_relaxed)) {
    g_join_sleeps.fetch_add(1, std::memory_order_relaxed);
    state_->done_cv.wait(lock, [&] { return state_->done.load(std::memory_order_relaxed); });
  }
  if (state_->failure) {
    std::rethrow_exception(state_->failure);
  }
}

namespace {

struct Job {
  std::function<void()> work;
  std::shared_ptr<PooledJob::State> state;
};

struct Pool {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> jobs;
  std::size_t parked = 0;
  std::size_t spinning = 0;  // between jobs, polling `queued` before they park: each takes a job
  std::size_t starting = 0;  // started, not yet at the queue: each will take a job
  std::atomic<std::size_t> queued{0};  // jobs.size(), for the spinners to poll without the lock
  std::size_t threads = 0;
  bool closing = false;  // the library is being unloaded or the process is exiting
  std::condition_variable last_left;
};

std::atomic<std::int64_t> g_idle_exit_ms{10000};

// Never destroyed: detached workers may still be parked on it while the process exits.
std::atomic<Pool*> g_pool{nullptr};

Pool& the_pool() {
  static const bool registered = [] {
    g_pool.store(new Pool, std::memory_order_release);
    // The child of a fork has none of the parent's threads, and the old pool's mutex may have
    // been held by one of them: the child gets a fresh pool.
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(new Pool, std::memory_order_release); });
    return true;
  }();
  (void)registered;
  return *g_pool.load(std::memory_order_acquire);
}

void worker_loop(Pool* pool) {
  std::unique_lock<std::mutex> lock(pool->mutex);
  --pool->starting;
  bool may_spin = false;  // only after a job: a thread that found none, or just started, parks
  for (;;) {
    while (pool->jobs.empty()) {
      bool leave = pool->closing;
      // Read by run_pooled before it queued any job, so never kSpinUnread here.
      const std::int64_t spin_us = g_idle_spin_us.load(std::memory_order_relaxed);
      if (!leave && may_spin && spin_us > 0) {
        // Counted as spinning until it holds the lock again, so a job queued meanwhile is seen
        // either in the poll or in the check under the lock: no submitter skips a wake-up that
        // is needed.
        may_spin = false;
        ++pool->spinning;
        lock.unlock();
        spin_until(std::chrono::microseconds(spin_us),
                   [&] { return pool->queued.load(std::memory_order_acquire) != 0; });
        lock.lock();
        --pool->spinning;
        if (!pool->jobs.empty()) {
          g_spin_handoffs.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      if (!leave) {
        // Each wake-up waits the whole idle time again, so a changed idle time takes effect.
        ++pool->parked;
        const std::cv_status status = pool->wake.wait_for(
            lock, std::chrono::milliseconds(g_idle_exit_ms.load(std::memory_order_relaxed)));
        --pool->parked;
        leave = status == std::cv_status::timeout && pool->jobs.empty();
      }
      if (leave) {
        if (--pool->threads == 0) {
          pool->last_left.notify_all();
        }
        return;
      }
    }
    Job job = std::move(pool->jobs.front());
    pool->jobs.pop_front();
    pool->queued.store(pool->jobs.size(), std::memory_order_release);
    may_spin = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      job.work();
    } catch (...) {
      failure = std::current_exception();
    }
    // Done is signalled under the pool's lock, which this thread keeps until it parks: a caller
    // that joins and at once submits again finds it parked, so back-to-back calls reuse it
    // rather than start another.
    lock.lock();
    const std::lock_guard<std::mutex> state_lock(job.state->mutex);
    job.state->failure = std::move(failure);
    job.state->done.store(true, std::memory_order_release);
    job.state->done_cv.notify_all();
  }
}

/// Ends the parked threads when the process exits or the library is unloaded (dlclose), so that no
/// thread is left parked in code that is about to be unmapped. Waits at most a second: a thread
/// still running a job (exit() called during a batch) is left alone.
struct CloseAtUnload {
  CloseAtUnload() = default;
  CloseAtUnload(const CloseAtUnload&) = delete;
  CloseAtUnload& operator=(const CloseAtUnload&) = delete;
  ~CloseAtUnload() {
    Pool* pool = g_pool.load(std::memory_order_acquire);
    if (pool == nullptr) {
      return;
    }
    std::unique_lock<std::mutex> lock(pool->mutex);
    pool->closing = true;
    pool->wake.notify_all();
    pool->last_left.wait_for(lock, std::chrono::seconds(1), [&] { return pool->threads == 0; });
  }
};
const CloseAtUnload g_close_at_unload;

}  // namespace

PooledJob run_pooled(std::function<void()> work) {
  (void)pool_idle_spin();  // reads PREFIXHIT_WORKER_SPIN_US once; a bad value throws here
  Pool& pool = the_pool();
  auto state = std::make_shared<PooledJob::State>();
  std::unique_lock<std::mutex> lock(pool.mutex);
  pool.jobs.push_back(Job{std::move(work), state});
  pool.queued.store(pool.jobs.size(), std::memory_order_release);
  // Start a thread unless a spinning, parked or starting one is there for every queued job (a
  // parked thread counts until it wakes and takes one). Wake a parked one only when the spinning
  // ones are too few: a spinner takes its job without the wake-up's system call.
  if (pool.spinning + pool.parked + pool.starting >= pool.jobs.size()) {
    const bool wake = pool.jobs.size() > pool.spinning;
    lock.unlock();
    if (wake) {
      pool.wake.notify_one();
    }
  } else {
    try {
      std::thread(worker_loop, &pool).detach();
      ++pool.threads;
      ++pool.starting;
    } catch (...) {
      pool.jobs.pop_back();  // still ours: workers take jobs only under the lock we hold
      pool.queued.store(pool.jobs.size(), std::memory_order_release);
      throw;
    }
  }
  return PooledJob(std::move(state));
}

std::size_t pool_threads() {
  Pool& pool = the_pool();
  const std::lock_guard<std::mutex> lock(pool.mutex);
  return pool.threads;
}

std::size_t pool_parked_threads() {
  Pool& pool = the_pool();
  const std::lock_guard<std::mutex> lock(pool.mutex);
  return pool.parked;
}

std::size_t pool_join_sleeps() {
  return g_join_sleeps.load(std::memory_order_relaxed);
}

std::chrono::microseconds join_spin() {
  return std::chrono::microseconds(g_join_spin_us.load(std::memory_order_relaxed));
}

void set_join_spin(std::chrono::microseconds spin) {
  g_join_spin_us.store(spin.count(), std::memory_order_relaxed);
}

std::size_t pool_spin_handoffs() {
  return g_spin_handoffs.load(std::memory_order_relaxed);
}

std::chrono::microseconds pool_idle_spin() {
  std::int64_t spin = g_idle_spin_us.load(std::memory_order_relaxed);
  if (spin == kSpinUnread) {
    const std::int64_t read = worker_spin_from_environment();  // throws on a bad value
    // A set_pool_idle_spin meanwhile wins over the environment.
    g_idle_spin_us.compare_exchange_strong(spin, read, std::memory_order_relaxed);
    spin = g_idle_spin_us.load(std::memory_order_relaxed);
  }
  return std::chrono::microseconds(spin);
}

std::int64_t worker_spin_from_environment() {
  const char* text = std::getenv(kWorkerSpinVariable);
  if (text == nullptr || *text == '\0') {
    return kDefaultWorkerSpinUs;
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > kMaxWorkerSpinUs) {
    throw InvalidArgument(std::string(kWorkerSpinVariable) + "=\"" + text +
                          "\": expected a whole number of microseconds from 0 to " +
                          std::to_string(kMaxWorkerSpinUs));
  }
  return value;
}

void set_pool_idle_spin(std::chrono::microseconds spin) {
  if (spin.count() < 0 || spin.count() > kMaxWorkerSpinUs) {
    throw InvalidArgument("worker spin " + std::to_string(spin.count()) + " us: expected 0 to " +
                          std::to_string(kMaxWorkerSpinUs));
  }
  restore_pool_idle_spin(spin);
}

void restore_pool_idle_spin(std::chrono::microseconds spin) noexcept {
  g_idle_spin_us.store(spin.count(), std::memory_order_relaxed);
}

std::chrono::milliseconds pool_idle_exit() {
  return std::chrono::milliseconds(g_idle_exit_ms.load(std::memory_order_relaxed));
}

void set_pool_idle_exit(std::chrono::milliseconds idle) {
  g_idle_exit_ms.store(idle.count(), std::memory_order_relaxed);
  Pool& pool = the_pool();
  pool.wake.notify_all();  // parked threads wait again, with the new time
}

}  // namespace prefixhit::detail
