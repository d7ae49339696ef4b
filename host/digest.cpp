// Block digests: hex and byte parsing, narrow widths, and the digest checks of the public API.
#include <cstring>
#include <string>

#include "host/hex.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit {

BlockDigest BlockDigest::from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0 || !valid_size(hex.size() / 2)) {
    throw InvalidArgument("block digest must be 16, 32 or 64 hex digits (8, 16 or 32 bytes), got " +
                          std::to_string(hex.size()) + " characters");
  }
  BlockDigest digest;
  const std::size_t bad = detail::decode_hex(hex, digest.bytes.data());
  if (bad != std::string_view::npos) {
    throw InvalidArgument("block digest has a non-hex character at position " +
                          std::to_string(bad));
  }
  return digest;
}

BlockDigest BlockDigest::from_bytes(const std::uint8_t* data, std::size_t size) {
  if (!valid_size(size)) {
    throw InvalidArgument("block digest must be 8, 16 or 32 bytes, got " + std::to_string(size));
  }
  BlockDigest digest;
  std::memcpy(digest.bytes.data(), data, size);
  return digest;
}

BlockDigest BlockDigest::from_bytes(const std::uint8_t* data, std::size_t size,
                                    std::size_t digest_size) {
  check_digest_size(digest_size, "block digest");
  if (size != digest_size) {
    throw InvalidArgument("block digest must be " + std::to_string(digest_size) +
                          " bytes (the digest_size), got " + std::to_string(size));
  }
  return from_bytes(data, size);
}

BlockDigest BlockDigest::from_int_hash(std::uint64_t hash) noexcept {
  BlockDigest digest;
  for (std::size_t i = 0; i < 8; ++i) {
    digest.bytes[i] = static_cast<std::uint8_t>(hash >> (56 - 8 * i));
  }
  return digest;
}

std::string BlockDigest::to_hex() const {
  return to_hex(kSize);
}

std::string BlockDigest::to_hex(std::size_t digest_size) const {
  const std::size_t n = digest_size < kSize ? digest_size : kSize;
  std::string out(2 * n, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = detail::kHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = detail::kHexDigits[bytes[i] & 15];
  }
  return out;
}

bool BlockDigest::fits(std::size_t digest_size) const noexcept {
  std::uint8_t tail = 0;
  for (std::size_t i = digest_size; i < kSize; ++i) {
    tail |= bytes[i];
  }
  return tail == 0;
}

void check_digest_size(std::size_t digest_size, std::string_view what) {
  if (!BlockDigest::valid_size(digest_size)) {
    throw InvalidArgument(std::string(what) + ": digest_size must be 8, 16 or 32 bytes, got " +
                          std::to_string(digest_size));
  }
}

void check_digests(span<const BlockDigest> digests, std::size_t digest_size,
                   std::string_view what) {
  check_digest_size(digest_size, what);
  if (digest_size == BlockDigest::kSize) {
    return;
  }
  // Word-wise: the tail of a narrow digest is 16 or 24 zero bytes.
  const std::size_t first_word = digest_size / 8;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    std::uint64_t words[4];
    std::memcpy(words, digests[i].bytes.data(), sizeof(words));
    std::uint64_t tail = 0;
    for (std::size_t w = first_word; w < 4; ++w) {
      tail |= words[w];
    }
    if (tail != 0) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] is not a " +
                            std::to_string(digest_size) + "-byte digest: bytes past " +
                            std::to_string(digest_size) + " must be zero");
    }
  }
}

}  // namespace prefixhit
