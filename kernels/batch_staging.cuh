// A host batch staged on the device, shared by the engine's host overloads (batch_lookup.cu)
// and DeviceBatchBuffers (device_batch_buffers.cu): the grow-only device copies of a
// LookupBatch and of its outputs, the upload and the download.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_host.cuh"
#include "prefixhit/gpu.hpp"

namespace prefixhit::gpu::cuda_host {

struct BatchStaging {
  DeviceBuffer<BlockDigest> digests;
  DeviceBuffer<std::int64_t> offsets;
  DeviceBuffer<std::int64_t> max_lengths;
  DeviceBuffer<std::uint8_t> apply_eagle;
  DeviceBuffer<std::uint8_t> presence;
  DeviceBuffer<std::int64_t> hit_lengths;
  DeviceBuffer<std::int64_t> num_blocks;
  DeviceBuffer<std::int64_t> num_placeholders;
  DeviceBuffer<ErrorKind> status;
  DeviceBuffer<std::int64_t> first_failed;

  /// Enqueues the copy of a host batch (checked by the caller) on `stream`; returns it as a
  /// DeviceBatch. DeviceBuffer::upload keeps one spare item: an empty batch is legal.
  DeviceBatch upload(const LookupBatch& batch, cudaStream_t stream) {
    const std::size_t r = batch.num_requests();
    DeviceBatch d;
    d.num_requests = static_cast<std::int64_t>(r);
    d.digests = digests.upload(batch.digests.data(), batch.digests.size(), stream,
                               "cudaMemcpyAsync(digests)");
    d.offsets = offsets.upload(batch.offsets.data(), r + 1, stream, "cudaMemcpyAsync(offsets)");
    d.max_lengths =
        max_lengths.upload(batch.max_lengths.data(), r, stream, "cudaMemcpyAsync(max_lengths)");
    if (!batch.apply_eagle.empty()) {
      d.apply_eagle =
          apply_eagle.upload(batch.apply_eagle.data(), r, stream, "cudaMemcpyAsync(apply_eagle)");
    }
    return d;
  }

  /// The outputs of `requests` requests over `num_groups` groups.
  DeviceLookupOutput outputs(std::size_t requests, int num_groups) {
    const std::size_t cells = requests * static_cast<std::size_t>(num_groups);
    DeviceLookupOutput out;
    out.hit_lengths = hit_lengths.reserve(requests + 1, "cudaMalloc(hit_lengths)");
    out.num_blocks = num_blocks.reserve(cells + 1, "cudaMalloc(num_blocks)");
    out.num_placeholders = num_placeholders.reserve(cells + 1, "cudaMalloc(num_placeholders)");
    out.status = status.reserve(requests + 1, "cudaMalloc(status)");
    out.first_failed = first_failed.reserve(1, "cudaMalloc(first_failed)");
    return out;
  }
};

/// Sizes `result` and enqueues the copies of the per-request outputs into it; the caller
/// synchronises `stream` before reading it.
inline void download_async(const DeviceLookupOutput& out, std::size_t requests, int num_groups,
                           BatchLookupResult& result, cudaStream_t stream) {
  const std::size_t cells = requests * static_cast<std::size_t>(num_groups);
  result.num_requests = requests;
  result.num_groups = num_groups;
  result.hit_lengths.resize(requests);
  result.num_blocks.resize(cells);
  result.num_placeholders.resize(cells);
  copy_async(result.hit_lengths.data(), out.hit_lengths, requests * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(hit_lengths)");
  copy_async(result.num_blocks.data(), out.num_blocks, cells * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(num_blocks)");
  copy_async(result.num_placeholders.data(), out.num_placeholders, cells * sizeof(std::int64_t),
             cudaMemcpyDeviceToHost, stream, "cudaMemcpyAsync(num_placeholders)");
}

}  // namespace prefixhit::gpu::cuda_host
