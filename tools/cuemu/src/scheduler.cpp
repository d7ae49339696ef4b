// The fiber scheduler behind kernel launches: every CUDA thread of a resident block is a ucontext
// fiber on the launching OS thread, run in round-robin or random order, with a fatal report of a
// deadlock, a lane that exits while its warp waits for it, and __trap(). The warp collectives
// (warp_collectives.cpp) and block barriers (block_barriers.cpp) park fibers through it; the
// state they share is in scheduler.hpp.
#include "scheduler.hpp"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuemu/cuemu.hpp"
#include "internal.hpp"

#if defined(CUEMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuemu::detail {

thread_local uint3 tl_thread_idx;
thread_local uint3 tl_block_idx;
thread_local dim3 tl_block_dim;
thread_local dim3 tl_grid_dim;

thread_local Scheduler* tl_sched = nullptr;

namespace {

struct StackPool {
  std::vector<std::pair<char*, std::size_t>> free;
  ~StackPool() {
    for (auto& s : free)
      munmap(s.first - 4096, s.second + 4096);
  }
  char* get(std::size_t bytes) {
    for (std::size_t i = 0; i < free.size(); ++i) {
      if (free[i].second == bytes) {
        char* p = free[i].first;
        free[i] = free.back();
        free.pop_back();
        return p;
      }
    }
    void* m = mmap(nullptr, bytes + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
      fatal("cannot map a %zu-byte fiber stack", bytes);
    mprotect(m, 4096, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting
    return static_cast<char*>(m) + 4096;
  }
  void put(char* p, std::size_t bytes) { free.emplace_back(p, bytes); }
};
thread_local StackPool tl_stacks;

void switch_to(ucontext_t* from, ucontext_t* to, const void* to_bottom, std::size_t to_size,
               void** fake_save) {
#if defined(CUEMU_ASAN)
  __sanitizer_start_switch_fiber(fake_save, to_bottom, to_size);
  swapcontext(from, to);
  __sanitizer_finish_switch_fiber(*fake_save, nullptr, nullptr);
#else
  (void)to_bottom;
  (void)to_size;
  (void)fake_save;
  swapcontext(from, to);
#endif
}

}  // namespace

/// Leaves the current fiber for the scheduler (its state says whether it stays runnable).
void yield_current() {
  Scheduler& s = *tl_sched;
  Fiber* f = s.current;
#if defined(CUEMU_ASAN)
  switch_to(&f->ctx, &s.main_ctx, s.main_stack_bottom, s.main_stack_size, &f->fake_stack);
#else
  switch_to(&f->ctx, &s.main_ctx, nullptr, 0, nullptr);
#endif
  // Resumed: the scheduler restored this fiber's built-in variables.
}

void make_runnable(Fiber* f) {
  f->state = State::kRunnable;
  tl_sched->runnable.push_back(f);
}

std::string describe(const Fiber& f) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u) [warp %d lane %d]",
                f.block->bid.x, f.block->bid.y, f.block->bid.z, f.tid.x, f.tid.y, f.tid.z, f.warp,
                f.lane);
  return buf;
}

namespace {

void fiber_exit(Fiber* f) {
  Block& b = *f->block;
  f->state = State::kDone;
  ++b.done;
  Warp& w = b.warps[static_cast<std::size_t>(f->warp)];
  w.exited |= 1U << f->lane;
  for (const Pending& p : w.pending) {
    if ((p.mask >> f->lane) & 1U) {
      fatal("in %s: %s exited while lanes 0x%08x of its warp wait for it in %s(mask 0x%08x)",
            tl_sched->kernel_name, describe(*f).c_str(), p.arrived, p.name, p.mask);
    }
  }
  check_barrier(b);
}

void fiber_entry() {
  Scheduler& s = *tl_sched;
  Fiber* f = s.current;
#if defined(CUEMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &s.main_stack_bottom, &s.main_stack_size);
#endif
  s.body(s.closure);
  fiber_exit(f);
#if defined(CUEMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, s.main_stack_bottom, s.main_stack_size);  // never returns
  setcontext(&s.main_ctx);
#else
  setcontext(&s.main_ctx);
#endif
}

Fiber* pick_next(Scheduler& s) {
  if (s.head >= s.runnable.size()) {
    s.runnable.clear();
    s.head = 0;
    return nullptr;
  }
  if (config().random) {
    std::uniform_int_distribution<std::size_t> d(s.head, s.runnable.size() - 1);
    std::swap(s.runnable[s.head], s.runnable[d(s.rng)]);
  }
  Fiber* f = s.runnable[s.head++];
  if (s.head > 4096 && s.head * 2 > s.runnable.size()) {
    s.runnable.erase(s.runnable.begin(), s.runnable.begin() + static_cast<std::ptrdiff_t>(s.head));
    s.head = 0;
  }
  return f;
}

void report_deadlock(const std::vector<Block*>& blocks) {
  std::string msg;
  int shown = 0;
  for (Block* b : blocks) {
    for (Fiber& f : b->fibers) {
      if (f.state == State::kDone || shown >= 12)
        continue;
      msg += "\n    " + describe(f) + " waits in " + f.waiting;
      ++shown;
    }
  }
  fatal("deadlock in %s: no CUDA thread can proceed; first waiters:%s", tl_sched->kernel_name,
        msg.c_str());
}

void init_block(Block& b, uint3 bid, dim3 bdim, std::size_t stack_bytes) {
  b.bid = bid;
  b.nthreads = static_cast<int>(bdim.x * bdim.y * bdim.z);
  b.fibers.assign(static_cast<std::size_t>(b.nthreads), Fiber{});
  b.warps.assign(static_cast<std::size_t>((b.nthreads + 31) / 32), Warp{});
  b.done = 0;
  b.barrier_arrived = 0;
  b.barrier_count = 0;
  for (int t = 0; t < b.nthreads; ++t) {
    Fiber& f = b.fibers[static_cast<std::size_t>(t)];
    f.tid = uint3{static_cast<unsigned>(t) % bdim.x, (static_cast<unsigned>(t) / bdim.x) % bdim.y,
                  static_cast<unsigned>(t) / (bdim.x * bdim.y)};
    f.linear = t;
    f.lane = t % 32;
    f.warp = t / 32;
    f.block = &b;
    f.state = State::kRunnable;
    b.warps[static_cast<std::size_t>(f.warp)].existing |= 1U << f.lane;
    f.stack_bytes = stack_bytes;
    f.stack = tl_stacks.get(stack_bytes);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = stack_bytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
  }
}

}  // namespace

// ---- entry points used by cuemu.hpp -----------------------------------------------------------

cudaError_t run_grid(const LaunchConfig& cfg, KernelBody body, void* closure);

[[noreturn]] void device_trap(const char* what) {
  if (tl_sched && tl_sched->current)
    fatal("%s in %s by %s", what, tl_sched->kernel_name, describe(*tl_sched->current).c_str());
  fatal("%s outside a kernel", what);
}

void maybe_preempt(int kind) {
  Scheduler* s = tl_sched;
  if (s == nullptr || s->current == nullptr)
    return;
  const double p = config().preempt;
  if (kind == 2 || (p > 0 && s->coin(s->rng) < p)) {
    make_runnable(s->current);
    yield_current();
  }
}

unsigned active_mask() {
  Scheduler* s = tl_sched;
  if (s == nullptr || s->current == nullptr)
    fatal("__activemask() outside a kernel");
  const Warp& w = s->current->block->warps[static_cast<std::size_t>(s->current->warp)];
  // No SIMT convergence model: every lane that has not exited counts as active.
  return w.existing & ~w.exited;
}

cudaError_t run_grid(const LaunchConfig& cfg, KernelBody body, void* closure) {
  const dim3 g = cfg.grid;
  const dim3 bd = cfg.block;
  const unsigned long long threads = 1ULL * bd.x * bd.y * bd.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0 || threads > 1024 || bd.z > 64 ||
      g.y > 65535 || g.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return cudaErrorInvalidConfiguration;
  }
  if (tl_sched != nullptr)
    fatal("kernel launched from device code (dynamic parallelism is not emulated)");
  const Config& c = config();
  if (c.no_device) {
    set_error(cudaErrorNoDevice);
    return cudaErrorNoDevice;
  }
  Scheduler s;
  s.body = body;
  s.closure = closure;
  s.kernel_name = cfg.name ? cfg.name : "kernel";
  s.rng.seed(c.seed ^ 0x9E3779B97F4A7C15ULL);
  tl_sched = &s;
  const dim3 saved_bdim = tl_block_dim;
  const dim3 saved_gdim = tl_grid_dim;
  tl_block_dim = bd;
  tl_grid_dim = g;
  const unsigned long long nblocks = 1ULL * g.x * g.y * g.z;
  if (c.verbose) {
    std::fprintf(stderr, "cuemu: launch %s grid (%u,%u,%u) block (%u,%u,%u)\n", s.kernel_name, g.x,
                 g.y, g.z, bd.x, bd.y, bd.z);
  }
  std::vector<Block> slots(
      static_cast<std::size_t>(std::min<unsigned long long>(nblocks, c.resident_blocks)));
  std::vector<Block*> live;
  unsigned long long next_block = 0;
  auto admit = [&](Block& b) {
    const unsigned long long i = next_block++;
    const uint3 bid{static_cast<unsigned>(i % g.x), static_cast<unsigned>((i / g.x) % g.y),
                    static_cast<unsigned>(i / (1ULL * g.x * g.y))};
    init_block(b, bid, bd, c.stack_bytes);
    for (Fiber& f : b.fibers)
      s.runnable.push_back(&f);
    live.push_back(&b);
  };
  for (Block& b : slots)
    admit(b);
  while (!live.empty()) {
    Fiber* f = pick_next(s);
    if (f == nullptr)
      report_deadlock(live);
    if (f->state != State::kRunnable)
      continue;
    s.current = f;
    tl_thread_idx = f->tid;
    tl_block_idx = f->block->bid;
#if defined(CUEMU_ASAN)
    void* fake = nullptr;
    switch_to(&s.main_ctx, &f->ctx, f->stack, f->stack_bytes, &fake);
#else
    switch_to(&s.main_ctx, &f->ctx, nullptr, 0, nullptr);
#endif
    s.current = nullptr;
    Block* b = f->block;
    if (b->done == b->nthreads) {
      for (Fiber& fb : b->fibers)
        tl_stacks.put(fb.stack, fb.stack_bytes);
      live.erase(std::find(live.begin(), live.end(), b));
      // Drop finished fibers from the queue before reusing the slot.
      std::vector<Fiber*> keep;
      for (std::size_t i = s.head; i < s.runnable.size(); ++i)
        if (s.runnable[i]->block != b)
          keep.push_back(s.runnable[i]);
      s.runnable.swap(keep);
      s.head = 0;
      if (next_block < nblocks)
        admit(*b);
    }
  }
  tl_sched = nullptr;
  tl_block_dim = saved_bdim;
  tl_grid_dim = saved_gdim;
  return cudaSuccess;
}

}  // namespace cuemu::detail
