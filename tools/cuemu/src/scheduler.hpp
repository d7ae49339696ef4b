// The scheduler's state, shared by the files that run CUDA threads as fibers: scheduler.cpp
// (fibers, the scheduler, kernel launches), warp_collectives.cpp and block_barriers.cpp.
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "cuemu/cuemu.hpp"

// Under ASan, fiber switches are announced to it (scheduler.cpp), and Fiber and Scheduler carry
// the stacks it needs: every file that sees them must agree on their layout.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#endif

namespace cuemu::detail {

// ---- fibers -------------------------------------------------------------------------------------
struct Block;

enum class State { kRunnable, kWaitWarp, kWaitBlock, kDone };

struct Fiber {
  ucontext_t ctx{};
  char* stack = nullptr;  // usable part, above the guard page
  std::size_t stack_bytes = 0;
  uint3 tid{};
  int linear = 0;
  int lane = 0;
  int warp = 0;
  Block* block = nullptr;
  State state = State::kRunnable;
  unsigned long long result = 0;
  const char* waiting = "";
#if defined(CUEMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

struct Pending {  // a warp collective some lanes have reached
  Op op;
  unsigned mask;
  int width;
  const char* name;
  unsigned arrived;
};

struct Warp {
  unsigned existing = 0;  // lanes that exist (a partial last warp has fewer)
  unsigned exited = 0;
  std::vector<Pending> pending;
  unsigned long long value[32] = {};
  int aux[32] = {};
};

struct Block {
  uint3 bid{};
  int nthreads = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int done = 0;
  int barrier_arrived = 0;
  int barrier_count = 0;
  const char* barrier_name = nullptr;
};

struct Scheduler {
  ucontext_t main_ctx{};
  std::vector<Fiber*> runnable;  // FIFO in rr mode
  std::size_t head = 0;
  Fiber* current = nullptr;
  KernelBody body = nullptr;
  void* closure = nullptr;
  std::mt19937_64 rng;
  std::uniform_real_distribution<double> coin{0.0, 1.0};
  const char* kernel_name = "kernel";
#if defined(CUEMU_ASAN)
  const void* main_stack_bottom = nullptr;
  std::size_t main_stack_size = 0;
#endif
};

/// The running launch on this OS thread (null outside run_grid).
extern thread_local Scheduler* tl_sched;

/// Leaves the current fiber for the scheduler (its state says whether it stays runnable).
void yield_current();
void make_runnable(Fiber* f);
/// "block (x,y,z) thread (x,y,z) [warp W lane L]", for the diagnostics.
std::string describe(const Fiber& f);
/// Releases a block's barrier once every thread that has not exited waits in it
/// (block_barriers.cpp).
void check_barrier(Block& b);

}  // namespace cuemu::detail
