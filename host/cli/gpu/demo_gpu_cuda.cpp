// The demo's GPU path (CUDA builds): a device copy of the demo index, looked up by the batch
// engine. Used only when a device is present; otherwise the demo stays on the CPU and says why.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "host/cli/demo_gpu.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::cli {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw CudaError(std::string("demo: ") + what + ": " + cudaGetErrorString(status));
  }
}

/// Device memory for one upload, freed on every path.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

class CudaDemoEngine final : public DemoGpuEngine {
 public:
  CudaDemoEngine(const Coordinator& coordinator, const BlockIndex& index, Namespace ns)
      : engine_(coordinator), ns_(ns) {
    // Copy the namespace's keys group by group, as a store would warm a device index.
    std::vector<std::vector<BlockDigest>> by_group(static_cast<std::size_t>(kMaxGroups));
    index.for_each([&](Namespace key_ns, int group, const BlockDigest& digest) {
      if (key_ns == ns) {
        by_group[static_cast<std::size_t>(group)].push_back(digest);
      }
    });
    for (std::size_t g = 0; g < by_group.size(); ++g) {
      const std::vector<BlockDigest>& keys = by_group[g];
      if (keys.empty()) {
        continue;
      }
      DeviceBuffer staging(keys.size() * sizeof(BlockDigest));
      check(cudaMemcpy(staging.ptr, keys.data(), keys.size() * sizeof(BlockDigest),
                       cudaMemcpyHostToDevice),
            "copying keys to the device");
      device_index_.insert(ns, static_cast<int>(g), static_cast<const BlockDigest*>(staging.ptr),
                           keys.size());
    }
  }

  BatchLookupResult find_longest_cache_hits(const LookupBatch& batch) override {
    return engine_.find_longest_cache_hits(batch, device_index_, ns_);
  }

 private:
  gpu::BatchLookupEngine engine_;
  DeviceBlockIndex device_index_;
  Namespace ns_;
};

}  // namespace

std::unique_ptr<DemoGpuEngine> make_demo_gpu_engine(const Coordinator& coordinator,
                                                    const BlockIndex& index, Namespace ns,
                                                    std::string* why_not) {
  if (!gpu::device_available()) {
    if (why_not != nullptr) {
      *why_not = gpu::describe_device();
    }
    return nullptr;
  }
  return std::make_unique<CudaDemoEngine>(coordinator, index, ns);
}

}  // namespace prefixhit::cli
