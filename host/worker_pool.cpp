#include "host/worker_pool.hpp"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace prefixhit::detail {

struct PooledJob::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr failure;
};

void PooledJob::join() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
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
  std::size_t starting = 0;  // started, not yet at the queue: each will take a job
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
  for (;;) {
    while (pool->jobs.empty()) {
      bool leave = pool->closing;
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
    job.state->done = true;
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
  Pool& pool = the_pool();
  auto state = std::make_shared<PooledJob::State>();
  std::unique_lock<std::mutex> lock(pool.mutex);
  pool.jobs.push_back(Job{std::move(work), state});
  // Start a thread unless a parked or starting one is there for every queued job (a parked
  // thread counts until it wakes and takes one).
  if (pool.parked + pool.starting >= pool.jobs.size()) {
    lock.unlock();
    pool.wake.notify_one();
  } else {
    try {
      std::thread(worker_loop, &pool).detach();
      ++pool.threads;
      ++pool.starting;
    } catch (...) {
      pool.jobs.pop_back();  // still ours: workers take jobs only under the lock we hold
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

std::chrono::milliseconds pool_idle_exit() {
  return std::chrono::milliseconds(g_idle_exit_ms.load(std::memory_order_relaxed));
}

void set_pool_idle_exit(std::chrono::milliseconds idle) {
  g_idle_exit_ms.store(idle.count(), std::memory_order_relaxed);
  Pool& pool = the_pool();
  pool.wake.notify_all();  // parked threads wait again, with the new time
}

}  // namespace prefixhit::detail
