// The in-run memory limit of `prefixhit bench` (issue 14): random 64-byte reads over a buffer of
// the index's size, one after another (each address read from the previous line: DRAM latency)
// and independent of each other (what one core's misses in flight allow), and the lines a hit
// of the index's layout moves, read independently for the keys a pass of lookups probed.
// Independent reads are issued three ways (plain loads; loads prefetched ahead into L1; loads
// prefetched ahead into L2) and the limit is the fastest: on this machine class prefetching
// into L1 keeps 1.2-1.4x more misses in flight than plain loads, and into L2 (whose miss slots
// outnumber L1's) 1.6-1.9x more, so plain loads alone would state a limit the core can beat.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "host/cli/bench.hpp"
#include "prefixhit/errors.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace prefixhit::cli {

namespace {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

struct Line {
  std::uint64_t next;  // index of the next line of the dependent chain
  std::uint64_t pad[7];
};
static_assert(sizeof(Line) == 64, "one cache line");

/// A 64-bit value scaled onto [0, lines): the high word of value * lines.
std::uint64_t line_index(std::uint64_t value, std::uint64_t lines) {
  __extension__ typedef unsigned __int128 u128;
  return static_cast<std::uint64_t>((static_cast<u128>(value) * lines) >> 64);
}

/// How independent reads are issued: plain loads (as many in flight as the out-of-order window
/// keeps), or each line prefetched kReadAhead reads before its load, into L1 or into L2 (the
/// miss slots fill without waiting on the window).
constexpr std::uint64_t kReadAhead = 32;

template <Issue issue>
void prefetch_line(const void* p) {
  static_assert(issue != Issue::loads, "plain loads prefetch nothing");
  __builtin_prefetch(p, 0, issue == Issue::prefetched_l1 ? 3 : 1);  // 1: prefetcht2, into L2
}

std::uint64_t next_state(std::uint64_t state) {
  return state * 6364136223846793005ULL + 1442695040888963407ULL;
}

/// `reads` random reads over `lines` lines whose addresses come from a generator that never
/// waits on memory. Returns the thread CPU ns per read; adds what it read to `sum`.
template <Issue issue>
double independent_reads(const Line* line, std::uint64_t lines, std::uint64_t seed,
                         std::uint64_t reads, std::uint64_t& sum) {
  std::uint64_t state = seed | 1U;
  std::uint64_t local = 0;
  const double start = thread_cpu_seconds();
  if constexpr (issue == Issue::loads) {
    for (std::uint64_t i = 0; i < reads; i += 4) {
      std::uint64_t idx[4];
      for (std::uint64_t& x : idx) {
        state = next_state(state);
        x = line_index(state, lines);
      }
      local +=
          line[idx[0]].pad[0] + line[idx[1]].pad[0] + line[idx[2]].pad[0] + line[idx[3]].pad[0];
    }
  } else {
    // A second generator, started with the same state, runs kReadAhead reads ahead.
    std::uint64_t ahead = state;
    for (std::uint64_t i = 0; i < kReadAhead; ++i) {
      ahead = next_state(ahead);
      prefetch_line<issue>(line + line_index(ahead, lines));
    }
    for (std::uint64_t i = 0; i < reads; ++i) {
      ahead = next_state(ahead);
      prefetch_line<issue>(line + line_index(ahead, lines));
      state = next_state(state);
      local += line[line_index(state, lines)].pad[0];
    }
  }
  const double ns = (thread_cpu_seconds() - start) * 1e9 / static_cast<double>(reads);
  sum += local;
  return ns;
}

/// Calls way(std::integral_constant<Issue, issue>{}) for a runtime `issue`, so that each way's
/// loop is compiled on its own (a prefetch's locality must be a constant).
template <class Way>
double with_issue(Issue issue, const Way& way) {
  switch (issue) {
    case Issue::loads:
      return way(std::integral_constant<Issue, Issue::loads>{});
    case Issue::prefetched_l1:
      return way(std::integral_constant<Issue, Issue::prefetched_l1>{});
    case Issue::prefetched_l2:
      break;
  }
  return way(std::integral_constant<Issue, Issue::prefetched_l2>{});
}

double independent_reads(Issue issue, const Line* line, std::uint64_t lines, std::uint64_t seed,
                         std::uint64_t reads, std::uint64_t& sum) {
  return with_issue(issue, [&](auto way) {
    return independent_reads<decltype(way)::value>(line, lines, seed, reads, sum);
  });
}

/// Independent reads of a hit's lines for probed keys: its caller digest (at its own address, so
/// its page walks count too; both lines when it straddles two) and two lines of the buffer
/// (header, digest) that its digest picks, as the index's hash does: a key reads the same lines
/// on every pass, so they stay in cache exactly as often as the lookup's. Reads `total` keys in
/// lookup order from probed[first], wrapping round; returns the thread CPU ns per key and adds
/// what it read to `sum`. Prefetched: a key's digest is prefetched 2 x kReadAhead keys before
/// its read and its buffer lines kReadAhead keys before (their addresses need the digest).
template <Issue issue>
double hit_line_reads(const Line* line, std::uint64_t lines,
                      const std::vector<const BlockDigest*>& probed, std::size_t first,
                      std::size_t total, std::uint64_t& sum) {
  const std::size_t n = probed.size();
  const auto key_at = [&](std::size_t i) { return probed[(first + i) % n]; };
  const auto lines_of = [&](const BlockDigest* key, std::uint64_t* at) {
    std::uint64_t w[2];
    std::memcpy(w, key->bytes.data(), sizeof(w));
    at[0] = line_index(w[0], lines);
    at[1] = line_index(w[1], lines);
  };
  std::uint64_t local = 0;
  // The keys in lookup order, as the bench cycles through its requests.
  const double start = thread_cpu_seconds();
  if constexpr (issue == Issue::loads) {
    for (std::size_t i = 0; i < total; ++i) {
      const BlockDigest* key = key_at(i);
      std::uint64_t at[2];
      lines_of(key, at);
      local += key->bytes[31] + line[at[0]].pad[0] + line[at[1]].pad[0];
    }
  } else {
    const auto prefetch_digest = [](const BlockDigest* key) {
      prefetch_line<issue>(key->bytes.data());
      prefetch_line<issue>(key->bytes.data() + BlockDigest::kSize - 1);
    };
    const auto prefetch_lines = [&](const std::uint64_t* at) {
      prefetch_line<issue>(line + at[0]);
      prefetch_line<issue>(line + at[1]);
    };
    std::uint64_t ring[kReadAhead][2];  // the buffer lines of the keys kReadAhead ahead
    for (std::size_t i = 0; i < std::min<std::size_t>(2 * kReadAhead, total); ++i) {
      prefetch_digest(key_at(i));
    }
    for (std::size_t i = 0; i < std::min<std::size_t>(kReadAhead, total); ++i) {
      lines_of(key_at(i), ring[i % kReadAhead]);
      prefetch_lines(ring[i % kReadAhead]);
    }
    for (std::size_t i = 0; i < total; ++i) {
      std::uint64_t* at = ring[i % kReadAhead];
      local += key_at(i)->bytes[31] + line[at[0]].pad[0] + line[at[1]].pad[0];
      if (i + 2 * kReadAhead < total) {
        prefetch_digest(key_at(i + 2 * kReadAhead));
      }
      if (i + kReadAhead < total) {  // the slot just read now holds key i + kReadAhead
        lines_of(key_at(i + kReadAhead), at);
        prefetch_lines(at);
      }
    }
  }
  const double ns = (thread_cpu_seconds() - start) * 1e9 / static_cast<double>(total);
  sum += local;
  return ns;
}

double hit_line_reads(Issue issue, const Line* line, std::uint64_t lines,
                      const std::vector<const BlockDigest*>& probed, std::size_t first,
                      std::size_t total, std::uint64_t& sum) {
  return with_issue(issue, [&](auto way) {
    return hit_line_reads<decltype(way)::value>(line, lines, probed, first, total, sum);
  });
}

/// read(issue) for each way of issuing the reads, in turn.
template <class Read>
ReadWays each_way(const Read& read) {
  ReadWays ways;
  for (const Issue issue : kEveryIssue) {
    ways.ns[static_cast<int>(issue)] = read(issue);
  }
  return ways;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct LimitBuffer::Buffer {
  std::unique_ptr<Line, FreeDeleter> memory;
  std::uint64_t lines = 0;
  std::uint64_t seed = 0;
  std::uint64_t turn = 0;    // varies the independent reads' addresses from turn to turn
  std::size_t next_key = 0;  // where the next turn's reads of a hit's lines start in `probed`
  std::uint64_t sum = 0;
};

LimitBuffer::LimitBuffer(std::uint64_t bytes, std::uint64_t seed)
    : buffer_(std::make_unique<Buffer>()) {
  constexpr std::uint64_t kHuge = std::uint64_t{1} << 21;
  const std::uint64_t lines = std::max<std::uint64_t>(bytes / sizeof(Line), 2);
  const std::uint64_t alloc = ((lines * sizeof(Line)) + kHuge - 1) & ~(kHuge - 1);
  // Allocated like the index's table (huge pages where the kernel allows), so both pay the same
  // translation costs.
  buffer_->memory.reset(static_cast<Line*>(std::aligned_alloc(kHuge, alloc)));
  if (!buffer_->memory) {
    throw CapacityExceeded("bench: cannot allocate " + std::to_string(alloc) +
                           " bytes for the memory-limit buffer");
  }
#if defined(__linux__)
  madvise(buffer_->memory.get(), alloc, MADV_HUGEPAGE);
#endif
  Line* line = buffer_->memory.get();
  // Sattolo's shuffle: one cycle through every line, in random order.
  for (std::uint64_t i = 0; i < lines; ++i) {
    line[i].next = i;
    line[i].pad[0] = i;
  }
  std::mt19937_64 rng(seed);
  for (std::uint64_t i = lines - 1; i > 0; --i) {
    const std::uint64_t j = rng() % i;
    std::swap(line[i].next, line[j].next);
  }
  buffer_->lines = lines;
  buffer_->seed = seed;
}

const char* issue_name(Issue issue) {
  switch (issue) {
    case Issue::loads:
      return "loads";
    case Issue::prefetched_l1:
      return "prefetched_l1";
    case Issue::prefetched_l2:
      break;
  }
  return "prefetched_l2";
}

Issue ReadWays::fastest_issue() const {
  Issue best = Issue::loads;
  for (const Issue issue : kEveryIssue) {
    if (at(issue) < at(best)) {
      best = issue;
    }
  }
  return best;
}

LimitBuffer::~LimitBuffer() = default;

std::uint64_t LimitBuffer::bytes() const {
  return buffer_->lines * sizeof(Line);
}
std::uint64_t LimitBuffer::checksum() const {
  return buffer_->sum;
}

double LimitBuffer::independent_ns(std::uint64_t reads) {
  Buffer& b = *buffer_;
  // A third of the reads each way, in whole groups of four (the loads' unit), at least one.
  reads = std::max<std::uint64_t>(4, (reads / kIssues) & ~std::uint64_t{3});
  const std::uint64_t seed = b.seed + 2 * ++b.turn;
  return each_way([&](Issue issue) {
           return independent_reads(issue, b.memory.get(), b.lines, seed, reads, b.sum);
         })
      .fastest();
}

double LimitBuffer::hit_lines_ns(const std::vector<const BlockDigest*>& probed, std::size_t keys) {
  Buffer& b = *buffer_;
  if (probed.empty() || keys == 0) {
    return 0;
  }
  // A third each way, each way its own keys: a way that read the keys the one before it had
  // just read would find their lines in cache, which the lookups (each key last read a cycle of
  // requests ago) do not.
  const std::size_t per_way = std::max<std::size_t>(1, keys / kIssues);
  return each_way([&](Issue issue) {
           const std::size_t first = b.next_key;
           b.next_key = (b.next_key + per_way) % probed.size();
           return hit_line_reads(issue, b.memory.get(), b.lines, probed, first, per_way, b.sum);
         })
      .fastest();
}

MemoryLimit LimitBuffer::measure(const std::vector<const BlockDigest*>& probed) {
  Buffer& b = *buffer_;
  const Line* line = b.memory.get();
  MemoryLimit limit;
  limit.bytes = bytes();
  // Dependent: each read's address comes from the previous read.
  const std::uint64_t dependent_reads = std::min<std::uint64_t>(b.lines, 2'000'000);
  std::uint64_t at = 0;
  const double start = thread_cpu_seconds();
  for (std::uint64_t i = 0; i < dependent_reads; ++i) {
    at = line[at].next;
  }
  limit.dependent_ns = (thread_cpu_seconds() - start) * 1e9 / static_cast<double>(dependent_reads);
  b.sum += at;
  // Independent, each way: one thread, then two threads at once over the same buffer the
  // fastest way (does the memory system give a second core its own misses in flight, or do the
  // two share them?).
  const std::uint64_t independent_reads_per_thread = 3'000'000;
  limit.independent = each_way([&](Issue issue) {
    return independent_reads(issue, line, b.lines, b.seed, independent_reads_per_thread, b.sum);
  });
  const Issue fastest = limit.independent.fastest_issue();
  if (!probed.empty()) {
    const std::size_t passes = std::max<std::size_t>(1, 700'000 / probed.size());
    limit.hit_lines = each_way([&](Issue issue) {
      return hit_line_reads(issue, line, b.lines, probed, 0, passes * probed.size(), b.sum);
    });
  }
  std::atomic<int> ready{0};
  std::uint64_t sums[2] = {0, 0};
  double ns[2] = {0, 0};
  double wall[2] = {0, 0};
  const auto run = [&](int t) {
    ready.fetch_add(1);
    while (ready.load() < 2) {
      std::this_thread::yield();  // start together
    }
    const double begin = wall_seconds();
    ns[t] =
        independent_reads(fastest, line, b.lines, b.seed + 2 * static_cast<std::uint64_t>(t) + 1,
                          independent_reads_per_thread, sums[t]);
    wall[t] = wall_seconds() - begin;
  };
  try {
    std::thread second(run, 1);
    run(0);
    second.join();
    limit.independent_2t_ns = (ns[0] + ns[1]) / 2;
    // The share of the wall time both threads had a core: below 1 when the machine (other
    // processes) left them waiting.
    const double span = std::max(wall[0], wall[1]);
    limit.two_thread_overlap = span > 0 ? (ns[0] + ns[1]) *
                                              static_cast<double>(independent_reads_per_thread) *
                                              1e-9 / (2 * span)
                                        : 0;
    b.sum += sums[0] + sums[1];
  } catch (const std::system_error&) {
    limit.independent_2t_ns = 0;  // no second thread: the line says so
  }
  limit.checksum = b.sum;
  return limit;
}

}  // namespace prefixhit::cli
