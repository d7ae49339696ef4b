// Limits and messages shared by the coordinator's argument checks.
#pragma once

#include <cstdint>
#include <string>

namespace prefixhit::detail {

/// The largest token count (block size, window, chunk, S, R) a configuration may use: far
/// beyond any model, and small enough that no length arithmetic in the finders overflows.
inline constexpr std::int64_t kMaxConfigTokens = std::int64_t{1} << 40;

/// The most chunks one store or lookup mask may list (one byte each): 2^28 chunks is a
/// 268M-token prompt at block size 1. Longer masks are refused rather than allocated.
inline constexpr std::int64_t kMaxMaskChunks = std::int64_t{1} << 28;

/// "<what> <value> is outside [0, (n+1)*H) for n hashes of H tokens", overflow-free.
inline std::string max_length_message(const char* what, std::int64_t value, std::int64_t n,
                                      std::int64_t h) {
  std::int64_t bound = 0;
  const bool overflow = __builtin_mul_overflow(n + 1, h, &bound);
  return std::string(what) + " " + std::to_string(value) + " is outside [0, " +
         (overflow ? "(n+1)*H" : std::to_string(bound)) + ") for " + std::to_string(n) +
         " hashes of " + std::to_string(h) + " tokens";
}

}  // namespace prefixhit::detail
