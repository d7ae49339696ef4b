// The block barriers (__syncthreads, __syncthreads_count/and/or): a thread parks (scheduler.hpp)
// until every thread of its block that has not exited waits in the same barrier; reaching a
// different one while others wait is a fatal report.
#include "cuemu/cuemu.hpp"
#include "internal.hpp"
#include "scheduler.hpp"

namespace cuemu::detail {

void check_barrier(Block& b) {
  if (b.barrier_arrived > 0 && b.barrier_arrived + b.done == b.nthreads) {
    const int count = b.barrier_count;
    b.barrier_arrived = 0;
    b.barrier_count = 0;
    b.barrier_name = nullptr;
    for (Fiber& f : b.fibers) {
      if (f.state == State::kWaitBlock) {
        f.result = static_cast<unsigned long long>(count);
        make_runnable(&f);
      }
    }
  }
}

void block_barrier_impl(const char* name, int predicate, int* count_out) {
  Scheduler* s = tl_sched;
  if (s == nullptr || s->current == nullptr)
    fatal("%s called outside a kernel", name);
  Fiber* f = s->current;
  Block& b = *f->block;
  if (b.barrier_name != nullptr && b.barrier_name != name) {
    fatal("in %s: %s reaches %s while others wait in %s", s->kernel_name, describe(*f).c_str(),
          name, b.barrier_name);
  }
  b.barrier_name = name;
  ++b.barrier_arrived;
  b.barrier_count += predicate;
  f->state = State::kWaitBlock;
  f->waiting = name;
  check_barrier(b);  // may release everyone, this fiber included
  yield_current();
  if (count_out)
    *count_out = static_cast<int>(f->result);
}

void block_barrier(const char* name) {
  block_barrier_impl(name, 0, nullptr);
}
int block_barrier_count(int predicate) {
  int c = 0;
  block_barrier_impl("__syncthreads_count", predicate, &c);
  return c;
}

}  // namespace cuemu::detail
