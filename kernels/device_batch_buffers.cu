// The host side of the GPU batch lookup's device memory (gpu.hpp): whether a device is there,
// DeviceBatchBuffers (a batch staged on the device once and looked up many times) and
// insert_host_keys. The kernels and the engine are in batch_lookup.cu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/nvtx.hpp"
#include "kernels/batch_staging.cuh"
#include "kernels/cuda_host.cuh"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit {
namespace gpu {

namespace {
using cuda_host::check;
using cuda_host::copy_async;
using cuda_host::DeviceBuffer;
}  // namespace

bool device_available() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but leave nothing for a later cudaGetLastError to report
    return false;
  }
  return count > 0;
}

std::string describe_device() noexcept {
  try {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return std::string("no CUDA device: cudaGetDeviceCount failed with ") +
             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
    }
    if (count == 0) {
      return "no CUDA device: cudaGetDeviceCount reports 0 devices";
    }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return "CUDA device (properties unavailable)";
    }
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
           std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) +
           " SMs, device " + std::to_string(device) + ")";
  } catch (...) {
    return "CUDA device (description failed)";
  }
}

struct DeviceBatchBuffers::Impl {
  int num_groups = 0;
  std::size_t num_digests = 0;
  DeviceBatch batch;
  DeviceLookupOutput out;
  cuda_host::BatchStaging staging;

  std::size_t requests() const { return static_cast<std::size_t>(batch.num_requests); }
  std::size_t cells() const { return requests() * static_cast<std::size_t>(num_groups); }
};

DeviceBatchBuffers::DeviceBatchBuffers(const LookupBatch& batch, int num_groups,
                                       cudaStream_t stream) {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::DeviceBatchBuffers");
  if (!device_available()) {
    throw Unavailable("DeviceBatchBuffers: " + describe_device());
  }
  if (num_groups <= 0 || num_groups > kMaxGroups) {
    throw InvalidArgument("num_groups must be in [1, " + std::to_string(kMaxGroups) + "], got " +
                          std::to_string(num_groups));
  }
  const std::size_t r = batch.num_requests();
  if (batch.max_lengths.size() != r ||
      (!batch.apply_eagle.empty() && batch.apply_eagle.size() != r)) {
    throw InvalidArgument(
        "DeviceBatchBuffers: max_lengths and apply_eagle need one entry per "
        "request");
  }
  auto impl = std::make_unique<Impl>();
  impl->num_groups = num_groups;
  impl->num_digests = batch.digests.size();
  impl->batch = impl->staging.upload(batch, stream);
  impl->out = impl->staging.outputs(r, num_groups);
  check(cudaStreamSynchronize(stream), "DeviceBatchBuffers upload");
  impl_ = std::move(impl);
}

DeviceBatchBuffers::~DeviceBatchBuffers() = default;
DeviceBatchBuffers::DeviceBatchBuffers(DeviceBatchBuffers&&) noexcept = default;
DeviceBatchBuffers& DeviceBatchBuffers::operator=(DeviceBatchBuffers&&) noexcept = default;

const DeviceBatch& DeviceBatchBuffers::batch() const noexcept {
  return impl_->batch;
}
const DeviceLookupOutput& DeviceBatchBuffers::output() const noexcept {
  return impl_->out;
}

const std::uint8_t* DeviceBatchBuffers::upload_presence(span<const std::uint8_t> presence,
                                                        cudaStream_t stream) {
  const std::size_t want = static_cast<std::size_t>(impl_->num_groups) * impl_->num_digests;
  if (presence.size() != want) {
    throw InvalidArgument("presence table has " + std::to_string(presence.size()) +
                          " entries, expected " + std::to_string(want));
  }
  const std::uint8_t* table =
      impl_->staging.presence.upload(presence.data(), want, stream, "cudaMemcpyAsync(presence)");
  check(cudaStreamSynchronize(stream), "presence upload");
  return table;
}

void DeviceBatchBuffers::fill_outputs(std::uint8_t byte, cudaStream_t stream) {
  const Impl& impl = *impl_;
  const std::size_t r = impl.requests();
  const int value = byte;
  check(cudaMemsetAsync(impl.out.hit_lengths, value, r * sizeof(std::int64_t), stream),
        "cudaMemsetAsync(hit_lengths)");
  check(cudaMemsetAsync(impl.out.num_blocks, value, impl.cells() * sizeof(std::int64_t), stream),
        "cudaMemsetAsync(num_blocks)");
  check(cudaMemsetAsync(impl.out.num_placeholders, value, impl.cells() * sizeof(std::int64_t),
                        stream),
        "cudaMemsetAsync(num_placeholders)");
  check(cudaMemsetAsync(impl.out.status, value, r * sizeof(ErrorKind), stream),
        "cudaMemsetAsync(status)");
  check(cudaMemsetAsync(impl.out.first_failed, value, sizeof(std::int64_t), stream),
        "cudaMemsetAsync(first_failed)");
}

BatchLookupResult DeviceBatchBuffers::download(cudaStream_t stream) const {
  BatchLookupResult result;
  cuda_host::download_async(impl_->out, impl_->requests(), impl_->num_groups, result, stream);
  check(cudaStreamSynchronize(stream), "result download");
  return result;
}

std::vector<ErrorKind> DeviceBatchBuffers::download_status(cudaStream_t stream) const {
  std::vector<ErrorKind> status(impl_->requests());
  copy_async(status.data(), impl_->out.status, status.size() * sizeof(ErrorKind),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(status)");
  check(cudaStreamSynchronize(stream), "status download");
  return status;
}

std::int64_t DeviceBatchBuffers::download_first_failed(cudaStream_t stream) const {
  std::int64_t first = 0;
  copy_async(&first, impl_->out.first_failed, sizeof(first), cudaMemcpyDeviceToHost, stream,
             "cudaMemcpyAsync(first_failed)");
  check(cudaStreamSynchronize(stream), "first_failed download");
  return first;
}

std::size_t insert_host_keys(DeviceBlockIndex& index, Namespace ns, int group_id,
                             span<const BlockDigest> keys, cudaStream_t stream,
                             std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::insert_host_keys");
  if (keys.empty()) {
    return 0;
  }
  DeviceBuffer<BlockDigest> staging;
  const BlockDigest* staged =
      staging.upload(keys.data(), keys.size(), stream, "cudaMemcpyAsync(keys)");
  // insert() is synchronous, so the staging buffer outlives its use.
  return index.insert(ns, group_id, staged, keys.size(), stream, digest_size);
}

}  // namespace gpu
}  // namespace prefixhit
