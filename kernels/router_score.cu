// GPU router scoring (router_gpu.hpp): the kernel, its launcher and the public engine.
//
// One thread per (request, worker), grid-stride. Threads of a warp are consecutive workers of
// one request, so they read the same table entries (one broadcast load) and neighbouring words
// of the same worker sets; their finders diverge only where the workers' keys differ.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/nvtx.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit {
namespace kernels {

/// Threads per block of the scoring kernel. Each thread's finder state (a GroupHit per spec
/// group) lives in local memory, so a block needs no shared memory.
inline constexpr int kScoreThreads = 128;

/// The kernel's view of a scoring pass (router_gpu.hpp's arrays, flattened).
struct RouterScoreArgs {
  const std::int64_t* offsets;
  const std::int64_t* max_lengths;
  const std::uint8_t* apply_eagle;  ///< null: true for every request
  std::int64_t num_requests;
  const std::uint32_t* set_ids;
  const std::uint64_t* sets;
  std::int64_t num_sets;
  std::int64_t num_workers;
  std::int64_t words;
  detail::WorkerScoreOutputs out;
};

// The plan is a __grid_constant__ parameter, as in batch_lookup.cu: the finders take it by
// reference, and without the qualifier each thread would copy it into local memory.
__global__ void __launch_bounds__(kScoreThreads)
    router_score_kernel(const __grid_constant__ detail::LookupPlan plan,
                        const __grid_constant__ RouterScoreArgs args) {
  const std::int64_t total = args.num_requests * args.num_workers;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const std::int64_t r = t / args.num_workers;
    const std::int64_t w = t - r * args.num_workers;
    const std::int64_t offset = args.offsets[r];
    const std::int64_t n = args.offsets[r + 1] - offset;
    const bool apply_eagle = args.apply_eagle == nullptr || args.apply_eagle[r] != 0;
    const detail::WorkerSetProbe probe{
        &plan, args.set_ids + plan.num_groups * offset, n, args.sets, args.num_sets, args.words, w};
    detail::score_worker(plan, args.max_lengths[r], apply_eagle, probe, t, args.out);
  }
}

cudaError_t launch_router_score(const detail::LookupPlan& plan, const RouterScoreArgs& args,
                                int grid, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(router_score_kernel, grid, kScoreThreads, 0, stream)(plan, args);
  return cudaGetLastError();
}

cudaError_t router_score_resident_blocks(int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, router_score_kernel, kScoreThreads,
                                                       0);
}

}  // namespace kernels

namespace gpu {

namespace {

[[noreturn]] void throw_cuda(cudaError_t err, const std::string& what) {
  throw CudaError(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw_cuda(err, what);
  }
}

/// cudaMemcpyAsync that skips empty copies (an empty vector may have a null data pointer).
void copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
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
/// alone (renumbered), so that both paths say the same thing.
[[noreturn]] void throw_request_error(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency, const ScoreOptions& options,
                                      std::size_t r, ErrorKind kind) {
  const std::string prefix = "score_workers: request " + std::to_string(r) + ": ";
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
    const std::string cpu_prefix = "score_workers: request 0: ";
    if (what.compare(0, cpu_prefix.size(), cpu_prefix) == 0) {
      what = what.substr(cpu_prefix.size());
    }
    throw_error(e.kind(), prefix + what);
  }
  throw_error(kind, prefix + to_string(kind));
}

void require(const DeviceBatch& batch, const DeviceWorkerSets& sets, const DeviceScoreOutput& out) {
  if (batch.num_requests < 0 || sets.num_workers < 0 || sets.num_sets < 0) {
    throw InvalidArgument(
        "score_workers: num_requests, num_workers and num_sets must not be "
        "negative");
  }
  if (batch.num_requests == 0 || sets.num_workers == 0) {
    return;
  }
  if (sets.num_workers > kMaxWorkers) {
    throw InvalidArgument("score_workers: num_workers " + std::to_string(sets.num_workers) +
                          " is above " + std::to_string(kMaxWorkers));
  }
  if (batch.offsets == nullptr || batch.max_lengths == nullptr || sets.set_ids == nullptr ||
      (sets.num_sets > 0 && sets.sets == nullptr)) {
    throw InvalidArgument("score_workers: offsets, max_lengths, set_ids and sets are required");
  }
  if (out.hit_lengths == nullptr || out.num_blocks == nullptr || out.num_placeholders == nullptr ||
      out.status == nullptr) {
    throw InvalidArgument(
        "score_workers: hit_lengths, num_blocks, num_placeholders and status are required");
  }
}

}  // namespace

struct RouterScoreEngine::Impl {
  explicit Impl(const Coordinator& c) : coordinator(c), plan(c.plan()) {}

  Coordinator coordinator;
  detail::LookupPlan plan;
  int resident_blocks = 1;

  std::mutex mutex;  // the host overload's staging
  Staging<std::int64_t> offsets;
  Staging<std::int64_t> max_lengths;
  Staging<std::uint8_t> apply_eagle;
  Staging<std::uint32_t> set_ids;
  Staging<std::uint64_t> sets;
  Staging<std::int64_t> hit_lengths;
  Staging<std::int64_t> num_blocks;
  Staging<std::int64_t> num_placeholders;
  Staging<ErrorKind> status;
};

RouterScoreEngine::RouterScoreEngine(const Coordinator& coordinator) {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::RouterScoreEngine");
  if (!device_available()) {
    throw Unavailable("GPU router scoring: " + describe_device());
  }
  auto impl = std::make_unique<Impl>(coordinator);
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(multiProcessorCount)");
  check(kernels::router_score_resident_blocks(&per_sm),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  impl->resident_blocks = (sms > 0 ? sms : 1) * (per_sm > 0 ? per_sm : 1);
  impl_ = std::move(impl);
}

RouterScoreEngine::~RouterScoreEngine() = default;
RouterScoreEngine::RouterScoreEngine(RouterScoreEngine&&) noexcept = default;
RouterScoreEngine& RouterScoreEngine::operator=(RouterScoreEngine&&) noexcept = default;

const Coordinator& RouterScoreEngine::coordinator() const noexcept {
  return impl_->coordinator;
}

void RouterScoreEngine::score_workers_async(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                                            const DeviceScoreOutput& out,
                                            cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers_async");
  require(batch, sets, out);
  const std::int64_t total = batch.num_requests * sets.num_workers;
  if (total == 0) {
    return;
  }
  const kernels::RouterScoreArgs args{batch.offsets,
                                      batch.max_lengths,
                                      batch.apply_eagle,
                                      batch.num_requests,
                                      sets.set_ids,
                                      sets.sets,
                                      sets.num_sets,
                                      sets.num_workers,
                                      (sets.num_workers + 63) / 64,
                                      detail::WorkerScoreOutputs{out.hit_lengths, out.num_blocks,
                                                                 out.num_placeholders, out.status}};
  const std::int64_t wanted = (total + kernels::kScoreThreads - 1) / kernels::kScoreThreads;
  const int grid =
      static_cast<int>(wanted < impl_->resident_blocks ? wanted : impl_->resident_blocks);
  check(kernels::launch_router_score(impl_->plan, args, grid, stream),
        "router_score_kernel launch");
}

void RouterScoreEngine::score_workers(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                                      const DeviceScoreOutput& out, cudaStream_t stream,
                                      LookupTiming* timing) const {
  ScoreTimer timer(timing, stream);
  score_workers_async(batch, sets, out, stream);
  timer.stop();
  check(cudaStreamSynchronize(stream), "router scoring");
  timer.report();
}

RouterScores RouterScoreEngine::score_workers(const LookupBatch& batch,
                                              const ResidencyIndex& residency,
                                              const ScoreOptions& options, cudaStream_t stream,
                                              LookupTiming* timing) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers");
  Impl& impl = *impl_;
  const WorkerSetTable table = build_worker_set_table(impl.coordinator, batch, residency, options);
  const std::size_t r = batch.num_requests();
  const auto nw = static_cast<std::size_t>(table.num_workers);
  const auto g = static_cast<std::size_t>(table.num_groups);
  RouterScores scores;
  scores.num_requests = r;
  scores.num_workers = table.num_workers;
  scores.num_groups = table.num_groups;
  scores.index_reads = table.index_reads;
  scores.hit_lengths.assign(r * nw, 0);
  scores.num_blocks.assign(r * nw * g, 0);
  scores.num_placeholders.assign(r * nw * g, 0);
  if (r * nw == 0) {
    return scores;
  }
  std::vector<ErrorKind> status(r * nw);
  {
    const std::lock_guard<std::mutex> lock(impl.mutex);
    const std::vector<std::int64_t> offsets(batch.offsets.begin(), batch.offsets.end());
    const std::vector<std::int64_t> max_lengths(batch.max_lengths.begin(), batch.max_lengths.end());
    DeviceBatch d;
    d.num_requests = static_cast<std::int64_t>(r);
    d.offsets = impl.offsets.upload(offsets, stream, "cudaMemcpyAsync(offsets)");
    d.max_lengths = impl.max_lengths.upload(max_lengths, stream, "cudaMemcpyAsync(max_lengths)");
    if (!batch.apply_eagle.empty()) {
      const std::vector<std::uint8_t> eagle(batch.apply_eagle.begin(), batch.apply_eagle.end());
      d.apply_eagle = impl.apply_eagle.upload(eagle, stream, "cudaMemcpyAsync(apply_eagle)");
    }
    DeviceWorkerSets sets;
    sets.set_ids = impl.set_ids.upload(table.set_ids, stream, "cudaMemcpyAsync(set_ids)");
    sets.sets = impl.sets.upload(table.sets, stream, "cudaMemcpyAsync(sets)");
    sets.num_sets = static_cast<std::int64_t>(table.num_sets());
    sets.num_workers = table.num_workers;
    DeviceScoreOutput out;
    out.hit_lengths = impl.hit_lengths.reserve(r * nw, "cudaMalloc(hit_lengths)");
    out.num_blocks = impl.num_blocks.reserve(r * nw * g, "cudaMalloc(num_blocks)");
    out.num_placeholders = impl.num_placeholders.reserve(r * nw * g, "cudaMalloc(placeholders)");
    out.status = impl.status.reserve(r * nw, "cudaMalloc(status)");
    ScoreTimer timer(timing, stream);
    score_workers_async(d, sets, out, stream);
    timer.stop();
    copy_async(scores.hit_lengths.data(), out.hit_lengths, r * nw * sizeof(std::int64_t),
               cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(hit_lengths)");
    copy_async(scores.num_blocks.data(), out.num_blocks, r * nw * g * sizeof(std::int64_t),
               cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(num_blocks)");
    copy_async(scores.num_placeholders.data(), out.num_placeholders,
               r * nw * g * sizeof(std::int64_t), cudaMemcpyDeviceToHost, stream,
               "cudaMemcpyAsync(num_placeholders)");
    copy_async(status.data(), out.status, r * nw * sizeof(ErrorKind), cudaMemcpyDeviceToHost,
               stream, "cudaMemcpyAsync(status)");
    check(cudaStreamSynchronize(stream), "router scoring");
    timer.report();
  }
  for (std::size_t row = 0; row < status.size(); ++row) {
    if (status[row] != ErrorKind::ok) {
      throw_request_error(impl.coordinator, batch, residency, options, row / nw, status[row]);
    }
  }
  return scores;
}

RouterScores score_workers(const Coordinator& coordinator, const LookupBatch& batch,
                           const ResidencyIndex& residency, const ScoreOptions& options,
                           cudaStream_t stream) {
  return RouterScoreEngine(coordinator).score_workers(batch, residency, options, stream);
}

}  // namespace gpu
}  // namespace prefixhit
