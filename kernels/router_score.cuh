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

[[noreturn]] inline void throw_cuda(cudaError_t err, const std::string& what) {
  throw CudaError(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw_cuda(err, what);
  }
}

/// cudaMemcpyAsync that skips empty copies (an empty vector may have a null data pointer).
inline void copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                       cudaStream_t stream, const char* what) {
  if (bytes > 0) {
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream), what);
  }
}

/// A device allocation that only grows; the host overload's staging.
template <class T>
class Staging {
 public:
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (data_ != nullptr) {
      cudaFree(data_);
    }
  }
  /// At least `count` elements (one more, so that an empty array still has an address).
  T* reserve(std::size_t count, const char* what) {
    if (count + 1 > capacity_) {
      if (data_ != nullptr) {
        cudaFree(data_);
        data_ = nullptr;
        capacity_ = 0;
      }
      check(cudaMalloc(reinterpret_cast<void**>(&data_), (count + 1) * sizeof(T)), what);
      capacity_ = count + 1;
    }
    return data_;
  }
  /// Uploads `host` (reserving room for it); returns the device copy.
  T* upload(const std::vector<T>& host, cudaStream_t stream, const char* what) {
    T* d = reserve(host.size(), what);
    copy_async(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream, what);
    return d;
  }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Events around a synchronous call's kernel, when its caller asked for timing.
class ScoreTimer {
 public:
  ScoreTimer(LookupTiming* timing, cudaStream_t stream) : timing_(timing), stream_(stream) {
    if (timing_ == nullptr) {
      return;
    }
    check(cudaEventCreate(&start_), "cudaEventCreate");
    const cudaError_t err = cudaEventCreate(&stop_);
    if (err != cudaSuccess) {
      cudaEventDestroy(start_);
      throw_cuda(err, "cudaEventCreate");
    }
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
  }
  ScoreTimer(const ScoreTimer&) = delete;
  ScoreTimer& operator=(const ScoreTimer&) = delete;
  ~ScoreTimer() {
    if (timing_ != nullptr) {
      cudaEventDestroy(start_);
      cudaEventDestroy(stop_);
    }
  }
  void stop() {
    if (timing_ != nullptr) {
      check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    }
  }
  /// After the stream was synchronised.
  void report() {
    if (timing_ != nullptr) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
      timing_->device_us = static_cast<double>(ms) * 1e3;
    }
  }

 private:
  LookupTiming* timing_;
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

/// The error a failed request throws: the CPU scorer's own error and message for that request

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
