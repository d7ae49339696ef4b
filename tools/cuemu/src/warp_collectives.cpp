// The warp collectives (__shfl*_sync, __ballot/__any/__all_sync, __match_any_sync,
// __reduce_*_sync, __syncwarp): a lane parks (scheduler.hpp) until every lane of the mask has
// arrived, then the last one computes every lane's result. What the GPU leaves undefined is a
// fatal report: a mask that omits the caller or names missing or exited lanes, a bad width,
// divergent or overlapping collectives, a shuffle from a lane outside the mask.
#include <algorithm>

#include "cuemu/cuemu.hpp"
#include "internal.hpp"
#include "scheduler.hpp"

namespace cuemu::detail {

unsigned long long warp_collective(Op op, unsigned mask, unsigned long long value, int aux,
                                   int width, const char* name) {
  Scheduler* s = tl_sched;
  if (s == nullptr || s->current == nullptr)
    fatal("%s called outside a kernel", name);
  Fiber* f = s->current;
  Block& b = *f->block;
  Warp& w = b.warps[static_cast<std::size_t>(f->warp)];
  const unsigned bit = 1U << f->lane;
  if ((mask & bit) == 0) {
    fatal("in %s: %s calls %s with mask 0x%08x, which does not name the calling lane",
          s->kernel_name, describe(*f).c_str(), name, mask);
  }
  if ((mask & ~w.existing) != 0) {
    fatal(
        "in %s: %s calls %s with mask 0x%08x naming lanes that do not exist (block has %d threads)",
        s->kernel_name, describe(*f).c_str(), name, mask, b.nthreads);
  }
  if ((mask & w.exited) != 0) {
    fatal("in %s: %s calls %s with mask 0x%08x naming lanes 0x%08x that already exited",
          s->kernel_name, describe(*f).c_str(), name, mask, mask & w.exited);
  }
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    fatal("in %s: %s calls %s with width %d", s->kernel_name, describe(*f).c_str(), name, width);
  }
  Pending* p = nullptr;
  for (Pending& q : w.pending) {
    if (q.mask & bit) {
      p = &q;
      break;
    }
    if (q.mask & mask) {
      fatal(
          "in %s: %s calls %s(mask 0x%08x) while lanes 0x%08x wait in %s(mask 0x%08x): masks "
          "overlap",
          s->kernel_name, describe(*f).c_str(), name, mask, q.arrived, q.name, q.mask);
    }
  }
  if (p != nullptr && (p->op != op || p->mask != mask || p->width != width || p->name != name)) {
    fatal(
        "in %s: divergent warp collectives: %s calls %s(mask 0x%08x) while lanes 0x%08x wait in "
        "%s(mask 0x%08x)",
        s->kernel_name, describe(*f).c_str(), name, mask, p->arrived, p->name, p->mask);
  }
  if (p == nullptr) {
    w.pending.push_back(Pending{op, mask, width, name, 0});
    p = &w.pending.back();
  }
  w.value[f->lane] = value;
  w.aux[f->lane] = aux;
  p->arrived |= bit;
  if (p->arrived != mask) {
    f->state = State::kWaitWarp;
    f->waiting = name;
    yield_current();
    return f->result;
  }
  // The last lane arrived: compute every lane's result.
  const Pending done = *p;
  w.pending.erase(w.pending.begin() + (p - w.pending.data()));
  unsigned long long results[32] = {};
  unsigned ballot = 0;
  unsigned long long acc = 0;
  bool first = true;
  for (int l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1U))
      continue;
    const unsigned long long v = w.value[l];
    if (v != 0)
      ballot |= 1U << l;
    const bool is_signed = w.aux[l] != 0;
    switch (op) {
      case Op::kReduceAdd:
        acc += v;
        break;
      case Op::kReduceAnd:
        acc = first ? v : (acc & v);
        break;
      case Op::kReduceOr:
        acc |= v;
        break;
      case Op::kReduceXor:
        acc ^= v;
        break;
      case Op::kReduceMin:
        acc = first
                  ? v
                  : (is_signed ? (static_cast<long long>(v) < static_cast<long long>(acc) ? v : acc)
                               : std::min(acc, v));
        break;
      case Op::kReduceMax:
        acc = first
                  ? v
                  : (is_signed ? (static_cast<long long>(v) > static_cast<long long>(acc) ? v : acc)
                               : std::max(acc, v));
        break;
      default:
        break;
    }
    first = false;
  }
  for (int l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1U))
      continue;
    const int seg = l & ~(width - 1);
    int src = l;
    switch (op) {
      case Op::kBallot:
        results[l] = ballot;
        break;
      case Op::kAny:
        results[l] = ballot != 0;
        break;
      case Op::kAll:
        results[l] = ballot == mask;
        break;
      case Op::kSyncWarp:
        results[l] = 0;
        break;
      case Op::kReduceAdd:
      case Op::kReduceMin:
      case Op::kReduceMax:
      case Op::kReduceAnd:
      case Op::kReduceOr:
      case Op::kReduceXor:
        results[l] = acc & 0xffffffffULL;
        break;
      case Op::kMatchAny: {
        unsigned m = 0;
        for (int k = 0; k < 32; ++k)
          if (((mask >> k) & 1U) && w.value[k] == w.value[l])
            m |= 1U << k;
        results[l] = m;
        break;
      }
      case Op::kShflIdx:
        src = seg + (w.aux[l] & (width - 1));
        break;
      case Op::kShflUp:
        src = (l - w.aux[l] >= seg) ? l - w.aux[l] : l;
        break;
      case Op::kShflDown:
        src = (l + w.aux[l] < seg + width) ? l + w.aux[l] : l;
        break;
      case Op::kShflXor:
        src = ((l ^ w.aux[l]) < seg + width) ? (l ^ w.aux[l]) : l;
        break;
    }
    if (op == Op::kShflIdx || op == Op::kShflUp || op == Op::kShflDown || op == Op::kShflXor) {
      if (!((mask >> src) & 1U)) {
        fatal(
            "in %s: lane %d of warp %d in block (%u,%u,%u) reads lane %d in %s(mask 0x%08x), which "
            "is "
            "not in the mask (undefined value on the GPU)",
            s->kernel_name, l, f->warp, b.bid.x, b.bid.y, b.bid.z, src, name, mask);
      }
      results[l] = w.value[src];
    }
  }
  const int base = f->warp * 32;
  for (int l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1U) || l == f->lane)
      continue;
    Fiber& other = b.fibers[static_cast<std::size_t>(base) + static_cast<std::size_t>(l)];
    other.result = results[l];
    make_runnable(&other);
  }
  (void)done;
  return results[f->lane];
}

}  // namespace cuemu::detail
