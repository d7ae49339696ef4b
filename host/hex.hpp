// Hex digits for digests and store keys: one table and one decoder for every caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace prefixhit::detail {

/// Lower-case digits, as Mooncake's keys and vLLM's hex digests write them.
inline constexpr char kHexDigits[] = "0123456789abcdef";

/// The value of one hex digit (either case), or -1.
inline int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/// Decodes pairs of hex digits into out[0 .. hex.size() / 2) (an even count: the caller checks).
/// Returns the position of the first non-hex character, or npos when all are digits.
inline std::size_t decode_hex(std::string_view hex, std::uint8_t* out) noexcept {
  for (std::size_t i = 0; i < hex.size() / 2; ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return hi < 0 ? 2 * i : 2 * i + 1;
    }
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return std::string_view::npos;
}

}  // namespace prefixhit::detail
