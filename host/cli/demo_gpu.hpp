// The demo's GPU path: the batch lookup engine over a device copy of the demo's index.
#pragma once

#include <memory>
#include <string>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"

namespace prefixhit::cli {

class DemoGpuEngine {
 public:
  virtual ~DemoGpuEngine() = default;
  /// Same contract as Coordinator::find_longest_cache_hits, answered on the GPU.
  virtual BatchLookupResult find_longest_cache_hits(const LookupBatch& batch) = 0;
};

/// A GPU engine holding a device copy of `index`'s namespace `ns`, or nullptr when no GPU can
/// be used; then `why_not` says why (no CUDA in this build, no device, ...).
std::unique_ptr<DemoGpuEngine> make_demo_gpu_engine(const Coordinator& coordinator,
                                                    const BlockIndex& index, Namespace ns,
                                                    std::string* why_not);

}  // namespace prefixhit::cli
