// prefixhit._core: the compiled half of the prefixhit Python package. The package's
// __init__.py re-exports these names next to the pure-Python error classes.
#include <nanobind/stl/string.h>

#include "common.hpp"

namespace prefixhit::py {

void bind_gpu_info(nb::module_& m) {
  m.def(
      "build_info",
      []() {
        nb::dict info;
#if defined(PREFIXHIT_PY_WITH_CUDA)
        info["cuda"] = true;
#else
        info["cuda"] = false;
#endif
        // The GPU batch engine and the device index need a CUDA build and a visible device.
        info["gpu_available"] = prefixhit::gpu::device_available();
        info["device"] = prefixhit::gpu::describe_device();
        return info;
      },
      "What this build and machine offer: 'cuda' (built with nvcc), 'gpu_available' (a CUDA "
      "device can be used: BlockIndex(device='cuda') and device-array batches work) and "
      "'device' (the device, or why there is none).");
}

}  // namespace prefixhit::py

NB_MODULE(_core, m) {
  namespace py = prefixhit::py;
  m.doc() = "prefixhit native core (nanobind). Import `prefixhit`, not this module.";
  py::register_error_translation();
  py::bind_specs(m);
  py::bind_stores(m);
  py::bind_block_index(m);
  py::bind_coordinator(m);
  py::bind_gpu_info(m);
}
