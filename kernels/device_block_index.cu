// DeviceBlockIndex, host side: the GPU-resident set of (namespace, group id, digest) keys, digests
// of 8, 16 or 32 bytes. Device memory, validation, capacity planning and the public calls; the
// kernels are device_index_kernels.cu, their per-key device functions device_index_slots.cuh,
// and the slot logic (hash, tags, buckets, compare, erase rule) detail/index_slots.hpp, shared
// with the CPU BlockIndex and covered by its CPU tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "host/nvtx.hpp"
#include "kernels/device_index_slots.cuh"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

// ---- host side ----------------------------------------------------------------------------------

namespace {

using index_kernels::DeviceCounters;
using index_kernels::DeviceTable;
using index_kernels::KeyBatch;

[[noreturn]] void throw_cuda(cudaError_t status, const std::string& what) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw CudaError("DeviceBlockIndex::" + what + ": " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")");
}

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    throw_cuda(status, what);
  }
}

/// Device memory from the options' allocator or cudaMalloc; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceAllocator& allocator, std::size_t bytes, cudaStream_t stream,
               const std::string& what)
      : bytes_(bytes) {
    if (bytes == 0) {
      return;
    }
    if (allocator.allocate) {
      if (!allocator.deallocate) {
        throw InvalidArgument(
            "DeviceBlockIndex: DeviceAllocator.allocate is set but deallocate "
            "is not");
      }
      try {
        ptr_ = allocator.allocate(bytes, stream);
      } catch (const std::exception& e) {
        throw CudaError("DeviceBlockIndex: the allocator failed to provide " +
                        std::to_string(bytes) + " bytes for " + what + ": " + e.what());
      }
      if (ptr_ == nullptr) {
        throw CudaError("DeviceBlockIndex: the allocator returned no memory for " +
                        std::to_string(bytes) + " bytes of " + what);
      }
      deallocate_ = allocator.deallocate;
      if (reinterpret_cast<std::uintptr_t>(ptr_) % 32 != 0) {
        release();
        throw InvalidArgument("DeviceBlockIndex: the allocator returned memory for " + what +
                              " that is not 32-byte aligned");
      }
    } else {
      const cudaError_t status = cudaMalloc(&ptr_, bytes);
      if (status != cudaSuccess) {
        ptr_ = nullptr;
        throw_cuda(status, "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what);
      }
    }
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      swap(other);
    }
    return *this;
  }

  void* get() const noexcept { return ptr_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(bytes_, other.bytes_);
    std::swap(deallocate_, other.deallocate_);
  }
  void release() noexcept {
    if (ptr_ == nullptr) {
      return;
    }
    if (deallocate_) {
      try {
        // The default stream: the allocating stream may no longer exist by now.
        deallocate_(ptr_, bytes_, nullptr);
      } catch (...) {
        // A destructor must not throw; the caller's allocator owns the failure.
      }
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
  }

  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::function<void(void*, std::size_t, cudaStream_t)> deallocate_;
};

/// One table generation on the device: bucket headers and digests (index_slots.hpp).
struct TableBuffers {
  std::uint64_t buckets = 0;
  DeviceBuffer headers;  // 32 bytes more than the headers: a caller's allocator aligns to 32 only
  DeviceBuffer digests;

  std::uint64_t slots() const { return detail::slots_of_buckets(buckets); }
  std::size_t bytes() const { return headers.bytes() + digests.bytes(); }
  std::size_t header_bytes() const {
    return static_cast<std::size_t>(buckets * sizeof(detail::BucketHeader));
  }
  /// The first 64-byte boundary of the header buffer: a header is one line, never two.
  detail::BucketHeader* first_header() const {
    auto* base = static_cast<unsigned char*>(headers.get());
    const auto misalignment =
        static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(base) % 64U);
    return reinterpret_cast<detail::BucketHeader*>(base +
                                                   (misalignment == 0 ? 0 : 64 - misalignment));
  }
  DeviceTable view(const detail::IndexHashKey& hash_key) const {
    return DeviceTable{first_header(), static_cast<BlockDigest*>(digests.get()), buckets - 1,
                       hash_key};
  }
};

std::uint64_t random_seed() {
  std::uint64_t seed = 0;
  try {
    std::random_device device;
    seed = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {
    seed =
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&seed)) ^ 0x243F6A8885A308D3ULL;
  }
  return seed == 0 ? 0x13198A2E03707344ULL : seed;
}

void validate_owner(Namespace ns, std::int64_t group_id, const char* call) {
  if (!detail::valid_namespace(ns)) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": namespace " +
                          std::to_string(ns) + " exceeds the 24-bit maximum " +
                          std::to_string(kMaxNamespace));
  }
  if (!detail::valid_group(group_id)) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": group id " +
                          std::to_string(group_id) + " is outside [0, " +
                          std::to_string(kMaxGroups) + ")");
  }
}

/// Rejects null, misaligned and plain host pointers, which a kernel could not read (an illegal
/// address would poison the whole CUDA context).
void validate_device_pointer(const void* ptr, std::size_t alignment, const char* call,
                             const char* name) {
  if (ptr == nullptr) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name + " is null");
  }
  if (reinterpret_cast<std::uintptr_t>(ptr) % alignment != 0) {
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name + " is not " +
                          std::to_string(alignment) + "-byte aligned");
  }
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess || attributes.type == cudaMemoryTypeUnregistered) {
    cudaGetLastError();
    throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": " + name +
                          " is not device-accessible memory (pass device, managed or pinned "
                          "host memory)");
  }
}

KeyBatch make_batch(Namespace ns, int group_id, const std::int32_t* group_ids,
                    const BlockDigest* keys, std::size_t digest_size, const char* call) {
  check_digest_size(digest_size, std::string("DeviceBlockIndex::") + call);
  KeyBatch batch{};
  batch.width_code = detail::digest_width_code(digest_size);
  batch.words = static_cast<int>(digest_size / 8);
  batch.keys = keys;
  batch.group_ids = group_ids;
  batch.group_id = group_id;
  batch.ns = ns;
  batch.aligned16 = reinterpret_cast<std::uintptr_t>(keys) % 16 == 0;
  return batch;
}

template <class ImplPtr>
auto& live_impl(const ImplPtr& impl) {
  if (!impl) {
    throw InvalidArgument("DeviceBlockIndex: this index was moved from");
  }
  return *impl;
}

}  // namespace

struct DeviceBlockIndex::Impl {
  DeviceBlockIndexOptions options;
  std::uint64_t seed = 0;
  detail::IndexHashKey hash_key{};
  std::uint64_t max_buckets = 0;
  int sm_count = 1;
  TableBuffers table;
  DeviceBuffer counter_buffer;
  /// An upper bound of the used slots, kept without synchronising; exact after a sync.
  std::uint64_t used_upper = 0;

  DeviceCounters* counters() const { return static_cast<DeviceCounters*>(counter_buffer.get()); }
  DeviceTable view() const { return table.view(hash_key); }

  DeviceCounters read_counters(cudaStream_t stream, const char* call) const {
    DeviceCounters host{};
    check_cuda(cudaMemcpyAsync(&host, counters(), sizeof(host), cudaMemcpyDeviceToHost, stream),
               std::string(call) + ": reading the counters");
    check_cuda(cudaStreamSynchronize(stream), std::string(call) + ": synchronising the stream");
    return host;
  }

  void reset_call_count(cudaStream_t stream, const char* call) {
    check_cuda(cudaMemsetAsync(&counters()->call_count, 0, sizeof(unsigned long long), stream),
               std::string(call) + ": resetting the call counter");
  }

  /// Every slot empty (spare tag bytes and meta words zero too).
  static void clear_headers(const TableBuffers& t, cudaStream_t stream, const char* what) {
    static_assert(detail::kEmptyTag == 0, "a zeroed header is an empty bucket");
    check_cuda(cudaMemsetAsync(t.first_header(), 0, t.header_bytes(), stream), what);
  }

  TableBuffers allocate_table(std::uint64_t buckets, cudaStream_t stream) const {
    TableBuffers t;
    t.buckets = buckets;
    const std::uint64_t slots = detail::slots_of_buckets(buckets);
    t.headers = DeviceBuffer(options.allocator, t.header_bytes() + 32, stream, "bucket headers");
    t.digests = DeviceBuffer(options.allocator, slots * sizeof(BlockDigest), stream, "digests");
    clear_headers(t, stream, "clearing new bucket headers");
    return t;
  }

  /// Throws InvalidArgument naming the first key with a nonzero byte past `digest_size` (an
  /// invalid width too); applies nothing. Free for 32-byte keys.
  void check_key_widths(const BlockDigest* keys, std::uint64_t n, std::size_t digest_size,
                        cudaStream_t stream, const char* call) const {
    check_digest_size(digest_size, std::string("DeviceBlockIndex::") + call);
    if (digest_size == BlockDigest::kSize) {
      return;
    }
    check_cuda(cudaMemsetAsync(&counters()->first_bad, 0xFF, sizeof(unsigned long long), stream),
               std::string(call) + ": resetting the validation flag");
    check_cuda(index_kernels::launch_check_key_tails(keys, n, static_cast<int>(digest_size / 8),
                                                     counters(), sm_count, stream),
               std::string(call) + ": launching check_key_tails");
    const DeviceCounters c = read_counters(stream, call);
    if (c.first_bad != ~0ULL) {
      throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": keys[" +
                            std::to_string(c.first_bad) + "] is not a " +
                            std::to_string(digest_size) + "-byte digest: bytes past " +
                            std::to_string(digest_size) + " must be zero; nothing was applied");
    }
  }

  /// Throws InvalidArgument naming the first bad per-key group id; applies nothing.
  void check_groups(const std::int32_t* group_ids, std::uint64_t n, cudaStream_t stream,
                    const char* call) {
    check_cuda(cudaMemsetAsync(&counters()->first_bad, 0xFF, sizeof(unsigned long long), stream),
               std::string(call) + ": resetting the validation flag");
    check_cuda(index_kernels::launch_check_groups(group_ids, n, counters(), sm_count, stream),
               std::string(call) + ": launching check_group_ids");
    const DeviceCounters c = read_counters(stream, call);
    if (c.first_bad != ~0ULL) {
      std::int32_t value = 0;
      check_cuda(cudaMemcpy(&value, group_ids + c.first_bad, sizeof(value), cudaMemcpyDeviceToHost),
                 std::string(call) + ": reading a bad group id");
      throw InvalidArgument(std::string("DeviceBlockIndex::") + call + ": group_ids[" +
                            std::to_string(c.first_bad) + "] = " + std::to_string(value) +
                            " is outside [0, " + std::to_string(kMaxGroups) +
                            "); nothing was applied");
    }
  }

  /// Rebuilds into `buckets` buckets (dropping tombstones). On any failure the old table stays.
  void rehash(std::uint64_t buckets, cudaStream_t stream) {
    PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::rehash");
    TableBuffers next = allocate_table(buckets, stream);
    check_cuda(index_kernels::launch_rehash(view(), table.slots(), next.view(hash_key), counters(),
                                            sm_count, stream),
               "rehash: launching rehash_slots");
    DeviceCounters c = read_counters(stream, "rehash");
    if (c.overflow != 0) {
      check_cuda(cudaMemsetAsync(&counters()->overflow, 0, sizeof(unsigned int), stream),
                 "rehash: resetting the overflow flag");
      throw CudaError(
          "DeviceBlockIndex::rehash: a key found no slot in the new table (internal "
          "error); the index is unchanged");
    }
    const unsigned long long used = c.live;
    check_cuda(
        cudaMemcpyAsync(&counters()->used, &used, sizeof(used), cudaMemcpyHostToDevice, stream),
        "rehash: updating the counters");
    check_cuda(cudaStreamSynchronize(stream), "rehash: synchronising the stream");
    table = std::move(next);
    used_upper = used;
  }

  /// Makes room for the batch: grows or drops tombstones when needed; throws CapacityExceeded,
  /// with nothing applied, when its new keys cannot fit under max_capacity.
  void reserve(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream) {
    const double mlf = options.max_load_factor;
    const std::uint64_t limit = detail::load_limit(table.slots(), mlf);
    if (used_upper + n <= limit) {
      return;  // fits even if every key is new: no synchronisation
    }
    DeviceCounters c = read_counters(stream, "insert");
    used_upper = c.used;
    if (c.used + n <= limit) {
      return;
    }
    // Keys absent from the table bound the new keys from above.
    DeviceBuffer present(options.allocator, n, stream, "insert scratch flags");
    reset_call_count(stream, "insert");
    check_cuda(index_kernels::launch_find_missing(view(), batch, n,
                                                  static_cast<std::uint8_t*>(present.get()),
                                                  counters(), sm_count, stream),
               "insert: launching find_missing_keys");
    c = read_counters(stream, "insert");
    const std::uint64_t missing = c.call_count;
    if (c.used + missing <= limit) {
      return;
    }
    std::uint64_t buckets = detail::plan_buckets(c.live + missing, table.buckets, max_buckets, mlf);
    if (buckets == 0) {
      // Only an exact count of the distinct new keys can tell: insert the missing ones into a
      // scratch table with its own counters.
      const std::uint64_t distinct = count_distinct(batch, n, present, missing, stream);
      buckets = detail::plan_buckets(c.live + distinct, table.buckets, max_buckets, mlf);
      if (buckets == 0) {
        throw CapacityExceeded(
            "DeviceBlockIndex::insert: " + std::to_string(distinct) + " new keys on top of " +
            std::to_string(c.live) + " would exceed the limit of " +
            std::to_string(detail::load_limit(detail::slots_of_buckets(max_buckets), mlf)) +
            " keys (max_capacity " + std::to_string(options.max_capacity) +
            " slots, max_load_factor " + std::to_string(mlf) + "); nothing was inserted");
      }
    }
    rehash(buckets, stream);
  }

  std::uint64_t count_distinct(const KeyBatch& batch, std::uint64_t n, const DeviceBuffer& present,
                               std::uint64_t missing, cudaStream_t stream) const {
    PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::count_distinct");
    const TableBuffers scratch = allocate_table(detail::buckets_for_keys(missing, 0.5), stream);
    DeviceBuffer scratch_counters(options.allocator, sizeof(DeviceCounters), stream,
                                  "scratch counters");
    check_cuda(cudaMemsetAsync(scratch_counters.get(), 0, sizeof(DeviceCounters), stream),
               "insert: clearing scratch counters");
    auto* sc = static_cast<DeviceCounters*>(scratch_counters.get());
    check_cuda(index_kernels::launch_insert(scratch.view(hash_key), batch, n,
                                            static_cast<const std::uint8_t*>(present.get()), sc,
                                            sm_count, stream),
               "insert: launching insert_keys into the scratch table");
    DeviceCounters host{};
    check_cuda(cudaMemcpyAsync(&host, sc, sizeof(host), cudaMemcpyDeviceToHost, stream),
               "insert: reading scratch counters");
    check_cuda(cudaStreamSynchronize(stream), "insert: synchronising the stream");
    if (host.overflow != 0) {
      throw CudaError("DeviceBlockIndex::insert: the scratch table overflowed (internal error)");
    }
    return host.call_count;
  }

  std::size_t insert(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream, bool sync) {
    reserve(batch, n, stream);
    if (sync) {
      reset_call_count(stream, "insert");
    }
    check_cuda(
        index_kernels::launch_insert(view(), batch, n, nullptr, counters(), sm_count, stream),
        "insert: launching insert_keys");
    used_upper += n;
    if (!sync) {
      return 0;
    }
    const DeviceCounters c = read_counters(stream, "insert");
    used_upper = c.used;
    if (c.overflow != 0) {
      throw CudaError("DeviceBlockIndex::insert: a key found no free slot (internal error)");
    }
    return static_cast<std::size_t>(c.call_count);
  }

  std::size_t erase(const KeyBatch& batch, std::uint64_t n, cudaStream_t stream, bool sync) {
    if (sync) {
      reset_call_count(stream, "erase");
    }
    check_cuda(index_kernels::launch_erase(view(), batch, n, counters(), sm_count, stream),
               "erase: launching erase_keys");
    if (!sync) {
      return 0;
    }
    const DeviceCounters c = read_counters(stream, "erase");
    used_upper = c.used;
    return static_cast<std::size_t>(c.call_count);
  }

  void contains(const KeyBatch& batch, std::uint64_t n, std::uint8_t* out, cudaStream_t stream,
                bool sync) const {
    check_cuda(index_kernels::launch_contains(view(), batch, n, out, sm_count, stream),
               "contains: launching contains_keys");
    if (sync) {
      check_cuda(cudaStreamSynchronize(stream), "contains: synchronising the stream");
    }
  }
};

DeviceBlockIndex::DeviceBlockIndex(const DeviceBlockIndexOptions& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::DeviceBlockIndex");
  // The CPU index's bounds (block_index.hpp): a tinier factor makes the first insert spin, a
  // slot limit near 2^64 overflows the bucket arithmetic.
  if (!(options.max_load_factor >= kMinMaxLoadFactor && options.max_load_factor <= 0.95)) {
    throw InvalidArgument("DeviceBlockIndexOptions.max_load_factor must be in [" +
                          std::to_string(kMinMaxLoadFactor) + ", 0.95], got " +
                          std::to_string(options.max_load_factor));
  }
  if (static_cast<std::uint64_t>(options.max_capacity) > kMaxIndexSlots) {
    throw InvalidArgument("DeviceBlockIndexOptions.max_capacity must be at most 2^40 slots, got " +
                          std::to_string(options.max_capacity));
  }
  if (options.max_capacity != 0 &&
      options.max_capacity < static_cast<std::size_t>(detail::kBucketSlots)) {
    throw InvalidArgument(
        "DeviceBlockIndexOptions.max_capacity must be 0 (unbounded) or at "
        "least " +
        std::to_string(detail::kBucketSlots) + " slots, got " +
        std::to_string(options.max_capacity));
  }
  if (static_cast<bool>(options.allocator.allocate) !=
      static_cast<bool>(options.allocator.deallocate)) {
    throw InvalidArgument(
        "DeviceBlockIndexOptions.allocator needs both allocate and deallocate, "
        "or neither");
  }
  Impl& impl = *impl_;
  impl.options = options;
  impl.seed = options.seed != 0 ? options.seed : random_seed();
  impl.hash_key = detail::make_hash_key(impl.seed);
  impl.max_buckets = detail::max_buckets_for(options.max_capacity);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "DeviceBlockIndex: cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&impl.sm_count, cudaDevAttrMultiProcessorCount, device),
             "DeviceBlockIndex: reading the SM count");
  const std::uint64_t buckets = detail::buckets_for_slots(
      static_cast<std::uint64_t>(options.initial_capacity), impl.max_buckets);
  impl.counter_buffer = DeviceBuffer(options.allocator, sizeof(DeviceCounters), stream, "counters");
  check_cuda(cudaMemsetAsync(impl.counter_buffer.get(), 0, sizeof(DeviceCounters), stream),
             "DeviceBlockIndex: clearing the counters");
  impl.table = impl.allocate_table(buckets, stream);
  check_cuda(cudaStreamSynchronize(stream), "DeviceBlockIndex: synchronising the stream");
}

DeviceBlockIndex::~DeviceBlockIndex() = default;
DeviceBlockIndex::DeviceBlockIndex(DeviceBlockIndex&&) noexcept = default;
DeviceBlockIndex& DeviceBlockIndex::operator=(DeviceBlockIndex&&) noexcept = default;

std::size_t DeviceBlockIndex::insert(Namespace ns, int group_id, const BlockDigest* keys,
                                     std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "insert");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "insert");
  return impl.insert(make_batch(ns, group_id, nullptr, keys, digest_size, "insert"), n, stream,
                     true);
}

void DeviceBlockIndex::insert_async(Namespace ns, int group_id, const BlockDigest* keys,
                                    std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert_async");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "insert_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert_async", "keys");
  impl.insert(make_batch(ns, group_id, nullptr, keys, digest_size, "insert_async"), n, stream,
              false);
}

std::size_t DeviceBlockIndex::insert(Namespace ns, const std::int32_t* group_ids,
                                     const BlockDigest* keys, std::size_t n, cudaStream_t stream,
                                     std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::insert");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "insert");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "insert", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "insert");
  validate_device_pointer(group_ids, alignof(std::int32_t), "insert", "group_ids");
  impl.check_groups(group_ids, n, stream, "insert");
  return impl.insert(make_batch(ns, 0, group_ids, keys, digest_size, "insert"), n, stream, true);
}

std::size_t DeviceBlockIndex::erase(Namespace ns, int group_id, const BlockDigest* keys,
                                    std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "erase");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "erase");
  return impl.erase(make_batch(ns, group_id, nullptr, keys, digest_size, "erase"), n, stream, true);
}

void DeviceBlockIndex::erase_async(Namespace ns, int group_id, const BlockDigest* keys,
                                   std::size_t n, cudaStream_t stream, std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase_async");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "erase_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase_async", "keys");
  impl.erase(make_batch(ns, group_id, nullptr, keys, digest_size, "erase_async"), n, stream, false);
}

std::size_t DeviceBlockIndex::erase(Namespace ns, const std::int32_t* group_ids,
                                    const BlockDigest* keys, std::size_t n, cudaStream_t stream,
                                    std::size_t digest_size) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::erase");
  Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "erase");
  if (n == 0) {
    return 0;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "erase", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "erase");
  validate_device_pointer(group_ids, alignof(std::int32_t), "erase", "group_ids");
  impl.check_groups(group_ids, n, stream, "erase");
  return impl.erase(make_batch(ns, 0, group_ids, keys, digest_size, "erase"), n, stream, true);
}

void DeviceBlockIndex::contains(Namespace ns, int group_id, const BlockDigest* keys, std::size_t n,
                                std::uint8_t* out, cudaStream_t stream,
                                std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "contains");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "contains");
  validate_device_pointer(out, 1, "contains", "out");
  impl.contains(make_batch(ns, group_id, nullptr, keys, digest_size, "contains"), n, out, stream,
                true);
}

void DeviceBlockIndex::contains_async(Namespace ns, int group_id, const BlockDigest* keys,
                                      std::size_t n, std::uint8_t* out, cudaStream_t stream,
                                      std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains_async");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, group_id, "contains_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains_async", "keys");
  validate_device_pointer(out, 1, "contains_async", "out");
  impl.contains(make_batch(ns, group_id, nullptr, keys, digest_size, "contains_async"), n, out,
                stream, false);
}

void DeviceBlockIndex::contains(Namespace ns, const std::int32_t* group_ids,
                                const BlockDigest* keys, std::size_t n, std::uint8_t* out,
                                cudaStream_t stream, std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "contains");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains", "keys");
  impl.check_key_widths(keys, n, digest_size, stream, "contains");
  validate_device_pointer(group_ids, alignof(std::int32_t), "contains", "group_ids");
  validate_device_pointer(out, 1, "contains", "out");
  impl.contains(make_batch(ns, 0, group_ids, keys, digest_size, "contains"), n, out, stream, true);
}

void DeviceBlockIndex::contains_async(Namespace ns, const std::int32_t* group_ids,
                                      const BlockDigest* keys, std::size_t n, std::uint8_t* out,
                                      cudaStream_t stream, std::size_t digest_size) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::contains_async");
  const Impl& impl = live_impl(impl_);
  validate_owner(ns, 0, "contains_async");
  if (n == 0) {
    return;
  }
  validate_device_pointer(keys, alignof(BlockDigest), "contains_async", "keys");
  validate_device_pointer(group_ids, alignof(std::int32_t), "contains_async", "group_ids");
  validate_device_pointer(out, 1, "contains_async", "out");
  impl.contains(make_batch(ns, 0, group_ids, keys, digest_size, "contains_async"), n, out, stream,
                false);
}

std::size_t DeviceBlockIndex::size(cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::size");
  return static_cast<std::size_t>(live_impl(impl_).read_counters(stream, "size").live);
}

DeviceBlockIndexStats DeviceBlockIndex::stats(cudaStream_t stream) const {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::stats");
  const Impl& impl = live_impl(impl_);
  const DeviceCounters c = impl.read_counters(stream, "stats");
  DeviceBlockIndexStats s;
  s.size = static_cast<std::size_t>(c.live);
  s.used_slots = static_cast<std::size_t>(c.used);
  s.capacity = static_cast<std::size_t>(impl.table.slots());
  s.bytes = impl.table.bytes();
  return s;
}

std::size_t DeviceBlockIndex::capacity() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->table.slots()) : 0;
}

void DeviceBlockIndex::clear(cudaStream_t stream) {
  PREFIXHIT_NVTX_RANGE("DeviceBlockIndex::clear");
  Impl& impl = live_impl(impl_);
  Impl::clear_headers(impl.table, stream, "clear: clearing the bucket headers");
  check_cuda(cudaMemsetAsync(impl.counters(), 0, sizeof(DeviceCounters), stream),
             "clear: clearing the counters");
  check_cuda(cudaStreamSynchronize(stream), "clear: synchronising the stream");
  impl.used_upper = 0;
}

DeviceBlockIndexRef DeviceBlockIndex::ref() const noexcept {
  DeviceBlockIndexRef r;
  if (impl_) {
    const DeviceTable t = impl_->view();
    r.headers = t.headers;
    r.digests = t.digests;
    r.bucket_mask = t.bucket_mask;
    r.hash_key = t.hash_key;
  }
  return r;
}

const DeviceBlockIndexOptions& DeviceBlockIndex::options() const noexcept {
  static const DeviceBlockIndexOptions kMovedFrom{};
  return impl_ ? impl_->options : kMovedFrom;
}

std::uint64_t DeviceBlockIndex::hash_seed() const noexcept {
  return impl_ ? impl_->seed : 0;
}

}  // namespace prefixhit
