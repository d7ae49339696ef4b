// The framing both of a mirror's ZeroMQ paths share (live SUB messages and replayed ones):
// sequence numbers as 8-byte big-endian frames, and the replay's end marker.
#pragma once

#include <cstdint>
#include <cstring>

namespace prefixhit::mirror {

/// The sequence number that ends a replay (all 0xFF bytes).
inline constexpr std::uint64_t kEndOfReplay = ~std::uint64_t{0};

inline std::uint64_t read_be64(const void* p) {
  std::uint8_t b[8];
  std::memcpy(b, p, 8);
  std::uint64_t v = 0;
  for (const std::uint8_t byte : b) {
    v = (v << 8) | byte;
  }
  return v;
}

inline void write_be64(std::uint64_t v, std::uint8_t* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<std::uint8_t>(v & 0xFFU);
    v >>= 8;
  }
}

}  // namespace prefixhit::mirror
