// router_gpu.hpp in a build without CUDA: constructing the engine or a device residency index
// (or the one-shot call) throws
// Unavailable, so no other entry point can be reached with a live engine. The host pass
// (build_worker_set_table, host/router_gpu_table.cpp) is built everywhere.
#include <exception>
#include <memory>

#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::gpu {

namespace {

[[noreturn]] void unavailable() {
  throw Unavailable(
      "prefixhit was built without CUDA (no CUDA compiler was found, or "
      "PREFIXHIT_ENABLE_CUDA=OFF): GPU router scoring is unavailable; use "
      "prefixhit::score_workers (CPU)");
}

}  // namespace

struct RouterScoreEngine::Impl {};

RouterScoreEngine::RouterScoreEngine(const Coordinator& /*coordinator*/) {
  unavailable();
}
RouterScoreEngine::~RouterScoreEngine() = default;
RouterScoreEngine::RouterScoreEngine(RouterScoreEngine&&) noexcept = default;
RouterScoreEngine& RouterScoreEngine::operator=(RouterScoreEngine&&) noexcept = default;

const Coordinator& RouterScoreEngine::coordinator() const noexcept {
  std::terminate();  // unreachable: no engine can be constructed
}

void RouterScoreEngine::score_workers_async(const DeviceBatch&, const DeviceWorkerSets&,
                                            const DeviceScoreOutput&, cudaStream_t) const {
  unavailable();
}
void RouterScoreEngine::score_workers_async(const DeviceBatch&, const DeviceWorkerSets&,
                                            const DeviceWorkerClasses&, const DeviceScoreOutput&,
                                            cudaStream_t) const {
  unavailable();
}
void RouterScoreEngine::score_workers(const DeviceBatch&, const DeviceWorkerSets&,
                                      const DeviceScoreOutput&, cudaStream_t, LookupTiming*) const {
  unavailable();
}
RouterScores RouterScoreEngine::score_workers(const LookupBatch&, const ResidencyIndex&,
                                              const ScoreOptions&, cudaStream_t,
                                              LookupTiming*) const {
  unavailable();
}

RouterScores RouterScoreEngine::score_workers(const LookupBatch&, const DeviceResidencyIndex&,
                                              const ScoreOptions&, cudaStream_t,
                                              LookupTiming*) const {
  unavailable();
}

struct DeviceResidencyIndex::Impl {};

DeviceResidencyIndex::DeviceResidencyIndex(const ResidencyIndex& /*residency*/,
                                           cudaStream_t /*stream*/) {
  unavailable();
}
DeviceResidencyIndex::~DeviceResidencyIndex() = default;
DeviceResidencyIndex::DeviceResidencyIndex(DeviceResidencyIndex&&) noexcept = default;
DeviceResidencyIndex& DeviceResidencyIndex::operator=(DeviceResidencyIndex&&) noexcept = default;
void DeviceResidencyIndex::refresh(const ResidencyIndex&, cudaStream_t) {
  unavailable();
}
int DeviceResidencyIndex::num_workers() const noexcept {
  return 0;
}
int DeviceResidencyIndex::num_tiers() const noexcept {
  return 0;
}
std::size_t DeviceResidencyIndex::size() const noexcept {
  return 0;
}
std::size_t DeviceResidencyIndex::worker_sets() const noexcept {
  return 0;
}
std::size_t DeviceResidencyIndex::device_bytes() const noexcept {
  return 0;
}
DeviceResidencyRef DeviceResidencyIndex::ref() const noexcept {
  return {};
}

RouterScores score_workers(const Coordinator&, const LookupBatch&, const ResidencyIndex&,
                           const ScoreOptions&, cudaStream_t) {
  unavailable();
}

}  // namespace prefixhit::gpu
