// gpu.hpp in a build without CUDA: no device is ever available, and constructing the engine
// throws Unavailable, so no other entry point can be reached with a live engine.
#include <exception>
#include <memory>
#include <string>

#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::gpu {

namespace {

constexpr const char* kNoCuda =
    "prefixhit was built without CUDA (no CUDA compiler was found, or "
    "PREFIXHIT_ENABLE_CUDA=OFF): the GPU batch lookup is unavailable";

[[noreturn]] void unavailable() {
  throw Unavailable(kNoCuda);
}

}  // namespace

bool device_available() noexcept {
  return false;
}

std::string describe_device() noexcept {
  try {
    return "built without CUDA";
  } catch (...) {
    return {};
  }
}

struct BatchLookupEngine::Impl {};

BatchLookupEngine::BatchLookupEngine(const Coordinator& /*coordinator*/) {
  unavailable();
}
BatchLookupEngine::~BatchLookupEngine() = default;
BatchLookupEngine::BatchLookupEngine(BatchLookupEngine&&) noexcept = default;
BatchLookupEngine& BatchLookupEngine::operator=(BatchLookupEngine&&) noexcept = default;

const Coordinator& BatchLookupEngine::coordinator() const noexcept {
  std::terminate();
}
int BatchLookupEngine::num_groups() const noexcept {
  return 0;
}

void BatchLookupEngine::lookup_async(const DeviceBatch&, const DeviceBlockIndexRef&, Namespace,
                                     const DeviceLookupOutput&, cudaStream_t) const {
  unavailable();
}
void BatchLookupEngine::lookup(const DeviceBatch&, const DeviceBlockIndexRef&, Namespace,
                               const DeviceLookupOutput&, cudaStream_t, LookupTiming*) const {
  unavailable();
}
void BatchLookupEngine::lookup_async(const DeviceBatch&, const std::uint8_t*,
                                     const DeviceLookupOutput&, cudaStream_t) const {
  unavailable();
}
void BatchLookupEngine::lookup(const DeviceBatch&, const std::uint8_t*, const DeviceLookupOutput&,
                               cudaStream_t, LookupTiming*) const {
  unavailable();
}
BatchLookupResult BatchLookupEngine::find_longest_cache_hits(const LookupBatch&,
                                                             const DeviceBlockIndex&, Namespace,
                                                             cudaStream_t, LookupTiming*) const {
  unavailable();
}
BatchLookupResult BatchLookupEngine::find_longest_cache_hits(const LookupBatch&,
                                                             span<const std::uint8_t>, cudaStream_t,
                                                             LookupTiming*) const {
  unavailable();
}

struct DeviceBatchBuffers::Impl {};

DeviceBatchBuffers::DeviceBatchBuffers(const LookupBatch&, int, cudaStream_t) {
  unavailable();
}
DeviceBatchBuffers::~DeviceBatchBuffers() = default;
DeviceBatchBuffers::DeviceBatchBuffers(DeviceBatchBuffers&&) noexcept = default;
DeviceBatchBuffers& DeviceBatchBuffers::operator=(DeviceBatchBuffers&&) noexcept = default;
const DeviceBatch& DeviceBatchBuffers::batch() const noexcept {
  std::terminate();
}
const DeviceLookupOutput& DeviceBatchBuffers::output() const noexcept {
  std::terminate();
}
const std::uint8_t* DeviceBatchBuffers::upload_presence(span<const std::uint8_t>, cudaStream_t) {
  unavailable();
}
void DeviceBatchBuffers::fill_outputs(std::uint8_t, cudaStream_t) {
  unavailable();
}
BatchLookupResult DeviceBatchBuffers::download(cudaStream_t) const {
  unavailable();
}
std::vector<ErrorKind> DeviceBatchBuffers::download_status(cudaStream_t) const {
  unavailable();
}
std::int64_t DeviceBatchBuffers::download_first_failed(cudaStream_t) const {
  unavailable();
}

std::size_t insert_host_keys(DeviceBlockIndex&, Namespace, int, span<const BlockDigest>,
                             cudaStream_t, std::size_t) {
  unavailable();
}

}  // namespace prefixhit::gpu
