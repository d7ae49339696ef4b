// Host-and-device qualifiers shared by the CPU backend and the CUDA kernels.
//
// Every per-element piece of logic (finders, fixed-point step, mask patterns, key hashing) is
// written once with PREFIXHIT_HD so that the CPU tests exercise exactly the code the kernels run.
#pragma once

// Two questions replace raw __CUDACC__ / __CUDA_ARCH__ checks in headers, so that the same
// sources build with nvcc and with the host compiler against the CPU emulator (tools/cuemu,
// which defines CUEMU; CMake option PREFIXHIT_CUDA_EMULATION):
//   PREFIXHIT_CUDA_SOURCE  1 in CUDA source: __global__/__device__ and the CUDA built-ins exist.
//   PREFIXHIT_DEVICE_CODE  1 where code is compiled for the device (nvcc's device pass). Under
//                          cuemu a kernel is host code run by fibers, so the device branch is
//                          the one compiled (and tested).
#if defined(__CUDACC__) || defined(CUEMU)
#define PREFIXHIT_CUDA_SOURCE 1
#else
#define PREFIXHIT_CUDA_SOURCE 0
#endif
#if defined(__CUDA_ARCH__) || defined(CUEMU)
#define PREFIXHIT_DEVICE_CODE 1
#else
#define PREFIXHIT_DEVICE_CODE 0
#endif

#if PREFIXHIT_CUDA_SOURCE
#define PREFIXHIT_HD __host__ __device__
#define PREFIXHIT_FORCEINLINE __forceinline__
#else
#define PREFIXHIT_HD
#define PREFIXHIT_FORCEINLINE inline __attribute__((always_inline))
#endif

#if PREFIXHIT_CUDA_SOURCE
// One launch form for every kernel launch: PREFIXHIT_LAUNCH(kernel, grid, block, smem, stream)
// (args...). nvcc gets <<<>>>; cuemu gets its launcher (which names the kernel in diagnostics).
#if defined(CUEMU)
#define PREFIXHIT_LAUNCH(kernel, grid, block, smem, stream) \
  ::cuemu::launch((grid), (block), (smem), (stream)).named(#kernel).bind(kernel)
#else
#define PREFIXHIT_LAUNCH(kernel, grid, block, smem, stream) \
  kernel<<<(grid), (block), (smem), (stream)>>>
#endif
// Inline PTX, which has no CPU meaning: only performance hints (prefetches) may use it, since
// under cuemu the statement is dropped.
#if defined(CUEMU)
#define PREFIXHIT_PTX(...) static_cast<void>(0)
#else
#define PREFIXHIT_PTX(...) asm volatile(__VA_ARGS__)
#endif
#endif

#include <cstdint>

namespace prefixhit::detail {

/// Whether b is a positive power of two: block sizes and alignments are, in practice, and then
/// the helpers below shift and mask instead of dividing (a 64-bit division costs tens of cycles,
/// and a lookup's finders do a few dozen).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool is_pow2(std::int64_t b) {
  return b > 0 && (b & (b - 1)) == 0;
}

/// log2 of a positive power of two.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE int log2_pow2(std::int64_t b) {
#if PREFIXHIT_DEVICE_CODE
  return __ffsll(static_cast<long long>(b)) - 1;
#else
  return __builtin_ctzll(static_cast<unsigned long long>(b));
#endif
}

/// Floor division (rounds toward minus infinity), as the reference's Python `//` does.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (is_pow2(b)) {
    return a >> log2_pow2(b);  // an arithmetic shift floors
  }
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
  if (is_pow2(b)) {
    return a & (b - 1);  // two's complement: the non-negative remainder, as Python's
  }
  // From the remainder, not a - floor_div(a, b) * b: that product overflows where the result
  // fits (a near -2^63, b near 2^61). r + b cannot overflow: r and b then differ in sign.
  if (b == -1) {
    return 0;  // INT64_MIN % -1 traps
  }
  const std::int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::int64_t max64(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}

}  // namespace prefixhit::detail
