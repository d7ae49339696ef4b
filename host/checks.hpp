// Limits and messages shared by the coordinator's argument checks.
#pragma once

#include <cstdint>
#include <string>

#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::detail {

/// The largest token count (block size, window, chunk, S, R) a configuration may use: far
/// beyond any model, and small enough that no length arithmetic in the finders overflows.
inline constexpr std::int64_t kMaxConfigTokens = std::int64_t{1} << 40;

/// The most chunks one store or lookup mask may list (one byte each): 2^28 chunks is a
/// 268M-token prompt at block size 1. Longer masks are refused rather than allocated.
inline constexpr std::int64_t kMaxMaskChunks = std::int64_t{1} << 28;

/// "<what> <value> is outside [0, 2^40]": negative or absurd lengths. A length past the hashes
/// is not an error by itself (see detail::max_length_in_range).
inline std::string max_length_message(const char* what, std::int64_t value) {
  return std::string(what) + " " + std::to_string(value) + " is outside [0, " +
         std::to_string(kMaxLookupTokens) + "]";
}

/// Throws InvalidArgument("<where>: namespace <ns> is above 2^24-1") for a namespace no index
/// can hold: the router's calls refuse it rather than answer "absent" for every key.
inline void check_namespace(Namespace ns, const char* where) {
  if (ns > kMaxNamespace) {
    throw InvalidArgument(std::string(where) + ": namespace " + std::to_string(ns) + " is above " +
                          std::to_string(kMaxNamespace));
  }
}

}  // namespace prefixhit::detail
