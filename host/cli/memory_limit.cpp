// The in-run memory limit of `prefixhit bench` (issue 14): random 64-byte reads over a buffer of
// the index's size, one after another (each address read from the previous line: DRAM latency)
// and independent of each other (what one core's misses in flight allow), and the lines a hit
// of the index's layout moves, read independently for the keys a pass of lookups probed.
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

/// `reads` random reads over `lines` lines whose addresses come from a generator that never
/// waits on memory (the out-of-order core keeps as many in flight as it can). Returns the
/// thread CPU ns per read; adds what it read to `sum`.
double independent_reads(const Line* line, std::uint64_t lines, std::uint64_t seed,
                         std::uint64_t reads, std::uint64_t& sum) {
  std::uint64_t state = seed | 1U;
  std::uint64_t local = 0;
  const double start = thread_cpu_seconds();
  for (std::uint64_t i = 0; i < reads; i += 4) {
    std::uint64_t idx[4];
    for (std::uint64_t& x : idx) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      x = line_index(state, lines);
    }
    local += line[idx[0]].pad[0] + line[idx[1]].pad[0] + line[idx[2]].pad[0] + line[idx[3]].pad[0];
  }
  const double ns = (thread_cpu_seconds() - start) * 1e9 / static_cast<double>(reads);
  sum += local;
  return ns;
}

/// Independent reads of a hit's lines for every probed key: its caller digest (at its own
/// address, so its page walks count too; both lines when it straddles two) and two lines of the
/// buffer (header, digest) that its digest picks, as the index's hash does: a key reads the same
/// lines on every pass, so they stay in cache exactly as often as the lookup's. `passes` passes
/// over the keys in order; returns the thread CPU ns per key and adds what it read to `sum`.
double hit_line_reads(const Line* line, std::uint64_t lines,
                      const std::vector<const BlockDigest*>& probed, std::size_t passes,
                      std::uint64_t& sum) {
  std::uint64_t local = 0;
  // Passes over the keys in lookup order, as the bench cycles through its requests.
  const double start = thread_cpu_seconds();
  for (std::size_t pass = 0; pass < passes; ++pass) {
    for (const BlockDigest* key : probed) {
      std::uint64_t w[2];
      std::memcpy(w, key->bytes.data(), sizeof(w));
      local += key->bytes[31] + line[line_index(w[0], lines)].pad[0] +
               line[line_index(w[1], lines)].pad[0];
    }
  }
  const double ns =
      (thread_cpu_seconds() - start) * 1e9 / static_cast<double>(passes * probed.size());
  sum += local;
  return ns;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct LimitBuffer::Buffer {
  std::unique_ptr<Line, FreeDeleter> memory;
  std::uint64_t lines = 0;
  std::uint64_t seed = 0;
  std::uint64_t turn = 0;  // varies the independent reads' addresses from turn to turn
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

LimitBuffer::~LimitBuffer() = default;

std::uint64_t LimitBuffer::bytes() const {
  return buffer_->lines * sizeof(Line);
}
std::uint64_t LimitBuffer::checksum() const {
  return buffer_->sum;
}

double LimitBuffer::independent_ns(std::uint64_t reads) {
  Buffer& b = *buffer_;
  // Whole groups of four (the loop's unit), at least one.
  reads = std::max<std::uint64_t>(4, reads & ~std::uint64_t{3});
  return independent_reads(b.memory.get(), b.lines, b.seed + 2 * ++b.turn, reads, b.sum);
}

double LimitBuffer::hit_lines_ns(const std::vector<const BlockDigest*>& probed,
                                 std::size_t passes) {
  Buffer& b = *buffer_;
  return probed.empty() || passes == 0
             ? 0
             : hit_line_reads(b.memory.get(), b.lines, probed, passes, b.sum);
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
  // Independent: one thread, then two threads at once over the same buffer (does the memory
  // system give a second core its own misses in flight, or do the two share them?).
  const std::uint64_t independent_reads_per_thread = 8'000'000;
  limit.independent_ns =
      independent_reads(line, b.lines, b.seed, independent_reads_per_thread, b.sum);
  if (!probed.empty()) {
    limit.hit_lines_ns = hit_lines_ns(probed, std::max<std::size_t>(1, 2'000'000 / probed.size()));
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
    ns[t] = independent_reads(line, b.lines, b.seed + 2 * static_cast<std::uint64_t>(t) + 1,
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
