// How `prefixhit bench` times its CPU rows: calls in turns of 10 ms, each turn after the in-run
// memory limit's reads (LimitTurns), per row (time_op) or with rows taking turns with each other
// (time_rows). Used by bench_cpu.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "host/cli/bench.hpp"

namespace prefixhit::cli {

struct Timing {
  double us_per_call = 0;  ///< mean wall time per call
  double calls_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double cpu_us = 0;  ///< process CPU time per call (every thread's)
  /// With LimitTurns: per turn, the calls' key rate as a % of the turn's independent-read rate
  /// and their time over the turn's hit lines.
  std::vector<double> pct_of_independent;
  std::vector<double> x_hit_lines;
  std::vector<double> independent_ns;  ///< per turn: ns per independent read
};

/// The limit's reads in turns with a lookup row's calls. This machine's memory latency moves
/// by 2x from minute to minute (other tenants share the memory), so a limit measured once, before
/// the rows, is compared with calls timed under other conditions. Each turn first reads the
/// limit (about 1 ms of independent reads, then a hit's lines for as many keys as the calls
/// since the last turn probed), then times the calls for kTurnSeconds; the ratios are taken
/// within a turn.
struct LimitTurns {
  LimitBuffer* buffer = nullptr;
  const std::vector<const BlockDigest*>* probed = nullptr;
  std::uint64_t independent_reads = 0;  ///< per turn
  std::size_t hit_line_keys = 0;        ///< the first turn's, all ways together
  double keys_per_call = 0;
  /// Keys the calls since the last limit reads probed: the next turn reads a hit's lines for as
  /// many keys (continuing through `probed`), so that a key's lines are read again after as much
  /// other traffic as a lookup's are (RowClock::turn adds, read_limit takes).
  double probed_since_limit = 0;
  /// Calls per turn long enough that refilling the caches after the limit's reads is small.
  static constexpr double kTurnSeconds = 0.01;
  /// The fewest keys a turn reads a hit's lines for (a third each way).
  static constexpr std::size_t kMinHitLineKeys = std::size_t{3} * 1024;

  LimitTurns(LimitBuffer& b, const std::vector<const BlockDigest*>& keys, const MemoryLimit& l)
      : buffer(&b), probed(&keys) {
    constexpr double kReadSeconds = 1e-3;
    independent_reads =
        static_cast<std::uint64_t>(kReadSeconds * 1e9 / std::max(l.independent_ns(), 0.1));
    // The first turn reads about 1 ms of a hit's lines; later turns as many keys as the calls
    // before them probed. Whole passes over the keys, as before the twenty-fifth round, took
    // about 100 ms per turn at 61.6M keys (276K keys, three ways), and the calls after them ran
    // 1.5x as long as calls with no turns (docs/perf/cpu.md).
    if (!keys.empty()) {  // no keys: no hit-line reads, and no x_hit_lines column
      hit_line_keys = std::max<std::size_t>(
          kMinHitLineKeys,
          static_cast<std::size_t>(kReadSeconds * 1e9 / std::max(l.hit_lines_ns(), 0.1)));
    }
  }
};

/// Nothing to do before a call (time_op's default).
struct NoPrepare {
  void operator()() const {}
};

/// One timed row's calls, gathered turn by turn: the mean, median and 99th percentile wall time
/// per call, and the CPU time per call. With LimitTurns, each turn also sets the calls beside
/// the limit's reads just before it.
class RowClock {
 public:
  RowClock() { samples_.reserve(1 << 16); }

  /// Calls `op` for `seconds`. `prepare` runs before each call, outside its timing: its wall
  /// time is taken off the CPU time too (on a quiet machine the two agree), less the seconds it
  /// returns, if it returns any: the time it slept, when no CPU time passed.
  template <class Op, class Prepare>
  void turn(const Op& op, const Prepare& prepare, double seconds, LimitTurns* turns,
            double independent_ns, double hit_lines_ns) {
    using clock = std::chrono::steady_clock;
    const std::size_t calls_before = samples_.size();
    const double cpu_start = process_cpu_seconds();
    const auto start = clock::now();
    auto last = start;
    double turn_elapsed = 0;
    double calls_elapsed = 0;  // the turn's wall time less its preparations
    double asleep = 0;         // the preparations' time off the CPU
    do {
      if constexpr (std::is_void_v<decltype(prepare())>) {
        prepare();
      } else {
        asleep += prepare();
      }
      const auto before = clock::now();
      op();
      const auto now = clock::now();
      // A call's time runs from the end of the last one (the loop's own work included), or
      // from the end of its preparation.
      const auto from = std::is_same_v<Prepare, NoPrepare> ? last : before;
      samples_.push_back(std::chrono::duration<double, std::micro>(now - from).count());
      calls_elapsed += samples_.back() * 1e-6;
      last = now;
      turn_elapsed = std::chrono::duration<double>(now - start).count();
    } while (turn_elapsed < seconds);
    const double turn_cpu =
        process_cpu_seconds() - cpu_start - (turn_elapsed - calls_elapsed - asleep);
    elapsed_ += calls_elapsed;
    turns_elapsed_ += turn_elapsed;
    cpu_seconds_ += turn_cpu;
    if (turns != nullptr && turns->keys_per_call > 0) {
      const double keys =
          static_cast<double>(samples_.size() - calls_before) * turns->keys_per_call;
      turns->probed_since_limit += keys;
      const double ns_per_key = turn_cpu * 1e9 / keys;
      t_.pct_of_independent.push_back(100.0 * independent_ns / ns_per_key);
      t_.independent_ns.push_back(independent_ns);
      if (hit_lines_ns > 0) {
        t_.x_hit_lines.push_back(ns_per_key / hit_lines_ns);
      }
    }
  }

  /// Seconds of calls timed so far.
  double elapsed() const { return elapsed_; }
  /// Seconds of turns so far, preparations included.
  double turns_elapsed() const { return turns_elapsed_; }

  Timing finish() {
    const auto calls = static_cast<double>(samples_.size());
    t_.us_per_call = elapsed_ * 1e6 / calls;
    t_.calls_per_s = 1e6 / t_.us_per_call;
    t_.cpu_us = cpu_seconds_ * 1e6 / calls;
    t_.p50_us = percentile(samples_, 0.5);
    t_.p99_us = percentile(std::move(samples_), 0.99);
    return std::move(t_);
  }

 private:
  Timing t_;
  std::vector<double> samples_;
  double elapsed_ = 0;
  double turns_elapsed_ = 0;
  double cpu_seconds_ = 0;
};

/// The limit's reads for one turn: ns per independent read and per key of a hit's lines (0, 0
/// without turns).
inline std::pair<double, double> read_limit(LimitTurns* turns) {
  if (turns == nullptr) {
    return {0.0, 0.0};
  }
  std::size_t keys = turns->hit_line_keys;
  if (turns->probed_since_limit > 0) {
    // At most about 10 ms of reads (ten times the first turn's).
    keys = std::clamp(static_cast<std::size_t>(turns->probed_since_limit),
                      LimitTurns::kMinHitLineKeys, 10 * turns->hit_line_keys);
  }
  turns->probed_since_limit = 0;
  return {turns->buffer->independent_ns(turns->independent_reads),
          turns->buffer->hit_lines_ns(*turns->probed, keys)};
}

/// Calls `op` for at least min_seconds after one warm-up call (RowClock). With `turns`, the
/// calls run in turns after the limit's reads (LimitTurns), and only the calls' time counts.
template <class Op, class Prepare = NoPrepare>
Timing time_op(const Op& op, double min_seconds, LimitTurns* turns = nullptr,
               const Prepare& prepare = Prepare{}) {
  op();  // warm up caches and allocations
  RowClock row;
  do {
    const auto [independent_ns, hit_lines_ns] = read_limit(turns);
    row.turn(op, prepare, turns != nullptr ? LimitTurns::kTurnSeconds : min_seconds, turns,
             independent_ns, hit_lines_ns);
  } while (row.elapsed() < min_seconds);
  return row.finish();
}

/// A row timed in turns with others (time_rows).
struct InterleavedRow {
  std::function<void()> op;
  std::function<double()> prepare;  ///< as RowClock::turn's: returns the seconds it slept
};

/// Times `rows` in turns with the limit's reads and with each other: each turn reads the limit,
/// then calls each row for a turn, until every row has had min_seconds of turns (its
/// preparations included: a row that pauses before each call gets as many turns as one that
/// does not). Rows compared with
/// each other (one thread and two) are then timed under the same conditions: this machine's
/// speed drifts by a fifth within minutes, so rows timed one after the other compared its drift.
inline std::vector<Timing> time_rows(const std::vector<InterleavedRow>& rows, double min_seconds,
                                     LimitTurns& turns) {
  for (const InterleavedRow& row : rows) {
    row.prepare();
    row.op();  // warm up caches and allocations
  }
  std::vector<RowClock> clocks(rows.size());
  const auto shortest = [&] {
    double least = std::numeric_limits<double>::infinity();
    for (const RowClock& c : clocks) {
      least = std::min(least, c.turns_elapsed());
    }
    return least;
  };
  // Each turn starts one row further on, so that every row follows the limit's reads and each
  // other row as often: what one leaves in the caches does not favour the next.
  std::size_t first = 0;
  do {
    const auto [independent_ns, hit_lines_ns] = read_limit(&turns);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::size_t r = (first + i) % rows.size();
      clocks[r].turn(rows[r].op, rows[r].prepare, LimitTurns::kTurnSeconds, &turns, independent_ns,
                     hit_lines_ns);
    }
    first = (first + 1) % rows.size();
  } while (shortest() < min_seconds);
  std::vector<Timing> timings;
  timings.reserve(clocks.size());
  for (RowClock& c : clocks) {
    timings.push_back(c.finish());
  }
  return timings;
}

}  // namespace prefixhit::cli
