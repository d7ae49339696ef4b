// The error kinds of prefixhit. The first five are the reference's (SEMANTICS.md 9.3); the rest
// name engine-level failures. Usable from host and device code (C++17, no allocation).
#pragma once

#include <cstdint>

namespace prefixhit {

enum class ErrorKind : std::uint8_t {
  ok = 0,
  invalid_config,                        ///< construction checks of SEMANTICS.md 1.1, bad specs
  unaligned_length,                      ///< store/lookup mask length not a multiple of A
  unsupported_eagle_chunked_local,       ///< chunked local attention asked to apply the EAGLE drop
  unsupported_alignment_chunked_local,   ///< chunked local block size differs from A
  unsupported_alignment_sliding_window,  ///< A is not a multiple of a window group's block size
  invalid_argument,                      ///< malformed input: lengths, offsets, digests, ids
  capacity_exceeded,                     ///< an index reached its configured maximum capacity
  io_error,                              ///< a file could not be read or written
  format_error,                          ///< a file or document is malformed, truncated or corrupt
  cuda_error,                            ///< a CUDA runtime call failed (allocation, launch, copy)
  unavailable,                           ///< the backend is not built in or no device is present
};

/// The snake_case name of an error kind, as the conformance vectors spell it.
constexpr const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::ok:
      return "ok";
    case ErrorKind::invalid_config:
      return "invalid_config";
    case ErrorKind::unaligned_length:
      return "unaligned_length";
    case ErrorKind::unsupported_eagle_chunked_local:
      return "unsupported_eagle_chunked_local";
    case ErrorKind::unsupported_alignment_chunked_local:
      return "unsupported_alignment_chunked_local";
    case ErrorKind::unsupported_alignment_sliding_window:
      return "unsupported_alignment_sliding_window";
    case ErrorKind::invalid_argument:
      return "invalid_argument";
    case ErrorKind::capacity_exceeded:
      return "capacity_exceeded";
    case ErrorKind::io_error:
      return "io_error";
    case ErrorKind::format_error:
      return "format_error";
    case ErrorKind::cuda_error:
      return "cuda_error";
    case ErrorKind::unavailable:
      return "unavailable";
  }
  return "unknown";
}

}  // namespace prefixhit
