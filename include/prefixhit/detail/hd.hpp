// Host-and-device qualifiers shared by the CPU backend and the CUDA kernels.
//
// Every per-element piece of logic (finders, fixed-point step, mask patterns, key hashing) is
// written once with PREFIXHIT_HD so that the CPU tests exercise exactly the code the kernels run.
#pragma once

#if defined(__CUDACC__)
#define PREFIXHIT_HD __host__ __device__
#define PREFIXHIT_FORCEINLINE __forceinline__
#else
#define PREFIXHIT_HD
#define PREFIXHIT_FORCEINLINE inline __attribute__((always_inline))
#endif

#include <cstdint>

namespace prefixhit::detail {

/// Floor division (rounds toward minus infinity), as the reference's Python `//` does.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}

/// Ceiling division, exact for negative operands too.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return -floor_div(-a, b);
}

/// Python's `%`: the result has the sign of the divisor.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
  return a - floor_div(a, b) * b;
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t max64(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}

}  // namespace prefixhit::detail
