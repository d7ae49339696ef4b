// DeviceBlockIndexSink: the event mirror's key changes applied to a GPU DeviceBlockIndex. The
// staging is the CPU sink's (host/mirror/staging.hpp); this file only moves the staged keys to
// the device and calls the index.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "host/mirror/staging.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace {

/// A device buffer that only grows (doubling), so that steady ingestion allocates nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Copies `bytes` from the host onto the device (ordered on `stream`); returns the copy.
  void* upload(const void* host, std::size_t bytes, cudaStream_t stream) {
    if (bytes > capacity_) {
      std::size_t want = capacity_ == 0 ? 4096 : capacity_;
      while (want < bytes) {
        want *= 2;
      }
      void* next = nullptr;
      const cudaError_t status = cudaMalloc(&next, want);
      if (status != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(std::string("DeviceBlockIndexSink: cudaMalloc of ") + std::to_string(want) +
                        " staging bytes failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")");
      }
      // The old buffer may still be read by work queued on the stream.
      cudaStreamSynchronize(stream);
      cudaFree(ptr_);
      ptr_ = next;
      capacity_ = want;
    }
    if (bytes != 0) {
      const cudaError_t status = cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream);
      if (status != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(std::string("DeviceBlockIndexSink: copying keys to the device failed: ") +
                        cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
      }
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

struct DeviceBlockIndexSink::Impl {
  DeviceBlockIndex* index;
  cudaStream_t stream;
  mutable std::mutex mutex;
  mirror::WidthStages stages;
  DeviceBuffer digests;
  DeviceBuffer groups;

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
    const auto* d = static_cast<const BlockDigest*>(
        digests.upload(s.digests.data(), n * sizeof(BlockDigest), stream));
    if (s.group >= 0) {  // one group: the index's single-group call, no group array
      if (insert) {
        index->insert(ns, s.group, d, n, stream, width);
      } else {
        index->erase(ns, s.group, d, n, stream, width);
      }
      return;
    }
    const auto* g = static_cast<const std::int32_t*>(
        groups.upload(s.groups.data(), n * sizeof(std::int32_t), stream));
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
