// The GPU backend of the vectors runner. The CUDA engine lands with the GPU lookup work; until
// then this reports that it is unavailable rather than pretending to run on a device.
#include "host/vectors/conformance.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::conformance {

std::unique_ptr<Backend> make_gpu_backend() {
  throw Unavailable("the GPU backend is not built yet (no CUDA batch lookup in this build)");
}

}  // namespace prefixhit::conformance
