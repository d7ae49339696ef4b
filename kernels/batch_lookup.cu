// The GPU batch lookup: kernels, launchers and the public engine of gpu.hpp. The device queries
// and the batch's device buffers are in device_batch_buffers.cu.
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <cub/device/device_reduce.cuh>
#include <mutex>
#include <string>
#include <utility>

#include "host/nvtx.hpp"
#include "kernels/batch_lookup.cuh"
#include "kernels/batch_staging.cuh"
#include "kernels/cuda_host.cuh"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit {
namespace kernels {

// ---- kernels -------------------------------------------------------------------------------
// The plan is a __grid_constant__ parameter: the finders take it by reference, and without the
// qualifier taking its address would copy 1.6 KB into every thread's local memory.

__global__ void __launch_bounds__(kLookupThreads)
    batch_lookup_presence_kernel(const __grid_constant__ detail::LookupPlan plan,
                                 const __grid_constant__ BatchKernelArgs args,
                                 const std::uint8_t* __restrict__ presence) {
  const std::int64_t groups = plan.num_groups;
  lookup_requests_warp_per_request<detail::kPresenceLookahead>(
      plan, args, [&](std::int64_t offset, std::int64_t n) {
        return detail::PresenceTableSource{presence + groups * offset, n};
      });
}

__global__ void __launch_bounds__(kLookupThreads)
    batch_lookup_index_kernel(const __grid_constant__ detail::LookupPlan plan,
                              const __grid_constant__ BatchKernelArgs args,
                              const DeviceBlockIndexRef index, const Namespace ns) {
  const BlockDigest* const digests = args.digests;
  lookup_requests_warp_per_request<detail::kIndexLookahead>(
      plan, args, [&](std::int64_t offset, std::int64_t /*n*/) {
        return DeviceIndexSource<DeviceBlockIndexRef>{index, ns, digests + offset,
                                                      static_cast<std::size_t>(plan.digest_size)};
      });
}

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_batch_lookup_index(const detail::LookupPlan& plan, const BatchKernelArgs& args,
                                      const DeviceBlockIndexRef& index, Namespace ns, int grid,
                                      cudaStream_t stream) {
  PREFIXHIT_LAUNCH(batch_lookup_index_kernel, grid, kLookupThreads, 0, stream)
  (plan, args, index, ns);
  return cudaGetLastError();
}

cudaError_t batch_lookup_index_resident_blocks(int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, batch_lookup_index_kernel,
                                                       kLookupThreads, 0);
}

cudaError_t launch_batch_lookup_presence(const detail::LookupPlan& plan,
                                         const BatchKernelArgs& args, const std::uint8_t* presence,
                                         int grid, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(batch_lookup_presence_kernel, grid, kLookupThreads, 0, stream)
  (plan, args, presence);
  return cudaGetLastError();
}

cudaError_t batch_lookup_presence_resident_blocks(int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, batch_lookup_presence_kernel,
                                                       kLookupThreads, 0);
}

namespace {

/// r if request r failed, else num_requests: the minimum over all r is the first failure.
struct FailedIndex {
  const ErrorKind* status;
  std::int64_t num_requests;
  __host__ __device__ std::int64_t operator()(std::int64_t r) const {
    return status[r] != ErrorKind::ok ? r : num_requests;
  }
};

}  // namespace

cudaError_t launch_first_failed(const ErrorKind* status, std::int64_t num_requests,
                                std::int64_t* first_failed, cudaStream_t stream) {
  const auto failed = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0),
                                                      FailedIndex{status, num_requests});
  std::size_t temp_bytes = 0;
  cudaError_t err =
      cub::DeviceReduce::Min(nullptr, temp_bytes, failed, first_failed, num_requests, stream);
  if (err != cudaSuccess) {
    return err;
  }
  // Stream-ordered temporary storage: concurrent calls on other streams never share it.
  void* temp = nullptr;
  err = cudaMallocAsync(&temp, temp_bytes > 0 ? temp_bytes : 1, stream);
  if (err != cudaSuccess) {
    return err;
  }
  err = cub::DeviceReduce::Min(temp, temp_bytes, failed, first_failed, num_requests, stream);
  const cudaError_t freed = cudaFreeAsync(temp, stream);
  return err != cudaSuccess ? err : freed;
}

}  // namespace kernels

namespace gpu {

namespace {

using cuda_host::check;
using cuda_host::copy_async;
using cuda_host::EventTimer;

void require_outputs(const DeviceBatch& batch, const DeviceLookupOutput& out) {
  if (batch.num_requests < 0) {
    throw InvalidArgument("batch num_requests must not be negative, got " +
                          std::to_string(batch.num_requests));
  }
  if (batch.num_requests == 0) {
    return;
  }
  if (batch.offsets == nullptr || batch.max_lengths == nullptr) {
    throw InvalidArgument("batch offsets and max_lengths are required");
  }
  if (out.hit_lengths == nullptr || out.num_blocks == nullptr || out.num_placeholders == nullptr ||
      out.status == nullptr) {
    throw InvalidArgument("hit_lengths, num_blocks, num_placeholders and status are required");
  }
}

kernels::BatchKernelArgs kernel_args(const DeviceBatch& batch, const DeviceLookupOutput& out) {
  return kernels::BatchKernelArgs{
      batch.digests,
      batch.offsets,
      batch.max_lengths,
      batch.apply_eagle,
      batch.num_requests,
      detail::RequestOutputs{out.hit_lengths, out.num_blocks, out.num_placeholders, out.status}};
}

/// The message a failed request throws: the CPU engine's own message for the same request.
/// Finder errors depend only on the configuration, apply_eagle and max_length (every finder
/// runs in the fixed point's first pass, before any store answer can stop it), so re-running
/// the request on the CPU against an empty store reproduces the error and its wording.
[[noreturn]] void throw_request_error(const Coordinator& coordinator, const LookupBatch& batch,
                                      std::size_t r, ErrorKind kind) {
  const std::string prefix = "request " + std::to_string(r) + ": ";
  try {
    const std::int64_t off = batch.offsets[r];
    const KeySet empty(coordinator.config().digest_size);  // the store must have its width
    coordinator.find_longest_cache_hit(
        batch.digests.subspan(static_cast<std::size_t>(off),
                              static_cast<std::size_t>(batch.offsets[r + 1] - off)),
        batch.max_lengths[r], empty, batch.apply_eagle.empty() || batch.apply_eagle[r] != 0);
  } catch (const Error& e) {
    throw_error(e.kind(), prefix + e.what());
  }
  throw_error(kind, prefix + to_string(kind));
}

}  // namespace

struct BatchLookupEngine::Impl {
  explicit Impl(const Coordinator& c) : coordinator(c), plan(c.plan()) {}

  Coordinator coordinator;
  detail::LookupPlan plan;
  int presence_blocks = 1;  ///< resident blocks of the presence kernel, whole device
  int index_blocks = 1;     ///< resident blocks of the index kernel, whole device

  // Staging of the host overloads (guarded by `mutex`).
  std::mutex mutex;
  cuda_host::BatchStaging staging;

  /// Copies the results back, synchronises, and throws the first failing request's error.
  BatchLookupResult collect(const LookupBatch& batch, const DeviceLookupOutput& out,
                            cudaStream_t stream, EventTimer& timer) {
    const std::size_t r = batch.num_requests();
    BatchLookupResult result;
    std::int64_t failed = 0;
    copy_async(&failed, out.first_failed, sizeof(failed), cudaMemcpyDeviceToHost, stream,
               "cudaMemcpyAsync(first_failed)");
    cuda_host::download_async(out, r, plan.num_groups, result, stream);
    check(cudaStreamSynchronize(stream), "batch lookup");
    timer.report();
    if (failed < 0 || static_cast<std::size_t>(failed) > r) {
      throw CudaError("batch lookup: first_failed " + std::to_string(failed) + " is outside [0, " +
                      std::to_string(r) + "]");
    }
    if (static_cast<std::size_t>(failed) < r) {
      ErrorKind kind = ErrorKind::ok;
      check(cudaMemcpy(&kind, out.status + failed, sizeof(kind), cudaMemcpyDeviceToHost),
            "cudaMemcpy(status)");
      throw_request_error(coordinator, batch, static_cast<std::size_t>(failed), kind);
    }
    return result;
  }
};

BatchLookupEngine::BatchLookupEngine(const Coordinator& coordinator) {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::BatchLookupEngine");
  if (!device_available()) {
    throw Unavailable("GPU batch lookup: " + describe_device());
  }
  auto impl = std::make_unique<Impl>(coordinator);
  int device = 0;
  int sms = 0;
  int per_sm = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(multiProcessorCount)");
  check(kernels::batch_lookup_presence_resident_blocks(&per_sm),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  impl->presence_blocks = sms * (per_sm > 0 ? per_sm : 1);
  check(kernels::batch_lookup_index_resident_blocks(&per_sm),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  impl->index_blocks = sms * (per_sm > 0 ? per_sm : 1);
  impl_ = std::move(impl);
}

BatchLookupEngine::~BatchLookupEngine() = default;
BatchLookupEngine::BatchLookupEngine(BatchLookupEngine&&) noexcept = default;
BatchLookupEngine& BatchLookupEngine::operator=(BatchLookupEngine&&) noexcept = default;

const Coordinator& BatchLookupEngine::coordinator() const noexcept {
  return impl_->coordinator;
}
int BatchLookupEngine::num_groups() const noexcept {
  return impl_->plan.num_groups;
}

namespace {

/// The common part of every device-array call: checks, the empty batch, the lookup launch and
/// the optional first_failed reduction.
template <class Launch>
void run_lookup(const DeviceBatch& batch, const DeviceLookupOutput& out, cudaStream_t stream,
                const char* what, const Launch& launch) {
  require_outputs(batch, out);
  if (batch.num_requests == 0) {
    if (out.first_failed != nullptr) {
      check(cudaMemsetAsync(out.first_failed, 0, sizeof(std::int64_t), stream),
            "cudaMemsetAsync(first_failed)");
    }
    return;
  }
  check(launch(), what);
  if (out.first_failed != nullptr) {
    check(kernels::launch_first_failed(out.status, batch.num_requests, out.first_failed, stream),
          "first_failed reduction");
  }
}

}  // namespace

void BatchLookupEngine::lookup_async(const DeviceBatch& batch, const DeviceBlockIndexRef& index,
                                     Namespace ns, const DeviceLookupOutput& out,
                                     cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::lookup(index)");
  if (ns > kMaxNamespace) {
    throw InvalidArgument("namespace " + std::to_string(ns) + " is above the largest, " +
                          std::to_string(kMaxNamespace));
  }
  run_lookup(batch, out, stream, "batch_lookup_index_kernel launch", [&] {
    return kernels::launch_batch_lookup_index(
        impl_->plan, kernel_args(batch, out), index, ns,
        kernels::lookup_grid(batch.num_requests, impl_->index_blocks), stream);
  });
}

void BatchLookupEngine::lookup(const DeviceBatch& batch, const DeviceBlockIndexRef& index,
                               Namespace ns, const DeviceLookupOutput& out, cudaStream_t stream,
                               LookupTiming* timing) const {
  EventTimer timer(timing, stream);
  lookup_async(batch, index, ns, out, stream);
  timer.stop();
  check(cudaStreamSynchronize(stream), "batch lookup");
  timer.report();
}

void BatchLookupEngine::lookup_async(const DeviceBatch& batch, const std::uint8_t* presence,
                                     const DeviceLookupOutput& out, cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::lookup(presence)");
  if (batch.num_requests > 0 && presence == nullptr) {
    throw InvalidArgument("the presence table is required");
  }
  run_lookup(batch, out, stream, "batch_lookup_presence_kernel launch", [&] {
    return kernels::launch_batch_lookup_presence(
        impl_->plan, kernel_args(batch, out), presence,
        kernels::lookup_grid(batch.num_requests, impl_->presence_blocks), stream);
  });
}

void BatchLookupEngine::lookup(const DeviceBatch& batch, const std::uint8_t* presence,
                               const DeviceLookupOutput& out, cudaStream_t stream,
                               LookupTiming* timing) const {
  EventTimer timer(timing, stream);
  lookup_async(batch, presence, out, stream);
  timer.stop();
  check(cudaStreamSynchronize(stream), "batch lookup");
  timer.report();
}

BatchLookupResult BatchLookupEngine::find_longest_cache_hits(const LookupBatch& batch,
                                                             const DeviceBlockIndex& index,
                                                             Namespace ns, cudaStream_t stream,
                                                             LookupTiming* timing) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::find_longest_cache_hits(index)");
  Impl& impl = *impl_;
  impl.coordinator.validate_batch(batch);
  check_digests(batch.digests, impl.coordinator.config().digest_size, "batch digests");
  const std::lock_guard<std::mutex> lock(impl.mutex);
  const DeviceBatch d = impl.staging.upload(batch, stream);
  const DeviceLookupOutput out = impl.staging.outputs(batch.num_requests(), impl.plan.num_groups);
  EventTimer timer(timing, stream);
  lookup_async(d, index.ref(), ns, out, stream);
  timer.stop();
  return impl.collect(batch, out, stream, timer);
}

BatchLookupResult BatchLookupEngine::find_longest_cache_hits(const LookupBatch& batch,
                                                             span<const std::uint8_t> presence,
                                                             cudaStream_t stream,
                                                             LookupTiming* timing) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::find_longest_cache_hits(presence)");
  Impl& impl = *impl_;
  impl.coordinator.validate_batch(batch);
  check_digests(batch.digests, impl.coordinator.config().digest_size, "batch digests");
  const std::size_t g = static_cast<std::size_t>(impl.plan.num_groups);
  if (presence.size() != g * batch.digests.size()) {
    throw InvalidArgument("presence table has " + std::to_string(presence.size()) +
                          " entries; a batch of " + std::to_string(batch.digests.size()) +
                          " digests over " + std::to_string(g) + " groups needs " +
                          std::to_string(g * batch.digests.size()));
  }
  const std::lock_guard<std::mutex> lock(impl.mutex);
  const DeviceBatch d = impl.staging.upload(batch, stream);
  const std::uint8_t* table = impl.staging.presence.upload(presence.data(), presence.size(), stream,
                                                           "cudaMemcpyAsync(presence)");
  const DeviceLookupOutput out = impl.staging.outputs(batch.num_requests(), impl.plan.num_groups);
  EventTimer timer(timing, stream);
  lookup_async(d, table, out, stream);
  timer.stop();
  return impl.collect(batch, out, stream, timer);
}

}  // namespace gpu
}  // namespace prefixhit
