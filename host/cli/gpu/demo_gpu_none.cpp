// The demo's GPU path in builds without CUDA: there is none, and the demo says so.
#include "host/cli/demo_gpu.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::cli {

std::unique_ptr<DemoGpuEngine> make_demo_gpu_engine(const Coordinator& /*coordinator*/,
                                                    const BlockIndex& /*index*/, Namespace /*ns*/,
                                                    std::string* why_not) {
  if (why_not != nullptr) {
    *why_not = gpu::describe_device();
  }
  return nullptr;
}

}  // namespace prefixhit::cli
