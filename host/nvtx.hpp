// NVTX ranges in the "prefixhit" domain, so Nsight Systems shows where the real work sits.
// Compiled out where the CUDA toolkit (and so the header-only nvtx3) is absent.
#pragma once

#if defined(PREFIXHIT_WITH_NVTX)
#include <nvtx3/nvtx3.hpp>

namespace prefixhit::detail {
struct nvtx_domain {
  static constexpr const char* name{"prefixhit"};
};
}  // namespace prefixhit::detail

#define PREFIXHIT_NVTX_CONCAT_(a, b) a##b
#define PREFIXHIT_NVTX_CONCAT(a, b) PREFIXHIT_NVTX_CONCAT_(a, b)
#define PREFIXHIT_NVTX_RANGE(name)                                                  \
  ::nvtx3::scoped_range_in<::prefixhit::detail::nvtx_domain> PREFIXHIT_NVTX_CONCAT( \
      prefixhit_nvtx_range_, __LINE__) {                                            \
    name                                                                            \
  }
#else
#define PREFIXHIT_NVTX_RANGE(name) static_cast<void>(0)
#endif
