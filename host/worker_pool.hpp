// A process-wide set of worker threads that the fork-join helpers (host/parallel.hpp) reuse from
// call to call. A serving runtime calls a batch lookup every scheduler step; starting a thread for
// each call cost 18-70 us here. Waking a parked one cost about 5 us on one machine and 25-45 us
// on a KVM guest whose idle vCPUs halt (guest_halt_poll_ns 0), 10-28 us of it in the caller's
// wake-up call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <utility>

namespace prefixhit::detail {

/// A job handed to the pool. join() waits until it has run, as std::thread::join does, and
/// rethrows what it threw (parallel.hpp's parts catch their own, so none do). It spins for up to
/// join_spin() (100 us) before it sleeps: a fork-join caller joins when its own share is done and
/// the worker's is a few lookups from its end.
class PooledJob {
 public:
  struct State;
  explicit PooledJob(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void join();

 private:
  std::shared_ptr<State> state_;
};

/// Runs `work` on a parked pool thread, or on a new one when none is parked. Throws what
/// std::thread throws when no thread can be started (std::system_error, std::bad_alloc); `work`
/// then never runs. A thread parked for the idle time (pool_idle_exit) ends, so a process that
/// once ran a wide batch does not keep its threads. After fork() the child starts with an empty
/// pool: the parent's threads do not exist there.
PooledJob run_pooled(std::function<void()> work);

/// The threads the pool holds now, running or parked.
std::size_t pool_threads();

/// The threads parked now, waiting for work. A worker parks only after it has released its last
/// job, so when every thread is parked none is inside the allocator: a test that forks waits
/// for this (a sanitizer's allocator, unlike glibc's, is not made consistent across fork()).
std::size_t pool_parked_threads();

/// Joins so far, process-wide, that found their job still running after join's spin and slept
/// until it ended (diagnostics and tests: a join of a job that had ended never counts).
std::size_t pool_join_sleeps();

/// How long join() spins before it sleeps (100 us by default; tests change it).
std::chrono::microseconds join_spin();
void set_join_spin(std::chrono::microseconds spin);

/// Jobs so far, process-wide, that a worker took while it spun after its last job, so that
/// neither the caller nor the worker paid a wake-up (diagnostics and tests).
std::size_t pool_spin_handoffs();

/// How long a worker spins for its next job before it parks (0 parks at once). Back-to-back
/// batches then hand their workers work without a wake-up; a batch per scheduler step,
/// milliseconds apart, finds them parked and costs the spin's CPU time once per step. The
/// process's value comes from PREFIXHIT_WORKER_SPIN_US (microseconds, 0 to 1 s), read at the
/// first call, else 100 us: a deployment that packs processes onto shared cores turns it off.
/// A bad value throws InvalidArgument naming the variable, from here and so from the first
/// batch that would start a worker. set_pool_idle_spin (tests, `bench --worker-spin-us`) throws
/// InvalidArgument outside 0 to 1 s.
inline constexpr const char* kWorkerSpinVariable = "PREFIXHIT_WORKER_SPIN_US";
inline constexpr std::int64_t kDefaultWorkerSpinUs = 100;
inline constexpr std::int64_t kMaxWorkerSpinUs = 1000000;
std::chrono::microseconds pool_idle_spin();
void set_pool_idle_spin(std::chrono::microseconds spin);
/// The environment's value (kDefaultWorkerSpinUs when unset or empty); throws InvalidArgument.
std::int64_t worker_spin_from_environment();

/// Puts back a value pool_idle_spin returned, unchecked (it was in range then), so that a
/// destructor can call it.
void restore_pool_idle_spin(std::chrono::microseconds spin) noexcept;

/// Sets the idle spin for one scope and puts the old value back (tests, `bench`).
class ScopedIdleSpin {
 public:
  explicit ScopedIdleSpin(std::chrono::microseconds spin) : old_(pool_idle_spin()) {
    set_pool_idle_spin(spin);
  }
  ScopedIdleSpin(const ScopedIdleSpin&) = delete;
  ScopedIdleSpin& operator=(const ScopedIdleSpin&) = delete;
  ~ScopedIdleSpin() { restore_pool_idle_spin(old_); }

 private:
  std::chrono::microseconds old_;
};

/// How long a parked thread waits for work before it ends (10 s by default; tests shorten it).
std::chrono::milliseconds pool_idle_exit();
void set_pool_idle_exit(std::chrono::milliseconds idle);

/// parallel.hpp's default starter: the work runs on a pool thread.
struct StartPooled {
  template <class Work>
  PooledJob operator()(Work&& work) const {
    return run_pooled(std::function<void()>(std::forward<Work>(work)));
  }
};

}  // namespace prefixhit::detail
