// The C ABI's GPU part (include/prefixhit/prefixhit.h, "GPU index and lookups"): the device block
// index, the GPU batch lookup engine and the device mirror's sink, over DeviceBlockIndex,
// gpu::BatchLookupEngine and DeviceBlockIndexSink.
//
// Compiles in every build: without CUDA the C++ index and engine throw Unavailable from their
// constructors (host/no_cuda/), so no handle can exist; the key staging below, the one piece that
// calls the CUDA runtime itself, throws Unavailable there too.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "host/c_api_internal.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/gpu.hpp"
#include "prefixhit/prefixhit.h"

#if defined(PREFIXHIT_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda_host.cuh"
#endif

namespace {

using prefixhit::BlockDigest;
using prefixhit::Unavailable;
using prefixhit::capi::DigestInput;
using prefixhit::capi::guarded;
using prefixhit::capi::require;

#if defined(PREFIXHIT_WITH_CUDA)

/// The handle's staging: keys up, answers down, in the grow-only device buffers of the GPU
/// engines (kernels/cuda_host.cuh). Used only under its handle's mutex; ordered on the legacy
/// default stream, as the index's calls (stream nullptr) are.
class DeviceStage {
 public:
  const BlockDigest* upload_keys(const BlockDigest* host, std::size_t count) {
    return keys_.upload(host, count, nullptr, "device block index: copying keys");
  }
  std::uint8_t* answers(std::size_t count) {
    return answers_.reserve(count + 1, "device block index: cudaMalloc of answers");
  }
  /// Copies the first `count` answers to `host`, once the work before them is done.
  void download_answers(std::uint8_t* host, std::size_t count) const {
    namespace cuda_host = prefixhit::gpu::cuda_host;
    cuda_host::copy_async(host, answers_.data(), count, cudaMemcpyDeviceToHost, nullptr,
                          "device block index: copying answers");
    cuda_host::check(cudaStreamSynchronize(nullptr), "device block index: copying answers");
  }

 private:
  prefixhit::gpu::cuda_host::DeviceBuffer<BlockDigest> keys_;
  prefixhit::gpu::cuda_host::DeviceBuffer<std::uint8_t> answers_;
};

#else

/// Never reached (no device index exists without CUDA); throws all the same.
class DeviceStage {
 public:
  const BlockDigest* upload_keys(const BlockDigest* /*host*/, std::size_t /*count*/) { no_cuda(); }
  std::uint8_t* answers(std::size_t /*count*/) { no_cuda(); }
  void download_answers(std::uint8_t* /*host*/, std::size_t /*count*/) const { no_cuda(); }

 private:
  [[noreturn]] static void no_cuda() {
    throw Unavailable("device block index: prefixhit was built without CUDA");
  }
};

#endif

}  // namespace

struct prefixhit_device_block_index {
  explicit prefixhit_device_block_index(const prefixhit::DeviceBlockIndexOptions& options)
      : index(options) {}
  prefixhit::DeviceBlockIndex index;
  // DeviceBlockIndex is not synchronised: every C call holds this, and so do a device mirror's
  // writes (DeviceMirrorSink) and GPU lookups of the index. It also guards the staging.
  mutable std::mutex mutex;
  mutable DeviceStage stage;
};

struct prefixhit_gpu_engine {
  explicit prefixhit_gpu_engine(const prefixhit::Coordinator& coordinator) : engine(coordinator) {}
  prefixhit::gpu::BatchLookupEngine engine;
};

namespace {

/// Throws Unavailable, with the reason, where no GPU handle can be made (no CUDA or no device).
void require_gpu(const char* call) {
  if (!prefixhit::gpu::device_available()) {
    throw Unavailable(std::string(call) +
                      " needs a CUDA device: " + prefixhit::gpu::describe_device());
  }
}

/// A handle argument: NULL is Unavailable where no such handle can exist (no CUDA or device),
/// else InvalidArgument, as for the CPU handles.
template <class Handle>
Handle& gpu_handle(Handle* handle, const char* what) {
  if (handle == nullptr) {
    if (!prefixhit::gpu::device_available()) {
      throw Unavailable(std::string(what) + " is NULL, and none can be created here: " +
                        prefixhit::gpu::describe_device());
    }
    require(handle, what);
  }
  return *handle;
}

/// An insert or erase: the CPU calls' checks, then the keys staged on the device under the
/// handle's mutex, `apply` on the index, and its count.
template <class Apply>
prefixhit_status apply_keys(prefixhit_device_block_index* index, const std::uint8_t* keys,
                            std::size_t num_keys, std::size_t digest_size, std::size_t* count,
                            Apply&& apply) {
  return guarded([&] {
    prefixhit_device_block_index& handle = gpu_handle(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    const std::lock_guard<std::mutex> lock(handle.mutex);
    const BlockDigest* staged = handle.stage.upload_keys(input.view().data(), num_keys);
    const std::size_t n = apply(handle.index, staged);
    if (count != nullptr) {
      *count = n;
    }
  });
}

/// The mirror's writes into a device index, behind the handle's mutex (taken before the sink's
/// own lock; nothing takes them the other way round).
class DeviceMirrorSink final : public prefixhit::MirrorSink {
 public:
  explicit DeviceMirrorSink(prefixhit_device_block_index& handle)
      : handle_(&handle), sink_(handle.index) {}
  void insert(prefixhit::Namespace ns, prefixhit::span<const prefixhit::EventKey> keys) override {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    sink_.insert(ns, keys);
  }
  void erase(prefixhit::Namespace ns, prefixhit::span<const prefixhit::EventKey> keys) override {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    sink_.erase(ns, keys);
  }
  std::size_t size() const override {
    const std::lock_guard<std::mutex> lock(handle_->mutex);
    return sink_.size();
  }
  bool may_refuse() const override { return sink_.may_refuse(); }

 private:
  prefixhit_device_block_index* handle_;
  prefixhit::DeviceBlockIndexSink sink_;
};

}  // namespace

namespace prefixhit::capi {

std::unique_ptr<MirrorSink> device_mirror_sink(prefixhit_device_block_index* handle) {
  return std::make_unique<DeviceMirrorSink>(gpu_handle(handle, "index"));
}

}  // namespace prefixhit::capi

extern "C" {

int prefixhit_gpu_available(void) {
  return prefixhit::gpu::device_available() ? 1 : 0;
}

prefixhit_status prefixhit_device_block_index_create(const prefixhit_block_index_options* options,
                                                     prefixhit_device_block_index** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    const auto o = prefixhit::capi::index_options<prefixhit::DeviceBlockIndexOptions>(options);
    require_gpu("prefixhit_device_block_index_create");
    *out = std::make_unique<prefixhit_device_block_index>(o).release();
  });
}

void prefixhit_device_block_index_destroy(prefixhit_device_block_index* index) {
  delete index;
}

prefixhit_status prefixhit_device_block_index_insert_width(prefixhit_device_block_index* index,
                                                           uint32_t ns, int32_t group_id,
                                                           size_t digest_size, const uint8_t* keys,
                                                           size_t num_keys, size_t* inserted) {
  return apply_keys(index, keys, num_keys, digest_size, inserted,
                    [&](prefixhit::DeviceBlockIndex& target, const BlockDigest* staged) {
                      return target.insert(ns, group_id, staged, num_keys, nullptr, digest_size);
                    });
}

prefixhit_status prefixhit_device_block_index_erase_width(prefixhit_device_block_index* index,
                                                          uint32_t ns, int32_t group_id,
                                                          size_t digest_size, const uint8_t* keys,
                                                          size_t num_keys, size_t* erased) {
  return apply_keys(index, keys, num_keys, digest_size, erased,
                    [&](prefixhit::DeviceBlockIndex& target, const BlockDigest* staged) {
                      return target.erase(ns, group_id, staged, num_keys, nullptr, digest_size);
                    });
}

prefixhit_status prefixhit_device_block_index_contains_width(
    const prefixhit_device_block_index* index, uint32_t ns, int32_t group_id, size_t digest_size,
    const uint8_t* keys, size_t num_keys, uint8_t* present) {
  return guarded([&] {
    const prefixhit_device_block_index& handle = gpu_handle(index, "index");
    const DigestInput input(keys, num_keys, "keys", digest_size);
    if (num_keys != 0) {
      require(present, "present");
    }
    const std::lock_guard<std::mutex> lock(handle.mutex);
    const BlockDigest* staged = handle.stage.upload_keys(input.view().data(), num_keys);
    std::uint8_t* answers = handle.stage.answers(num_keys);
    handle.index.contains(ns, group_id, staged, num_keys, answers, nullptr, digest_size);
    handle.stage.download_answers(present, num_keys);
  });
}

prefixhit_status prefixhit_device_block_index_size(const prefixhit_device_block_index* index,
                                                   size_t* out) {
  return guarded([&] {
    const prefixhit_device_block_index& handle = gpu_handle(index, "index");
    require(out, "out");
    const std::lock_guard<std::mutex> lock(handle.mutex);
    *out = handle.index.size();
  });
}

prefixhit_status prefixhit_gpu_engine_create(const prefixhit_coordinator* coordinator,
                                             prefixhit_gpu_engine** out) {
  return guarded([&] {
    require(out, "out");
    *out = nullptr;
    const prefixhit::Coordinator& c = prefixhit::capi::coordinator_of(coordinator);
    require_gpu("prefixhit_gpu_engine_create");
    *out = std::make_unique<prefixhit_gpu_engine>(c).release();
  });
}

void prefixhit_gpu_engine_destroy(prefixhit_gpu_engine* engine) {
  delete engine;
}

prefixhit_status prefixhit_find_longest_cache_hits_gpu(
    const prefixhit_gpu_engine* engine, const uint8_t* digests, size_t num_digests,
    const int64_t* offsets, const int64_t* max_lengths, const uint8_t* apply_eagle,
    size_t num_requests, const prefixhit_device_block_index* index, uint32_t ns,
    int64_t* hit_lengths, int64_t* num_blocks, int64_t* num_placeholders) {
  return guarded([&] {
    // prefixhit_find_longest_cache_hits' checks in its order; the engine stands for the
    // coordinator (the batch's digest width and its validation are the coordinator's).
    prefixhit::capi::require_lookup_arrays(offsets, max_lengths, hit_lengths, num_blocks,
                                           num_placeholders, num_requests);
    const prefixhit::gpu::BatchLookupEngine& e = gpu_handle(engine, "engine").engine;
    const prefixhit::Coordinator& c = e.coordinator();
    const DigestInput input(digests, num_digests, "digests", c.config().digest_size);
    const prefixhit::LookupBatch batch =
        prefixhit::capi::make_batch(input, offsets, max_lengths, apply_eagle, num_requests);
    const prefixhit_device_block_index& handle = gpu_handle(index, "index");
    prefixhit::capi::check_lookup_namespace(ns, "ns");
    // The engine checks the batch (Coordinator::validate_batch) before it stages anything.
    const std::lock_guard<std::mutex> lock(handle.mutex);
    const prefixhit::BatchLookupResult result = e.find_longest_cache_hits(batch, handle.index, ns);
    std::copy(result.hit_lengths.begin(), result.hit_lengths.end(), hit_lengths);
    std::copy(result.num_blocks.begin(), result.num_blocks.end(), num_blocks);
    std::copy(result.num_placeholders.begin(), result.num_placeholders.end(), num_placeholders);
  });
}

}  // extern "C"
