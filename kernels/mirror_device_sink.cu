// DeviceBlockIndexSink: the event mirror's key changes applied to a GPU DeviceBlockIndex. The
// staging is the CPU sink's (host/mirror/staging.hpp); this file only moves the staged keys to
// the device and calls the index.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "host/mirror/staging.hpp"
#include "kernels/cuda_host.cuh"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

struct DeviceBlockIndexSink::Impl {
  DeviceBlockIndex* index;
  cudaStream_t stream;
  mutable std::mutex mutex;
  mirror::WidthStages stages;
  // Staging that only grows, so that steady ingestion allocates nothing.
  gpu::cuda_host::DeviceBuffer<BlockDigest> digests;
  gpu::cuda_host::DeviceBuffer<std::int32_t> groups;

  void apply(bool insert, Namespace ns, span<const EventKey> keys) {
    std::lock_guard<std::mutex> lock(mutex);
    mirror::stage_by_width(keys, stages);
    mirror::apply_by_width(stages, insert,
                           [&](bool ins, const mirror::WidthStage& s, std::size_t width) {
                             apply_stage(ins, ns, s, width);
                           });
  }

  /// One index call for the staged keys of one width. The index's synchronous calls return
  /// when the work is done, so the buffers can be refilled by the next call.
  void apply_stage(bool insert, Namespace ns, const mirror::WidthStage& s, std::size_t width) {
    const std::size_t n = s.digests.size();
    const BlockDigest* d =
        digests.upload(s.digests.data(), n, stream, "DeviceBlockIndexSink: staging keys");
    if (s.group >= 0) {  // one group: the index's single-group call, no group array
      if (insert) {
        index->insert(ns, s.group, d, n, stream, width);
      } else {
        index->erase(ns, s.group, d, n, stream, width);
      }
      return;
    }
    const std::int32_t* g =
        groups.upload(s.groups.data(), n, stream, "DeviceBlockIndexSink: staging groups");
    if (insert) {
      index->insert(ns, g, d, n, stream, width);
    } else {
      index->erase(ns, g, d, n, stream, width);
    }
  }
};

DeviceBlockIndexSink::DeviceBlockIndexSink(DeviceBlockIndex& index, CUstream_st* stream)
    : impl_(std::make_unique<Impl>()) {
  impl_->index = &index;
  impl_->stream = stream;
}

DeviceBlockIndexSink::~DeviceBlockIndexSink() = default;

void DeviceBlockIndexSink::insert(Namespace ns, span<const EventKey> keys) {
  impl_->apply(true, ns, keys);
}

void DeviceBlockIndexSink::erase(Namespace ns, span<const EventKey> keys) {
  impl_->apply(false, ns, keys);
}

std::size_t DeviceBlockIndexSink::size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->index->size(impl_->stream);
}

bool DeviceBlockIndexSink::may_refuse() const {
  return impl_->index->options().max_capacity != 0;
}

std::unique_lock<std::mutex> DeviceBlockIndexSink::lock() const {
  return std::unique_lock<std::mutex>(impl_->mutex);
}

}  // namespace prefixhit
