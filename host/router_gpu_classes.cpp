// Worker classes for GPU router scoring from any worker-set table (router_gpu.hpp): workers that
// agree on every set id a request's block of the table names.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "prefixhit/router_gpu.hpp"

namespace prefixhit::gpu {

namespace {

/// splitmix64's finaliser: the per-set random word of a worker signature.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

WorkerClasses build_worker_classes(const WorkerSetTable& table, span<const std::int64_t> offsets,
                                   std::uint64_t signature_mask) {
  WorkerClasses out;
  out.member_offsets.push_back(0);
  const int nw = table.num_workers;
  if (offsets.size() < 2 || nw <= 0) {
    return out;
  }
  const std::size_t num_requests = offsets.size() - 1;
  const auto g = static_cast<std::size_t>(table.num_groups);
  const std::size_t num_sets = table.num_sets();
  out.members.reserve(num_requests * static_cast<std::size_t>(nw));
  auto holds = [&](std::uint32_t set, int w) {
    return ((table.sets[set * table.words + static_cast<std::size_t>(w) / 64] >> (w % 64)) & 1U) !=
           0;
  };
  std::vector<std::uint32_t> stamp(num_sets, 0);  // request r + 1 once set seen in request r
  std::vector<std::uint32_t> distinct;
  std::vector<std::uint64_t> signature(static_cast<std::size_t>(nw));
  std::vector<std::int32_t> order(static_cast<std::size_t>(nw));
  std::vector<std::int32_t> reps;  // a signature bucket's classes, by representative
  std::vector<std::int32_t> rep_of(static_cast<std::size_t>(nw));  // a worker's representative
  std::vector<std::int64_t> slot(static_cast<std::size_t>(nw));    // a class's size, next slot
  for (std::size_t r = 0; r < num_requests; ++r) {
    // Set 0 (nobody) and kBadDigestSet read alike for every worker: they split no class.
    distinct.clear();
    const std::size_t begin = static_cast<std::size_t>(offsets[r]) * g;
    const std::size_t end = static_cast<std::size_t>(offsets[r + 1]) * g;
    for (std::size_t e = begin; e < end; ++e) {
      const std::uint32_t id = table.set_ids[e];
      if (id != 0 && id < num_sets && stamp[id] != r + 1) {
        stamp[id] = static_cast<std::uint32_t>(r + 1);
        distinct.push_back(id);
      }
    }
    std::fill(signature.begin(), signature.end(), 0);
    for (const std::uint32_t id : distinct) {
      const std::uint64_t word = mix64(id) & signature_mask;
      const std::uint64_t* bits = table.sets.data() + id * table.words;
      for (std::size_t k = 0; k < table.words; ++k) {
        for (std::uint64_t b = bits[k]; b != 0; b &= b - 1) {
          const std::size_t w = k * 64 + static_cast<std::size_t>(__builtin_ctzll(b));
          if (w < signature.size()) {
            signature[w] ^= word;
          }
        }
      }
    }
    for (int w = 0; w < nw; ++w) {
      order[static_cast<std::size_t>(w)] = w;
    }
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      const std::uint64_t sa = signature[static_cast<std::size_t>(a)];
      const std::uint64_t sb = signature[static_cast<std::size_t>(b)];
      return sa != sb ? sa < sb : a < b;
    });
    for (std::size_t i = 0; i < order.size();) {
      std::size_t j = i + 1;
      while (j < order.size() && signature[static_cast<std::size_t>(order[j])] ==
                                     signature[static_cast<std::size_t>(order[i])]) {
        ++j;
      }
      // Confirm: a worker joins a class only if its bit equals the representative's on every
      // distinct set, so a collision costs a split, never a wrong answer. A bucket runs in
      // worker order, so each representative is its class's lowest worker.
      reps.clear();
      for (std::size_t k = i; k < j; ++k) {
        const std::int32_t w = order[k];
        std::size_t c = 0;
        while (c < reps.size() &&
               !std::all_of(distinct.begin(), distinct.end(),
                            [&](std::uint32_t id) { return holds(id, w) == holds(id, reps[c]); })) {
          ++c;
        }
        if (c == reps.size()) {
          reps.push_back(w);
          out.collisions += c > 0 ? 1 : 0;
        }
        rep_of[static_cast<std::size_t>(w)] = reps[c];
      }
      i = j;
    }
    // Emit the classes by representative, members ascending (a counting sort: no allocation
    // per class).
    std::fill(slot.begin(), slot.end(), 0);
    for (const std::int32_t rep : rep_of) {
      ++slot[static_cast<std::size_t>(rep)];
    }
    auto at = static_cast<std::int64_t>(out.members.size());
    for (int w = 0; w < nw; ++w) {
      if (rep_of[static_cast<std::size_t>(w)] == w) {
        const std::int64_t size = slot[static_cast<std::size_t>(w)];
        slot[static_cast<std::size_t>(w)] = at;
        at += size;
        out.requests.push_back(static_cast<std::uint32_t>(r));
        out.member_offsets.push_back(at);
      }
    }
    out.members.resize(static_cast<std::size_t>(at));
    for (int w = 0; w < nw; ++w) {
      const auto rep = static_cast<std::size_t>(rep_of[static_cast<std::size_t>(w)]);
      out.members[static_cast<std::size_t>(slot[rep]++)] = w;
    }
  }
  return out;
}

}  // namespace prefixhit::gpu
