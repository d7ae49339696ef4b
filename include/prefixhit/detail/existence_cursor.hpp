// How a finder sees the store (detail/finders.hpp), written once for host and device.
//
// A finder never sees the store directly. It asks a Probe for the existence bits of a run of hash
// indices, `first, first+step, ...` (step may be negative), at most 64 at a time:
//
//   struct Probe {
//     static constexpr int kFirstWindow = ...;  // bits asked for by the first refill, unless
//                                               // the finder hints its scan's reads
//     static constexpr int kMaxWindow = ...;    // later refills double up to this (<= 64)
//     // bit k set iff every member of spec group `sg` holds hashes[first + k*step]
//     PREFIXHIT_HD std::uint64_t window(int sg, std::int64_t first, std::int64_t step,
//                                       int count) const;
//     // optional: at most this many bits (>= 1) in the window starting at `first`
//     PREFIXHIT_HD int window_limit(int sg, std::int64_t first, std::int64_t step) const;
//   };
//
// The CPU backend probes the index one key at a time inside `window`; the CUDA warp backend
// answers 32 keys with one ballot. Both run this same scan logic over the bits.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "prefixhit/detail/hd.hpp"

#if PREFIXHIT_DEVICE_CODE
#define PREFIXHIT_HOST_NOINLINE
#else
#define PREFIXHIT_HOST_NOINLINE __attribute__((noinline))
#endif

namespace prefixhit::detail {

/// Whether a Probe caps its windows by position (window_limit); most do not.
template <class Probe, class = void>
struct HasWindowLimit : std::false_type {};
template <class Probe>
struct HasWindowLimit<Probe, decltype(void(std::declval<const Probe&>().window_limit(
                                 0, std::int64_t{0}, std::int64_t{0})))> : std::true_type {};

/// Walks the existence bits of `base + k*step` for k = 0, 1, ... < limit, caching one window.
template <class Probe>
class ExistenceCursor {
 public:
  /// `first_window`: the bits the first refill asks for, when the finder knows how many items
  /// its scan reads if every one is present (clamped to [1, kMaxWindow]); by default
  /// Probe::kFirstWindow. Later refills double from it.
  PREFIXHIT_HD ExistenceCursor(const Probe& probe, int sg, std::int64_t base, std::int64_t step,
                               std::int64_t limit, std::int64_t first_window = Probe::kFirstWindow)
      : probe_(probe),
        sg_(sg),
        base_(base),
        step_(step),
        limit_(limit),
        next_len_(first_window < 1                   ? 1
                  : first_window > Probe::kMaxWindow ? Probe::kMaxWindow
                                                     : static_cast<int>(first_window)) {}

  /// Whether item k (0 <= k < limit) exists. Inlined into the scan loops: on the host the
  /// refill stays out of line, so the common case (the bit is in the window) is a few
  /// instructions, not a call.
  PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool at(std::int64_t k) {
    cover(k);
    return ((bits_ >> (k - window_start_)) & 1U) != 0;
  }

  /// The first k' in [k, end) whose item is absent, or end (end <= limit): the scan
  /// `while (k < end && at(k)) ++k`, a window's run of present bits at a time instead of a bit
  /// at a time. It asks the probe for exactly the windows that scan asks for.
  PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t first_absent(std::int64_t k, std::int64_t end) {
    while (k < end) {
      cover(k);
      const int offset = static_cast<int>(k - window_start_);
      const int avail = window_len_ - offset;
      const int ones = trailing_ones(bits_ >> offset);
      if (ones < avail) {
        return min64(k + ones, end);
      }
      k += avail;
    }
    return end;
  }

 private:
  /// Makes the cached window hold item k (0 <= k < limit), asking for the next one if not.
  PREFIXHIT_HD PREFIXHIT_FORCEINLINE void cover(std::int64_t k) {
    if (k < window_start_ || k >= window_start_ + window_len_) {
      refill(k);
    }
  }

  /// The number of consecutive set bits from bit 0.
  PREFIXHIT_HD PREFIXHIT_FORCEINLINE static int trailing_ones(std::uint64_t x) {
    if (x == ~std::uint64_t{0}) {
      return 64;
    }
#if PREFIXHIT_DEVICE_CODE
    return __ffsll(static_cast<long long>(~x)) - 1;
#else
    return __builtin_ctzll(~x);
#endif
  }

  PREFIXHIT_HD PREFIXHIT_HOST_NOINLINE void refill(std::int64_t k) {
    window_start_ = k;
    const std::int64_t left = limit_ - k;
    window_len_ = static_cast<int>(left < next_len_ ? left : next_len_);
    if constexpr (HasWindowLimit<Probe>::value) {
      const int cap = probe_.window_limit(sg_, base_ + k * step_, step_);
      window_len_ = window_len_ < cap ? window_len_ : cap;
    }
    bits_ = probe_.window(sg_, base_ + k * step_, step_, window_len_);
    next_len_ = next_len_ * 2 > Probe::kMaxWindow ? Probe::kMaxWindow : next_len_ * 2;
  }

  const Probe& probe_;
  int sg_;
  std::int64_t base_;
  std::int64_t step_;
  std::int64_t limit_;
  std::int64_t window_start_ = 0;
  int window_len_ = 0;
  int next_len_;
  std::uint64_t bits_ = 0;
};

}  // namespace prefixhit::detail
