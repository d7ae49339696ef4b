// GPU paths of the bindings: the device BlockIndex and batches against it, from host arrays
// (numpy; the C++ engine stages them) or device arrays (torch/cupy through DLPack, ordered on
// the caller's stream).
//
// Everything here compiles without CUDA: the C++ engine and index then throw Unavailable from
// their constructors, and the device-array paths (which need cudaMalloc/cudaMemcpy here) throw
// Unavailable before touching anything.
#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"

#if defined(PREFIXHIT_PY_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace prefixhit::py {

cudaStream_t to_stream(nb::handle stream) {
  if (stream.is_none()) {
    return nullptr;
  }
  nb::object value = nb::borrow(stream);
  if (!PyLong_Check(stream.ptr())) {
    if (nb::hasattr(stream, "cuda_stream")) {  // torch.cuda.Stream
      value = stream.attr("cuda_stream");
    } else if (nb::hasattr(stream, "ptr")) {  // cupy.cuda.Stream
      value = stream.attr("ptr");
    }
  }
  const std::int64_t handle = to_int64(value, "stream");
  if (handle < 0) {
    throw InvalidArgument("stream must be a cudaStream_t value (>= 0), got " +
                          std::to_string(handle));
  }
  return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(handle));
}

std::unique_ptr<DeviceBlockIndex> make_device_index(const DeviceBlockIndexOptions& options,
                                                    nb::handle stream) {
  if (!gpu::device_available()) {
    throw Unavailable("BlockIndex(device='cuda') needs a CUDA device: " + gpu::describe_device());
  }
  const cudaStream_t s = to_stream(stream);
  nb::gil_scoped_release release;
  return std::make_unique<DeviceBlockIndex>(options, s);
}

gpu::BatchLookupEngine& engine_of(PyCoordinator& self) {
  if (!self.engine) {  // the GIL is held: creation is not raced
    if (!gpu::device_available()) {
      throw Unavailable("the GPU batch lookup needs a CUDA device: " + gpu::describe_device());
    }
    self.engine = std::make_unique<gpu::BatchLookupEngine>(self.c);
  }
  return *self.engine;
}

namespace {

/// The host-array batch against a device index: the engine's host overload stages it.
PyBatchResult host_arrays_on_device_index(PyCoordinator& self, nb::handle digests,
                                          nb::handle offsets, nb::handle max_lengths,
                                          nb::handle apply_eagle, const DeviceBlockIndex& index,
                                          Namespace ns, cudaStream_t stream) {
  const Digests d(digests, "digests", DigestShape::sequence_or_flat, self.c.config().digest_size);
  const IntArray<std::int64_t> offs(offsets, "offsets");
  const std::size_t requests = offs.size() == 0 ? 0 : offs.size() - 1;
  const IntArray<std::int64_t> lengths(max_lengths, "max_lengths", /*allow_scalar=*/true);
  std::vector<std::int64_t> broadcast;
  span<const std::int64_t> length_view = lengths.view();
  if (lengths.scalar()) {
    broadcast.assign(requests, *lengths.scalar());
    length_view = broadcast;
  }
  const std::vector<std::uint8_t> flags = eagle_flags(apply_eagle, requests);
  LookupBatch batch;
  batch.digests = d.view();
  batch.offsets = offs.view();
  batch.max_lengths = length_view;
  batch.apply_eagle = flags;
  gpu::BatchLookupEngine& engine = engine_of(self);
  PyBatchResult out;
  nb::gil_scoped_release release;
  out.result = engine.find_longest_cache_hits(batch, index, ns, stream);
  return out;
}

#if defined(PREFIXHIT_PY_WITH_CUDA)

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw CudaError(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

/// Device memory owned for the length of one call.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : size_(n) {
    if (n != 0) {
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc");
    }
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) {
      cudaFree(data_);
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

using DeviceNdArray = nb::ndarray<nb::device::cuda, nb::c_contig>;

/// Imports a CUDA array through DLPack, telling the producer which stream will read it (so
/// that its pending writes are ordered before ours), and checks that it is on the current
/// device.
DeviceNdArray import_device(nb::handle obj, cudaStream_t stream, const char* name) {
  // DLPack stream numbering: 1 is the legacy default stream; other values are the handle.
  const auto stream_arg =
      stream == nullptr ? std::uintptr_t{1} : reinterpret_cast<std::uintptr_t>(stream);
  nb::object capsule;
  try {
    capsule = obj.attr("__dlpack__")(nb::arg("stream") = stream_arg);
  } catch (const nb::python_error&) {
    capsule = obj.attr("__dlpack__")();  // producers that take no stream argument
  }
  DeviceNdArray array;
  if (!nb::try_cast(capsule, array)) {
    PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous CUDA array", name);
    throw nb::python_error();
  }
  int current = 0;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (array.device_id() != current) {
    throw InvalidArgument(std::string(name) + " is on cuda:" + std::to_string(array.device_id()) +
                          " but the current device is cuda:" + std::to_string(current));
  }
  return array;
}

template <class T>
bool has_dtype(const DeviceNdArray& a) {
  return a.dtype() == nb::dtype<T>();
}

/// Digests from a device array: [n, 32] or [n * 32] uint8.
std::size_t device_digest_count(const DeviceNdArray& a, const char* name) {
  if (!has_dtype<std::uint8_t>(a)) {
    PyErr_Format(PyExc_TypeError, "%s must be a uint8 array", name);
    throw nb::python_error();
  }
  if (a.ndim() == 2 && a.shape(1) == BlockDigest::kSize) {
    return a.shape(0);
  }
  if (a.ndim() == 1 && a.shape(0) % BlockDigest::kSize == 0) {
    return a.shape(0) / BlockDigest::kSize;
  }
  throw InvalidArgument(std::string(name) + " must have shape [n, 32] (uint8)");
}

std::size_t device_vector_size(const DeviceNdArray& a, const char* name) {
  if (a.ndim() != 1) {
    throw InvalidArgument(std::string(name) + " must be 1-D");
  }
  return a.shape(0);
}

/// Keys for a device-index call, on the device: borrowed, or staged from host memory.
class DeviceKeys {
 public:
  DeviceKeys(nb::handle keys, cudaStream_t stream) {
    if (is_cuda_array(keys)) {
      array_ = import_device(keys, stream, "keys");
      size_ = device_digest_count(array_, "keys");
      data_ = static_cast<const BlockDigest*>(array_.data());
      return;
    }
    const Digests host(keys, "keys", DigestShape::sequence_or_flat);
    size_ = host.size();
    staged_ = std::make_unique<DeviceBuffer<BlockDigest>>(size_);
    if (size_ != 0) {
      check_cuda(cudaMemcpyAsync(staged_->get(), host.data(), size_ * sizeof(BlockDigest),
                                 cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(keys)");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    data_ = staged_->get();
  }
  const BlockDigest* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  DeviceNdArray array_;
  std::unique_ptr<DeviceBuffer<BlockDigest>> staged_;
  const BlockDigest* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Group ids for a device-index call: one id, or n int32 on the device.
class DeviceGroupIds {
 public:
  DeviceGroupIds(nb::handle ids, std::size_t n, cudaStream_t stream) {
    if (is_cuda_array(ids)) {
      array_ = import_device(ids, stream, "group_ids");
      if (!has_dtype<std::int32_t>(array_)) {
        PyErr_SetString(PyExc_TypeError, "device group_ids must be an int32 array");
        throw nb::python_error();
      }
      check_count(device_vector_size(array_, "group_ids"), n);
      data_ = static_cast<const std::int32_t*>(array_.data());
      return;
    }
    const IntArray<std::int32_t> host(ids, "group_ids", /*allow_scalar=*/true);
    if (host.scalar()) {
      single_ = *host.scalar();
      return;
    }
    check_count(host.size(), n);
    staged_ = std::make_unique<DeviceBuffer<std::int32_t>>(n);
    if (n != 0) {
      check_cuda(cudaMemcpyAsync(staged_->get(), host.view().data(), n * sizeof(std::int32_t),
                                 cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync(group_ids)");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    data_ = staged_->get();
  }
  const std::optional<int>& single() const noexcept { return single_; }
  const std::int32_t* data() const noexcept { return data_; }

 private:
  static void check_count(std::size_t ids, std::size_t n) {
    if (ids != n) {
      throw InvalidArgument("group_ids has " + std::to_string(ids) + " entries but there are " +
                            std::to_string(n) + " keys");
    }
  }
  DeviceNdArray array_;
  std::unique_ptr<DeviceBuffer<std::int32_t>> staged_;
  std::optional<int> single_;
  const std::int32_t* data_ = nullptr;
};

#else

[[noreturn]] void no_device_arrays() {
  throw Unavailable(
      "CUDA arrays need this prefixhit module to be built with CUDA (nvcc was not found when "
      "it was built); pass host arrays (numpy)");
}

#endif  // PREFIXHIT_PY_WITH_CUDA

}  // namespace

std::size_t device_index_update(DeviceBlockIndex& index, Namespace ns, nb::handle group_ids,
                                nb::handle keys, nb::handle stream, bool erase) {
#if defined(PREFIXHIT_PY_WITH_CUDA)
  const cudaStream_t s = to_stream(stream);
  const DeviceKeys k(keys, s);
  const DeviceGroupIds ids(group_ids, k.size(), s);
  nb::gil_scoped_release release;
  if (ids.single()) {
    return erase ? index.erase(ns, *ids.single(), k.data(), k.size(), s)
                 : index.insert(ns, *ids.single(), k.data(), k.size(), s);
  }
  return erase ? index.erase(ns, ids.data(), k.data(), k.size(), s)
               : index.insert(ns, ids.data(), k.data(), k.size(), s);
#else
  (void)index, (void)ns, (void)group_ids, (void)keys, (void)stream, (void)erase;
  no_device_arrays();
#endif
}

nb::object device_index_contains(const DeviceBlockIndex& index, Namespace ns, nb::handle group_ids,
                                 nb::handle keys, nb::handle stream) {
#if defined(PREFIXHIT_PY_WITH_CUDA)
  const cudaStream_t s = to_stream(stream);
  const DeviceKeys k(keys, s);
  const DeviceGroupIds ids(group_ids, k.size(), s);
  std::vector<std::uint8_t> host(k.size());
  {
    nb::gil_scoped_release release;
    DeviceBuffer<std::uint8_t> out(k.size());
    if (ids.single()) {
      index.contains(ns, *ids.single(), k.data(), k.size(), out.get(), s);
    } else {
      index.contains(ns, ids.data(), k.data(), k.size(), out.get(), s);
    }
    if (!host.empty()) {
      check_cuda(cudaMemcpy(host.data(), out.get(), host.size(), cudaMemcpyDeviceToHost),
                 "cudaMemcpy(contains)");
    }
  }
  return owned_bool_array(std::move(host));
#else
  (void)index, (void)ns, (void)group_ids, (void)keys, (void)stream;
  no_device_arrays();
#endif
}

PyBatchResult gpu_batch(PyCoordinator& self, nb::handle digests, nb::handle offsets,
                        nb::handle max_lengths, nb::handle apply_eagle, const PyBlockIndex& store,
                        Namespace ns, nb::handle stream) {
  if (!store.gpu) {
    throw InvalidArgument("gpu_batch needs a BlockIndex(device='cuda')");
  }
  const cudaStream_t s = to_stream(stream);
  const bool d_digests = is_cuda_array(digests);
  const bool d_offsets = is_cuda_array(offsets);
  const bool d_lengths = is_cuda_array(max_lengths);
  if (!d_digests && !d_offsets && !d_lengths) {
    return host_arrays_on_device_index(self, digests, offsets, max_lengths, apply_eagle, *store.gpu,
                                       ns, s);
  }
  if (!(d_digests && d_offsets && d_lengths)) {
    throw InvalidArgument(
        "digests, offsets and max_lengths must be all CUDA arrays or all host arrays");
  }
#if defined(PREFIXHIT_PY_WITH_CUDA)
  gpu::BatchLookupEngine& engine = engine_of(self);
  const DeviceNdArray dig = import_device(digests, s, "digests");
  const DeviceNdArray off = import_device(offsets, s, "offsets");
  const DeviceNdArray len = import_device(max_lengths, s, "max_lengths");
  const std::size_t n = device_digest_count(dig, "digests");
  if (!has_dtype<std::int64_t>(off) || !has_dtype<std::int64_t>(len)) {
    PyErr_SetString(PyExc_TypeError, "device offsets and max_lengths must be int64 arrays");
    throw nb::python_error();
  }
  const std::size_t offsets_size = device_vector_size(off, "offsets");
  if (offsets_size == 0) {
    throw InvalidArgument("batch offsets must have num_requests + 1 entries, got none");
  }
  const std::size_t requests = offsets_size - 1;
  if (device_vector_size(len, "max_lengths") != requests) {
    throw InvalidArgument("batch has " + std::to_string(requests) + " requests but " +
                          std::to_string(len.shape(0)) + " max_lengths");
  }
  // The kernels trust the offsets; a malformed one would read out of bounds. Checking them
  // costs one small copy, which is cheap next to a whole batch.
  std::vector<std::int64_t> host_offsets(offsets_size);
  check_cuda(cudaMemcpyAsync(host_offsets.data(), off.data(), offsets_size * sizeof(std::int64_t),
                             cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync(offsets)");
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (host_offsets[0] != 0 || static_cast<std::size_t>(host_offsets.back()) != n) {
    throw InvalidArgument("batch offsets must start at 0 and end at the number of digests (" +
                          std::to_string(n) + ")");
  }
  for (std::size_t i = 0; i < requests; ++i) {
    if (host_offsets[i + 1] < host_offsets[i]) {
      throw InvalidArgument("batch offsets must not decrease (offsets[" + std::to_string(i + 1) +
                            "] < offsets[" + std::to_string(i) + "])");
    }
  }
  // apply_eagle: None/True -> every request; False -> none; else one flag per request.
  DeviceNdArray flags_array;
  std::unique_ptr<DeviceBuffer<std::uint8_t>> flags_buffer;
  const std::uint8_t* flags = nullptr;
  if (!apply_eagle.is_none() && apply_eagle.ptr() != Py_True) {
    std::vector<std::uint8_t> host_flags;
    if (apply_eagle.ptr() == Py_False) {
      host_flags.assign(requests, 0);
    } else if (is_cuda_array(apply_eagle)) {
      flags_array = import_device(apply_eagle, s, "apply_eagle");
      if (!(has_dtype<std::uint8_t>(flags_array) || has_dtype<bool>(flags_array)) ||
          device_vector_size(flags_array, "apply_eagle") != requests) {
        throw InvalidArgument("device apply_eagle must be bool or uint8 with one flag per request");
      }
      flags = static_cast<const std::uint8_t*>(flags_array.data());
    } else {
      const IntArray<std::int64_t> values(apply_eagle, "apply_eagle");
      if (values.size() != requests) {
        throw InvalidArgument("apply_eagle has " + std::to_string(values.size()) + " entries for " +
                              std::to_string(requests) + " requests");
      }
      for (std::int64_t v : values.view()) {
        host_flags.push_back(v != 0 ? 1 : 0);
      }
    }
    if (flags == nullptr) {
      flags_buffer = std::make_unique<DeviceBuffer<std::uint8_t>>(requests);
      if (requests != 0) {
        check_cuda(cudaMemcpyAsync(flags_buffer->get(), host_flags.data(), requests,
                                   cudaMemcpyHostToDevice, s),
                   "cudaMemcpyAsync(apply_eagle)");
      }
      flags = flags_buffer->get();
    }
  }
  const auto groups = static_cast<std::size_t>(self.c.num_groups());
  PyBatchResult out;
  BatchLookupResult& result = out.result;
  result.num_requests = requests;
  result.num_groups = self.c.num_groups();
  result.hit_lengths.resize(requests);
  result.num_blocks.resize(requests * groups);
  result.num_placeholders.resize(requests * groups);
  ErrorKind failed_kind = ErrorKind::ok;
  std::int64_t failed = static_cast<std::int64_t>(requests);
  {
    nb::gil_scoped_release release;
    DeviceBuffer<std::int64_t> hits(requests);
    DeviceBuffer<std::int64_t> blocks(requests * groups);
    DeviceBuffer<std::int64_t> placeholders(requests * groups);
    DeviceBuffer<ErrorKind> status(requests);
    DeviceBuffer<std::int64_t> first_failed(1);
    gpu::DeviceBatch batch;
    batch.digests = static_cast<const BlockDigest*>(dig.data());
    batch.offsets = static_cast<const std::int64_t*>(off.data());
    batch.max_lengths = static_cast<const std::int64_t*>(len.data());
    batch.apply_eagle = flags;
    batch.num_requests = static_cast<std::int64_t>(requests);
    gpu::DeviceLookupOutput output;
    output.hit_lengths = hits.get();
    output.num_blocks = blocks.get();
    output.num_placeholders = placeholders.get();
    output.status = status.get();
    output.first_failed = first_failed.get();
    engine.lookup(batch, store.gpu->ref(), ns, output, s);  // synchronises s
    if (requests != 0) {
      check_cuda(cudaMemcpy(&failed, first_failed.get(), sizeof(failed), cudaMemcpyDeviceToHost),
                 "cudaMemcpy(first_failed)");
      if (failed >= 0 && failed < static_cast<std::int64_t>(requests)) {
        check_cuda(cudaMemcpy(&failed_kind, status.get() + failed, sizeof(ErrorKind),
                              cudaMemcpyDeviceToHost),
                   "cudaMemcpy(status)");
      } else {
        check_cuda(cudaMemcpy(result.hit_lengths.data(), hits.get(),
                              requests * sizeof(std::int64_t), cudaMemcpyDeviceToHost),
                   "cudaMemcpy(hit_lengths)");
        check_cuda(cudaMemcpy(result.num_blocks.data(), blocks.get(),
                              requests * groups * sizeof(std::int64_t), cudaMemcpyDeviceToHost),
                   "cudaMemcpy(num_blocks)");
        check_cuda(cudaMemcpy(result.num_placeholders.data(), placeholders.get(),
                              requests * groups * sizeof(std::int64_t), cudaMemcpyDeviceToHost),
                   "cudaMemcpy(num_placeholders)");
      }
    }
  }
  if (failed_kind != ErrorKind::ok) {
    throw_error(failed_kind, "request " + std::to_string(failed) + ": " + to_string(failed_kind));
  }
  return out;
#else
  (void)self, (void)apply_eagle, (void)ns;
  no_device_arrays();
#endif
}

}  // namespace prefixhit::py
