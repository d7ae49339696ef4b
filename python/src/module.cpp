// prefixhit._core: the compiled half of the prefixhit Python package. The package's
// __init__.py re-exports these names next to the pure-Python error classes.
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
        info["gpu_batch"] = false;
        info["device_block_index"] = false;
        return info;
      },
      "What this build contains: 'cuda' (the library was built with nvcc), 'gpu_batch' (device "
      "arrays are accepted by find_longest_cache_hits) and 'device_block_index' "
      "(BlockIndex(device='cuda') works).");
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
