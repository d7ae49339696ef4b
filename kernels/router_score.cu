// GPU router scoring (router_gpu.hpp): the scoring kernel, its launcher and the engine over a
// host-built worker-set table (the device residency index's path is device_residency.cu).
//
// Grid-stride, one thread per (request, worker class) when the host grouped the workers (the
// thread scores the class's representative and writes every member's row), else one per
// (request, worker). Either way neighbouring threads mostly share a request, so they read the
// same table entries (one broadcast load).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/nvtx.hpp"
#include "kernels/router_score.cuh"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit {
namespace kernels {

// The plan is a __grid_constant__ parameter, as in batch_lookup.cu: the finders take it by
// reference, and without the qualifier each thread would copy it into local memory.
__global__ void __launch_bounds__(kScoreThreads)
    router_score_kernel(const __grid_constant__ detail::LookupPlan plan,
                        const __grid_constant__ RouterScoreArgs args) {
  const bool by_class = args.members != nullptr;
  const std::int64_t total = by_class ? args.num_classes : args.num_requests * args.num_workers;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    std::int64_t r = 0;
    std::int64_t w = 0;
    const std::int32_t* members = nullptr;
    std::int64_t count = 1;
    if (by_class) {
      r = args.class_requests[t];
      const std::int64_t first = args.member_offsets[t];
      count = args.member_offsets[t + 1] - first;
      members = args.members + first;
      if (r < 0 || r >= args.num_requests || count <= 0) {
        continue;  // a malformed class writes nothing
      }
      w = members[0];
      if (w < 0 || w >= args.num_workers) {
        continue;
      }
    } else {
      r = t / args.num_workers;
      w = t - r * args.num_workers;
    }
    const std::int64_t offset = args.offsets[r];
    const std::int64_t n = args.offsets[r + 1] - offset;
    const bool apply_eagle = args.apply_eagle == nullptr || args.apply_eagle[r] != 0;
    const detail::WorkerSetProbe probe{&plan,
                                       args.set_ids + plan.num_groups * offset,
                                       n,
                                       args.sets,
                                       args.num_sets,
                                       args.words,
                                       w,
                                       args.tiers,
                                       args.tier_mask};
    detail::score_worker_rows(plan, args.max_lengths[r], apply_eagle, probe, r * args.num_workers,
                              members, count, args.num_workers, args.out);
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

using scoring::check;
using scoring::copy_async;

namespace {

/// The error a failed request throws: the CPU scorer's own error and message for that request
/// alone (renumbered), so that both paths say the same thing.
[[noreturn]] void throw_request_error(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency, const ScoreOptions& options,
                                      std::size_t r, ErrorKind kind) {
  scoring::rethrow_cpu_request_error(coordinator, batch, residency, options, r);
  throw_error(kind, scoring::request_prefix(r) + to_string(kind));
}

void require(const DeviceBatch& batch, const DeviceWorkerSets& sets, const DeviceScoreOutput& out) {
  if (batch.num_requests < 0 || sets.num_workers < 0 || sets.num_sets < 0) {
    throw InvalidArgument(
        "score_workers: num_requests, num_workers and num_sets must not be "
        "negative");
  }
  if (sets.num_tiers < 1 || sets.num_tiers > kMaxTiers) {
    throw InvalidArgument("score_workers: num_tiers must be in [1, " + std::to_string(kMaxTiers) +
                          "], got " + std::to_string(sets.num_tiers));
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

namespace {

void launch(const detail::LookupPlan& plan, int resident_blocks, const DeviceBatch& batch,
            const DeviceWorkerSets& sets, const DeviceWorkerClasses* classes,
            const DeviceScoreOutput& out, cudaStream_t stream) {
  require(batch, sets, out);
  if (classes != nullptr && classes->num_classes < 0) {
    throw InvalidArgument("score_workers: num_classes must not be negative");
  }
  if (classes != nullptr && classes->num_classes > 0 &&
      (classes->requests == nullptr || classes->member_offsets == nullptr ||
       classes->members == nullptr)) {
    throw InvalidArgument("score_workers: class requests, member_offsets and members are required");
  }
  const std::int64_t total = batch.num_requests * sets.num_workers;
  const std::int64_t items = classes != nullptr ? classes->num_classes : total;
  if (total == 0 || items == 0) {
    return;
  }
  const kernels::RouterScoreArgs args{
      batch.offsets,
      batch.max_lengths,
      batch.apply_eagle,
      batch.num_requests,
      sets.set_ids,
      sets.sets,
      sets.num_sets,
      sets.num_workers,
      (static_cast<std::int64_t>(sets.num_workers) * sets.num_tiers + 63) / 64,
      sets.num_tiers,
      sets.tier_mask,
      detail::WorkerScoreOutputs{out.hit_lengths, out.num_blocks, out.num_placeholders, out.status},
      classes != nullptr ? classes->requests : nullptr,
      classes != nullptr ? classes->member_offsets : nullptr,
      classes != nullptr ? classes->members : nullptr,
      classes != nullptr ? classes->num_classes : 0};
  check(
      kernels::launch_router_score(plan, args, kernels::score_grid(items, resident_blocks), stream),
      "router_score_kernel launch");
}

}  // namespace

void RouterScoreEngine::score_workers_async(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                                            const DeviceScoreOutput& out,
                                            cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers_async");
  launch(impl_->plan, impl_->resident_blocks, batch, sets, nullptr, out, stream);
}

void RouterScoreEngine::score_workers_async(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                                            const DeviceWorkerClasses& classes,
                                            const DeviceScoreOutput& out,
                                            cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers_async(classes)");
  launch(impl_->plan, impl_->resident_blocks, batch, sets, &classes, out, stream);
}

void RouterScoreEngine::score_workers(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                                      const DeviceScoreOutput& out, cudaStream_t stream,
                                      LookupTiming* timing) const {
  scoring::ScoreTimer timer(timing, stream);
  score_workers_async(batch, sets, out, stream);
  timer.stop();
  check(cudaStreamSynchronize(stream), "router scoring");
  timer.report();
}

DeviceBatch RouterScoreEngine::Impl::stage(const LookupBatch& batch, cudaStream_t stream) {
  const std::vector<std::int64_t> host_offsets(batch.offsets.begin(), batch.offsets.end());
  const std::vector<std::int64_t> host_lengths(batch.max_lengths.begin(), batch.max_lengths.end());
  DeviceBatch d;
  d.num_requests = static_cast<std::int64_t>(batch.num_requests());
  d.offsets = offsets.upload(host_offsets, stream, "cudaMemcpyAsync(offsets)");
  d.max_lengths = max_lengths.upload(host_lengths, stream, "cudaMemcpyAsync(max_lengths)");
  if (!batch.apply_eagle.empty()) {
    const std::vector<std::uint8_t> eagle(batch.apply_eagle.begin(), batch.apply_eagle.end());
    d.apply_eagle = apply_eagle.upload(eagle, stream, "cudaMemcpyAsync(apply_eagle)");
  }
  return d;
}

std::vector<ErrorKind> RouterScoreEngine::Impl::run(const RouterScoreEngine& engine,
                                                    const DeviceBatch& d,
                                                    const DeviceWorkerSets& table,
                                                    RouterScores& scores, cudaStream_t stream,
                                                    LookupTiming* timing,
                                                    const DeviceWorkerClasses* classes) {
  const std::size_t rows = scores.num_requests * static_cast<std::size_t>(scores.num_workers);
  const std::size_t cells = rows * static_cast<std::size_t>(scores.num_groups);
  DeviceScoreOutput out;
  out.hit_lengths = hit_lengths.reserve(rows, "cudaMalloc(hit_lengths)");
  out.num_blocks = num_blocks.reserve(cells, "cudaMalloc(num_blocks)");
  out.num_placeholders = num_placeholders.reserve(cells, "cudaMalloc(num_placeholders)");
  out.status = status.reserve(rows, "cudaMalloc(status)");
  scoring::ScoreTimer timer(timing, stream);
  if (classes != nullptr) {
    engine.score_workers_async(d, table, *classes, out, stream);
  } else {
    engine.score_workers_async(d, table, out, stream);
  }
  timer.stop();
  std::vector<ErrorKind> result(rows);
  copy_async(scores.hit_lengths.data(), out.hit_lengths, rows * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(hit_lengths)");
  copy_async(scores.num_blocks.data(), out.num_blocks, cells * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(num_blocks)");
  copy_async(scores.num_placeholders.data(), out.num_placeholders, cells * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(num_placeholders)");
  copy_async(result.data(), out.status, rows * sizeof(ErrorKind), cudaMemcpyDeviceToHost, stream,
             "cudaMemcpyAsync(status)");
  check(cudaStreamSynchronize(stream), "router scoring");
  timer.report();
  return result;
}

RouterScores RouterScoreEngine::score_workers(const LookupBatch& batch,
                                              const ResidencyIndex& residency,
                                              const ScoreOptions& options, cudaStream_t stream,
                                              LookupTiming* timing) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers");
  Impl& impl = *impl_;
  WorkerClasses classes;
  const WorkerSetTable table = build_worker_set_table(impl.coordinator, batch, residency, options,
                                                      TableFill::reached, &classes);
  RouterScores scores =
      scoring::empty_scores(batch.num_requests(), table.num_workers, table.num_groups);
  scores.index_reads = table.index_reads;
  scores.classes = classes.num_classes();
  if (scores.hit_lengths.empty()) {
    return scores;
  }
  std::vector<ErrorKind> status;
  {
    const std::lock_guard<std::mutex> lock(impl.mutex);
    const DeviceBatch d = impl.stage(batch, stream);
    DeviceWorkerSets sets;
    sets.set_ids = impl.set_ids.upload(table.set_ids, stream, "cudaMemcpyAsync(set_ids)");
    sets.sets = impl.sets.upload(table.sets, stream, "cudaMemcpyAsync(sets)");
    sets.num_sets = static_cast<std::int64_t>(table.num_sets());
    sets.num_workers = table.num_workers;
    DeviceWorkerClasses dc;
    dc.num_classes = static_cast<std::int64_t>(classes.num_classes());
    dc.requests =
        impl.class_requests.upload(classes.requests, stream, "cudaMemcpyAsync(class requests)");
    dc.member_offsets = impl.member_offsets.upload(classes.member_offsets, stream,
                                                   "cudaMemcpyAsync(member_offsets)");
    dc.members = impl.members.upload(classes.members, stream, "cudaMemcpyAsync(members)");
    status = impl.run(*this, d, sets, scores, stream, timing, &dc);
  }
  const auto nw = static_cast<std::size_t>(table.num_workers);
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
