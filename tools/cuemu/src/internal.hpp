// Shared by the emulator's scheduler (scheduler.cpp, warp_collectives.cpp, block_barriers.cpp;
// their own state is in scheduler.hpp) and its CUDA runtime API (cudart.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cuemu::detail {

/// The knobs, read once from the environment (README.md lists them).
struct Config {
  bool random = false;  ///< CUEMU_SCHEDULE=random:SEED (else round-robin)
  std::uint64_t seed = 0;
  double preempt =
      0.0;  ///< CUEMU_PREEMPT: probability of a yield at an atomic, fence or hinted access
  int resident_blocks = 1;                            ///< CUEMU_RESIDENT_BLOCKS
  int sm_count = 2;                                   ///< CUEMU_SM_COUNT
  std::size_t stack_bytes = std::size_t{256} * 1024;  ///< CUEMU_STACK_KB
  std::size_t mem_bytes = std::size_t{140} << 30;     ///< CUEMU_MEM_GB: the "device" memory
  bool no_device = false;  ///< CUEMU_NO_DEVICE=1: behave as a machine without a CUDA device
  bool verbose = false;    ///< CUEMU_VERBOSE=1
};

const Config& config();

/// Prints "cuemu: <message>" to stderr and aborts: a kernel bug the GPU would not report.
[[noreturn]] void fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Records a runtime API error for cudaGetLastError / cudaPeekAtLastError.
void set_error(cudaError_t error);
cudaError_t last_error(bool reset);

}  // namespace cuemu::detail
