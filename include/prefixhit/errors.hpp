// Typed exceptions of the C++ API. Each carries its ErrorKind; the message names what is wrong.
#pragma once

#include <stdexcept>
#include <string>

#include "prefixhit/error_kind.hpp"

namespace prefixhit {

/// Base of every prefixhit exception.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

#define PREFIXHIT_DEFINE_ERROR(Name, kind_value)                                         \
  class Name : public Error {                                                            \
   public:                                                                               \
    explicit Name(const std::string& message) : Error(ErrorKind::kind_value, message) {} \
  }

PREFIXHIT_DEFINE_ERROR(InvalidConfig, invalid_config);
PREFIXHIT_DEFINE_ERROR(UnalignedLength, unaligned_length);
PREFIXHIT_DEFINE_ERROR(UnsupportedEagleChunkedLocal, unsupported_eagle_chunked_local);
PREFIXHIT_DEFINE_ERROR(UnsupportedAlignmentChunkedLocal, unsupported_alignment_chunked_local);
PREFIXHIT_DEFINE_ERROR(UnsupportedAlignmentSlidingWindow, unsupported_alignment_sliding_window);
PREFIXHIT_DEFINE_ERROR(InvalidArgument, invalid_argument);
PREFIXHIT_DEFINE_ERROR(CapacityExceeded, capacity_exceeded);
PREFIXHIT_DEFINE_ERROR(IoError, io_error);
PREFIXHIT_DEFINE_ERROR(FormatError, format_error);
PREFIXHIT_DEFINE_ERROR(CudaError, cuda_error);
PREFIXHIT_DEFINE_ERROR(Unavailable, unavailable);

#undef PREFIXHIT_DEFINE_ERROR

/// Throws the exception type that matches `kind`. `kind` must not be ErrorKind::ok.
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace prefixhit
