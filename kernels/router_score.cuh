// Shared by the GPU router scoring sources (router_score.cu: the kernel and the engine over a
// host-built table; device_residency.cu: the device residency index and its table kernel):
// kernel arguments, launchers, host helpers and the engine's state.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda_host.cuh"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit {
namespace kernels {

/// Threads per block of the scoring kernels. Each thread's finder state (a GroupHit per spec
/// group) lives in local memory, so a block needs no shared memory.
inline constexpr int kScoreThreads = 128;

/// The scoring kernel's view of a pass (router_gpu.hpp's arrays, flattened).
struct RouterScoreArgs {
  const std::int64_t* offsets;
  const std::int64_t* max_lengths;
  const std::uint8_t* apply_eagle;  ///< null: true for every request
  std::int64_t num_requests;
  const std::uint32_t* set_ids;
  const std::uint64_t* sets;
  std::int64_t num_sets;
  std::int64_t num_workers;
  std::int64_t words;  ///< per set: ceil(num_workers * tiers / 64)
  std::int32_t tiers;
  std::uint32_t tier_mask;
  detail::WorkerScoreOutputs out;
  /// Null: one item per (request, worker). Else one per class (router_gpu.hpp WorkerClasses).
  const std::uint32_t* class_requests;
  const std::int64_t* member_offsets;
  const std::int32_t* members;
  std::int64_t num_classes;
};

cudaError_t launch_router_score(const detail::LookupPlan& plan, const RouterScoreArgs& args,
                                int grid, cudaStream_t stream);
cudaError_t router_score_resident_blocks(int* blocks);

/// Blocks for `items` grid-stride items, capped at the resident blocks.
inline int score_grid(std::int64_t items, int resident_blocks) {
  const std::int64_t wanted = (items + kScoreThreads - 1) / kScoreThreads;
  const std::int64_t cap = resident_blocks > 0 ? resident_blocks : 1;
  return static_cast<int>(wanted < cap ? wanted : cap);
}

}  // namespace kernels

namespace gpu::scoring {

using cuda_host::check;
using cuda_host::copy_async;
using cuda_host::throw_cuda;
/// Events around a synchronous call's kernel, when its caller asked for timing.
using ScoreTimer = cuda_host::EventTimer;

/// The host overload's staging: a grow-only device buffer with one spare element, so that an
/// empty array still has an address.
template <class T>
class Staging {
 public:
  T* reserve(std::size_t count, const char* what) { return buffer_.reserve(count + 1, what); }
  /// Uploads `host` (reserving room for it); returns the device copy.
  T* upload(const std::vector<T>& host, cudaStream_t stream, const char* what) {
    T* d = reserve(host.size(), what);
    copy_async(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream, what);
    return d;
  }

 private:
  cuda_host::DeviceBuffer<T> buffer_;
};

/// How a failed request's error begins.
inline std::string request_prefix(std::size_t r) {
  return "score_workers: request " + std::to_string(r) + ": ";
}

/// Runs request r alone through the CPU scorer over `residency`; if that fails, throws its error
/// kind and message as request r's (renumbered), so that the GPU and CPU paths say the same thing.
/// Returns when the CPU run succeeds.
inline void rethrow_cpu_request_error(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency, const ScoreOptions& options,
                                      std::size_t r) {
  try {
    const std::int64_t off = batch.offsets[r];
    const auto n = static_cast<std::size_t>(batch.offsets[r + 1] - off);
    const std::vector<std::int64_t> offsets{0, static_cast<std::int64_t>(n)};
    const std::vector<std::int64_t> max_lengths{batch.max_lengths[r]};
    std::vector<std::uint8_t> eagle;
    if (!batch.apply_eagle.empty()) {
      eagle.push_back(batch.apply_eagle[r]);
    }
    ScoreOptions one = options;
    one.num_threads = 1;
    (void)prefixhit::score_workers(
        coordinator,
        LookupBatch{batch.digests.subspan(static_cast<std::size_t>(off), n), offsets, max_lengths,
                    eagle},
        residency, one);
  } catch (const Error& e) {
    std::string what = e.what();
    const std::string cpu_prefix = request_prefix(0);
    if (what.compare(0, cpu_prefix.size(), cpu_prefix) == 0) {
      what = what.substr(cpu_prefix.size());
    }
    throw_error(e.kind(), request_prefix(r) + what);
  }
}

/// Zeroed scores of R requests x W workers x G groups.
inline RouterScores empty_scores(std::size_t requests, int workers, int groups) {
  const std::size_t rows = requests * static_cast<std::size_t>(workers);
  RouterScores scores;
  scores.num_requests = requests;
  scores.num_workers = workers;
  scores.num_groups = groups;
  scores.hit_lengths.assign(rows, 0);
  scores.num_blocks.assign(rows * static_cast<std::size_t>(groups), 0);
  scores.num_placeholders.assign(rows * static_cast<std::size_t>(groups), 0);
  return scores;
}

}  // namespace gpu::scoring

namespace gpu {

struct RouterScoreEngine::Impl {
  explicit Impl(const Coordinator& c) : coordinator(c), plan(c.plan()) {}

  Coordinator coordinator;
  detail::LookupPlan plan;
  int resident_blocks = 1;

  std::mutex mutex;  // the host overloads' staging
  scoring::Staging<BlockDigest> digests;
  scoring::Staging<std::int64_t> offsets;
  scoring::Staging<std::int64_t> max_lengths;
  scoring::Staging<std::uint8_t> apply_eagle;
  scoring::Staging<std::uint32_t> set_ids;
  scoring::Staging<std::uint64_t> sets;
  scoring::Staging<std::uint32_t> class_requests;
  scoring::Staging<std::int64_t> member_offsets;
  scoring::Staging<std::int32_t> members;
  scoring::Staging<std::int64_t> hit_lengths;
  scoring::Staging<std::int64_t> num_blocks;
  scoring::Staging<std::int64_t> num_placeholders;
  scoring::Staging<ErrorKind> status;

  /// Uploads the batch's offsets, max_lengths and apply_eagle (not the digests).
  DeviceBatch stage(const LookupBatch& batch, cudaStream_t stream);
  /// Scores the staged batch over `sets` (on the device) into `scores` (sized by the caller) and
  /// returns the per-(request, worker) status; synchronises the stream. Caller holds `mutex`.
  /// With `classes`, one thread per class, else per (request, worker).
  std::vector<ErrorKind> run(const RouterScoreEngine& engine, const DeviceBatch& d,
                             const DeviceWorkerSets& table, RouterScores& scores,
                             cudaStream_t stream, LookupTiming* timing,
                             const DeviceWorkerClasses* classes = nullptr);
};

}  // namespace gpu
}  // namespace prefixhit
