// DeviceBlockIndex: the GPU-resident set of (namespace, group id, digest) keys; digests of 8, 16
// or 32 bytes.
//
// Kernels (names as Nsight shows them, all in prefixhit::index_kernels):
//   contains_keys        one thread per key: hash, one 32-byte tag sector, candidate compares
//   insert_keys          one thread per key: find-or-claim with a busy marker (see insert_key)
//   erase_keys           one thread per key: find, then CAS the tag to tombstone/empty
//   find_missing_keys    marks keys absent from the table (growth planning only)
//   rehash_slots         one thread per old slot: re-places live keys into a new table
//   check_group_ids      validates per-key group ids before anything is applied
//   check_key_tails      validates narrow keys (zero bytes past the width) before anything is
//   applied
// The per-slot logic (hash, tag, buckets, compare, erase rule) is detail/index_slots.hpp, shared
// with the CPU BlockIndex and covered by its CPU tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "host/nvtx.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace index_kernels {

using detail::BucketTags;
using detail::kBucketShift;
using detail::SlotKey;
using detail::SlotPlace;

/// The table as kernels see it.
struct DeviceTable {
  std::uint8_t* tags;
  std::uint32_t* metas;
  BlockDigest* digests;
  std::uint64_t bucket_mask;
  detail::IndexHashKey hash_key;
};

/// Counters kept on the device and read back by synchronous calls.
struct DeviceCounters {
  unsigned long long live;        // live keys
  unsigned long long used;        // live keys + tombstones (+ claimed slots during an insert)
  unsigned long long call_count;  // keys inserted / erased / found missing by the last call
  unsigned long long first_bad;   // smallest index of an invalid group id or key (~0: none)
  unsigned int overflow;          // an insert found no free slot (cannot happen by construction)
  unsigned int pad;
};

/// The keys of one call: one group for all, or per-key group ids.
struct KeyBatch {
  const BlockDigest* keys;
  const std::int32_t* group_ids;  // nullptr: every key is in `group_id`
  int group_id;
  std::uint32_t ns;
  std::uint32_t width_code;  // the keys' digest width in the meta word (index_slots.hpp)
  int words;                 // 8-byte words of digest the width covers (1, 2 or 4)
  bool aligned16;            // keys can be read with 16-byte loads

  __device__ __forceinline__ bool meta_of(std::uint64_t i, std::uint32_t& meta) const {
    const int group = group_ids != nullptr ? group_ids[i] : group_id;
    if (!detail::valid_group(group)) {
      return false;
    }
    meta = detail::pack_meta(ns, group, width_code);
    return true;
  }

  __device__ __forceinline__ SlotKey key(std::uint64_t i, std::uint32_t meta) const {
    SlotKey k;
    if (aligned16) {
      const ulonglong2* p = reinterpret_cast<const ulonglong2*>(keys + i);
      const ulonglong2 lo = p[0];
      const ulonglong2 hi = p[1];
      k.w[0] = lo.x;
      k.w[1] = lo.y;
      k.w[2] = hi.x;
      k.w[3] = hi.y;
    } else {
      const unsigned long long* p = reinterpret_cast<const unsigned long long*>(keys + i);
      k.w[0] = p[0];
      k.w[1] = p[1];
      k.w[2] = p[2];
      k.w[3] = p[3];
    }
    // A narrow key is its first `words` words: the rest reads as zero (synchronous calls have
    // checked that it is; asynchronous ones cannot report an error, so they ignore the tail).
    for (int w = 1; w < 4; ++w) {
      k.w[w] = w < words ? k.w[w] : 0;
    }
    k.meta = meta;
    return k;
  }
};

__device__ __forceinline__ SlotPlace place_of(const DeviceTable& t, const SlotKey& key) {
  return detail::place_of(detail::slot_hash(key, t.hash_key), t.bucket_mask);
}

/// Sums `value` over the warp and adds it to `*counter` from one lane. Every lane of the warp
/// must call it (the kernels call it once, after their grid-stride loops).
__device__ __forceinline__ void warp_add(unsigned long long* counter, unsigned int value) {
  const unsigned int total = __reduce_add_sync(0xFFFFFFFFU, value);
  if ((threadIdx.x & 31U) == 0 && total != 0) {
    atomicAdd(counter, static_cast<unsigned long long>(total));
  }
}

/// A bucket's tags as the L2 holds them now (bypassing L1, which other SMs' atomics do not
/// update). Words are read one by one; every decision taken on a stale word is made safe by a
/// compare-and-swap on that word.
__device__ __forceinline__ BucketTags coherent_bucket_tags(const std::uint8_t* bucket_tags) {
  const ulonglong2* p = reinterpret_cast<const ulonglong2*>(bucket_tags);
  const ulonglong2 lo = __ldcg(p);
  const ulonglong2 hi = __ldcg(p + 1);
  return BucketTags{{lo.x, lo.y, hi.x, hi.y}};
}

__device__ __forceinline__ std::uint32_t tag_word(const BucketTags& t, int word) {
  // A select chain, not t.w[word >> 1]: a dynamic index would put the tags in local memory.
  const int pair = word >> 1;
  const std::uint64_t w = pair == 0 ? t.w[0] : pair == 1 ? t.w[1] : pair == 2 ? t.w[2] : t.w[3];
  return static_cast<std::uint32_t>(w >> ((word & 1) * 32));
}

__device__ __forceinline__ bool coherent_slot_equal(const DeviceTable& t, std::uint64_t slot,
                                                    const SlotKey& key) {
  const ulonglong2* p = reinterpret_cast<const ulonglong2*>(t.digests + slot);
  const ulonglong2 lo = __ldcg(p);
  const ulonglong2 hi = __ldcg(p + 1);
  const std::uint64_t stored[4] = {lo.x, lo.y, hi.x, hi.y};
  return detail::slot_words_equal(key, stored, __ldcg(t.metas + slot));
}

/// Inserts one key unless present. Returns 1 if inserted, 0 if it was present, -1 if the table
/// had no free slot on the key's whole probe sequence.
///
/// Duplicates within one batch: a thread claims a slot by CAS-ing its tag from empty to busy,
/// writes digest and meta, then publishes the real tag (release). A thread that sees a busy slot
/// waits for it to be published before deciding, and a failed CAS re-reads the bucket. Two
/// threads with the same key follow the same probe sequence and take the lowest empty slot of a
/// bucket, so the second always sees the first one's busy or published slot: a key is stored once.
/// Slots never return to empty during an insert, so a bucket seen without empties stays so.
__device__ int insert_key(const DeviceTable& t, const SlotKey& key, const SlotPlace& place) {
  for (std::uint64_t i = 0; i <= t.bucket_mask; ++i) {
    const std::uint64_t base = detail::probe_bucket(place, i, t.bucket_mask) << kBucketShift;
    while (true) {
      const BucketTags bucket = coherent_bucket_tags(t.tags + base);
      const std::uint32_t busy = detail::match_bucket(bucket, detail::kBusyTag);
      const std::uint32_t matches = detail::match_bucket(bucket, place.tag);
      if (matches != 0) {
        __threadfence();  // acquire: the digests behind these published tags are visible
        for (std::uint32_t c = matches; c != 0; c &= c - 1) {
          if (coherent_slot_equal(t, base + detail::lowest_bit(c), key)) {
            return 0;
          }
        }
      }
      if (busy != 0) {
        __nanosleep(32);  // another thread is writing a slot here: it may be this key
        continue;
      }
      const std::uint32_t empty = detail::match_bucket(bucket, detail::kEmptyTag);
      if (empty == 0) {
        break;  // full: the key is not in this bucket and goes further along the sequence
      }
      const int lane = detail::lowest_bit(empty);
      const int word = lane >> 2;
      const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
      unsigned int* word_ptr = reinterpret_cast<unsigned int*>(t.tags + base) + word;
      const unsigned int expected = tag_word(bucket, word);
      const unsigned int claimed =
          expected | (static_cast<unsigned int>(detail::kBusyTag) << shift);
      if (atomicCAS(word_ptr, expected, claimed) != expected) {
        continue;  // the bucket changed under us: look again
      }
      const std::uint64_t slot = base + static_cast<std::uint64_t>(lane);
      ulonglong2* digest = reinterpret_cast<ulonglong2*>(t.digests + slot);
      __stcg(digest, make_ulonglong2(key.w[0], key.w[1]));
      __stcg(digest + 1, make_ulonglong2(key.w[2], key.w[3]));
      __stcg(t.metas + slot, static_cast<unsigned int>(key.meta));
      __threadfence();  // release: digest and meta before the tag
      atomicXor(word_ptr, static_cast<unsigned int>(detail::kBusyTag ^ place.tag) << shift);
      return 1;
    }
  }
  return -1;
}

__global__ void __launch_bounds__(256)
    contains_keys(DeviceTable table, KeyBatch batch, std::uint64_t n, std::uint8_t* out) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint32_t meta = 0;
    bool hit = false;
    if (batch.meta_of(i, meta)) {
      const SlotKey key = batch.key(i, meta);
      hit = detail::find_slot_with<detail::DeviceSlotLoads>(table.tags, table.metas, table.digests,
                                                            table.bucket_mask, key,
                                                            place_of(table, key)) >= 0;
    }
    out[i] = static_cast<std::uint8_t>(hit);
  }
}

/// present[i] = 1 if key i is in the table; counts the absent keys into call_count.
__global__ void __launch_bounds__(256)
    find_missing_keys(DeviceTable table, KeyBatch batch, std::uint64_t n, std::uint8_t* present,
                      DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned int missing = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint32_t meta = 0;
    batch.meta_of(i, meta);  // groups were validated before
    const SlotKey key = batch.key(i, meta);
    const bool hit = detail::find_slot(table.tags, table.metas, table.digests, table.bucket_mask,
                                       key, place_of(table, key)) >= 0;
    present[i] = static_cast<std::uint8_t>(hit);
    missing += hit ? 0U : 1U;
  }
  warp_add(&counters->call_count, missing);
}

/// Inserts the batch (keys with skip[i] != 0 are left out when skip is given).
__global__ void __launch_bounds__(256)
    insert_keys(DeviceTable table, KeyBatch batch, std::uint64_t n, const std::uint8_t* skip,
                DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned int inserted = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint32_t meta = 0;
    if ((skip != nullptr && skip[i] != 0) || !batch.meta_of(i, meta)) {
      continue;
    }
    const SlotKey key = batch.key(i, meta);
    const int result = insert_key(table, key, place_of(table, key));
    if (result < 0) {
      atomicOr(&counters->overflow, 1U);
    }
    inserted += result > 0 ? 1U : 0U;
  }
  warp_add(&counters->live, inserted);
  warp_add(&counters->used, inserted);
  warp_add(&counters->call_count, inserted);
}

__global__ void __launch_bounds__(256)
    erase_keys(DeviceTable table, KeyBatch batch, std::uint64_t n, DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  unsigned int erased = 0;
  unsigned int emptied = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint32_t meta = 0;
    if (!batch.meta_of(i, meta)) {
      continue;
    }
    const SlotKey key = batch.key(i, meta);
    const SlotPlace place = place_of(table, key);
    // Erasers only turn live tags into tombstone/empty, so a plain find is exact here except
    // for slots erased concurrently, which the CAS below detects.
    const std::int64_t found =
        detail::find_slot(table.tags, table.metas, table.digests, table.bucket_mask, key, place);
    if (found < 0) {
      continue;
    }
    const auto slot = static_cast<std::uint64_t>(found);
    const std::uint64_t base = (slot >> kBucketShift) << kBucketShift;
    const int lane = static_cast<int>(slot - base);
    const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
    unsigned int* word_ptr = reinterpret_cast<unsigned int*>(table.tags + base) + (lane >> 2);
    const std::uint8_t replacement = detail::erased_tag(coherent_bucket_tags(table.tags + base));
    unsigned int current = __ldcg(word_ptr);
    while (((current >> shift) & 0xFFU) == place.tag) {
      const unsigned int desired =
          (current & ~(0xFFU << shift)) | (static_cast<unsigned int>(replacement) << shift);
      const unsigned int seen = atomicCAS(word_ptr, current, desired);
      if (seen == current) {
        ++erased;
        emptied += replacement == detail::kEmptyTag ? 1U : 0U;
        break;
      }
      current = seen;  // another byte of the word changed, or a duplicate erased this slot
    }
  }
  warp_add(&counters->call_count, erased);
  // live -= erased, used -= emptied (two's complement wrap-around on the unsigned counters).
  const unsigned int erased_total = __reduce_add_sync(0xFFFFFFFFU, erased);
  const unsigned int emptied_total = __reduce_add_sync(0xFFFFFFFFU, emptied);
  if ((threadIdx.x & 31U) == 0) {
    if (erased_total != 0) {
      atomicAdd(&counters->live, 0ULL - erased_total);
    }
    if (emptied_total != 0) {
      atomicAdd(&counters->used, 0ULL - emptied_total);
    }
  }
}

/// Re-places every live slot of `from` into the empty table `to` (keys are distinct).
__global__ void __launch_bounds__(256)
    rehash_slots(DeviceTable from, std::uint64_t slots, DeviceTable to, DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t s = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       s < slots; s += stride) {
    const std::uint8_t old_tag = from.tags[s];
    if (!detail::is_live_tag(old_tag)) {
      continue;
    }
    SlotKey key = detail::make_slot_key(from.digests[s], from.metas[s]);
    const SlotPlace place = place_of(to, key);
    bool placed = false;
    for (std::uint64_t i = 0; i <= to.bucket_mask && !placed; ++i) {
      const std::uint64_t base = detail::probe_bucket(place, i, to.bucket_mask) << kBucketShift;
      while (true) {
        const BucketTags bucket = coherent_bucket_tags(to.tags + base);
        const std::uint32_t empty = detail::match_bucket(bucket, detail::kEmptyTag);
        if (empty == 0) {
          break;
        }
        const int lane = detail::lowest_bit(empty);
        const int word = lane >> 2;
        const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
        unsigned int* word_ptr = reinterpret_cast<unsigned int*>(to.tags + base) + word;
        const unsigned int expected = tag_word(bucket, word);
        const unsigned int desired = expected | (static_cast<unsigned int>(place.tag) << shift);
        if (atomicCAS(word_ptr, expected, desired) == expected) {
          const std::uint64_t slot = base + static_cast<std::uint64_t>(lane);
          to.digests[slot] = from.digests[s];
          to.metas[slot] = from.metas[s];
          placed = true;
          break;
        }
      }
    }
    if (!placed) {
      atomicOr(&counters->overflow, 1U);
    }
  }
}

/// Records the smallest index whose digest has a nonzero word at or past `words`.
__global__ void __launch_bounds__(256)
    check_key_tails(const BlockDigest* keys, std::uint64_t n, int words, DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const auto* p = reinterpret_cast<const unsigned long long*>(keys + i);
    unsigned long long tail = 0;
    for (int w = words; w < 4; ++w) {
      tail |= p[w];
    }
    if (tail != 0) {
      atomicMin(&counters->first_bad, static_cast<unsigned long long>(i));
    }
  }
}

/// Records the smallest index whose group id is outside [0, kMaxGroups).
__global__ void __launch_bounds__(256)
    check_group_ids(const std::int32_t* group_ids, std::uint64_t n, DeviceCounters* counters) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if (!detail::valid_group(group_ids[i])) {
      atomicMin(&counters->first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// ---- launchers: return the launch status, never throw -----------------------------------------

constexpr unsigned int kThreads = 256;

inline unsigned int blocks_for(std::uint64_t n, int sm_count) {
  const std::uint64_t wanted = (n + kThreads - 1) / kThreads;
  // Enough resident blocks to saturate memory; the grid-stride loops cover the rest.
  const std::uint64_t cap = static_cast<std::uint64_t>(std::max(sm_count, 1)) * 32U;
  return static_cast<unsigned int>(std::max<std::uint64_t>(1, std::min(wanted, cap)));
}

cudaError_t launch_contains(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                            std::uint8_t* out, int sm_count, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(contains_keys, blocks_for(n, sm_count), kThreads, 0, stream)
  (table, batch, n, out);
  return cudaGetLastError();
}

cudaError_t launch_find_missing(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                                std::uint8_t* present, DeviceCounters* counters, int sm_count,
                                cudaStream_t stream) {
  PREFIXHIT_LAUNCH(find_missing_keys, blocks_for(n, sm_count), kThreads, 0, stream)
  (table, batch, n, present, counters);
  return cudaGetLastError();
}

cudaError_t launch_insert(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                          const std::uint8_t* skip, DeviceCounters* counters, int sm_count,
                          cudaStream_t stream) {
  PREFIXHIT_LAUNCH(insert_keys, blocks_for(n, sm_count), kThreads, 0, stream)
  (table, batch, n, skip, counters);
  return cudaGetLastError();
}

cudaError_t launch_erase(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                         DeviceCounters* counters, int sm_count, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(erase_keys, blocks_for(n, sm_count), kThreads, 0, stream)
  (table, batch, n, counters);
  return cudaGetLastError();
}

cudaError_t launch_rehash(const DeviceTable& from, std::uint64_t slots, const DeviceTable& to,
                          DeviceCounters* counters, int sm_count, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(rehash_slots, blocks_for(slots, sm_count), kThreads, 0, stream)
  (from, slots, to, counters);
  return cudaGetLastError();
}

cudaError_t launch_check_key_tails(const BlockDigest* keys, std::uint64_t n, int words,
                                   DeviceCounters* counters, int sm_count, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(check_key_tails, blocks_for(n, sm_count), kThreads, 0, stream)
  (keys, n, words, counters);
  return cudaGetLastError();
}

cudaError_t launch_check_groups(const std::int32_t* group_ids, std::uint64_t n,
                                DeviceCounters* counters, int sm_count, cudaStream_t stream) {
  PREFIXHIT_LAUNCH(check_group_ids, blocks_for(n, sm_count), kThreads, 0, stream)
  (group_ids, n, counters);
  return cudaGetLastError();
}

}  // namespace index_kernels

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

/// One table generation on the device.
struct TableBuffers {
  std::uint64_t buckets = 0;
  DeviceBuffer tags;
  DeviceBuffer metas;
  DeviceBuffer digests;

  std::uint64_t slots() const { return detail::slots_of_buckets(buckets); }
  std::size_t bytes() const { return tags.bytes() + metas.bytes() + digests.bytes(); }
  DeviceTable view(const detail::IndexHashKey& hash_key) const {
    return DeviceTable{static_cast<std::uint8_t*>(tags.get()),
                       static_cast<std::uint32_t*>(metas.get()),
                       static_cast<BlockDigest*>(digests.get()), buckets - 1, hash_key};
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

  TableBuffers allocate_table(std::uint64_t buckets, cudaStream_t stream) const {
    TableBuffers t;
    t.buckets = buckets;
    const std::uint64_t slots = detail::slots_of_buckets(buckets);
    t.tags = DeviceBuffer(options.allocator, slots, stream, "tags");
    t.metas = DeviceBuffer(options.allocator, slots * sizeof(std::uint32_t), stream,
                           "namespace/group words");
    t.digests = DeviceBuffer(options.allocator, slots * sizeof(BlockDigest), stream, "digests");
    check_cuda(cudaMemsetAsync(t.tags.get(), detail::kEmptyTag, slots, stream),
               "clearing new tags");
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
  const std::uint64_t wanted =
      (static_cast<std::uint64_t>(options.initial_capacity) + detail::kBucketSlots - 1) >>
      detail::kBucketShift;
  std::uint64_t buckets = 1;
  while (buckets < wanted && buckets < impl.max_buckets) {
    buckets <<= 1;
  }
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
  check_cuda(cudaMemsetAsync(impl.table.tags.get(), detail::kEmptyTag, impl.table.slots(), stream),
             "clear: clearing the tags");
  check_cuda(cudaMemsetAsync(impl.counters(), 0, sizeof(DeviceCounters), stream),
             "clear: clearing the counters");
  check_cuda(cudaStreamSynchronize(stream), "clear: synchronising the stream");
  impl.used_upper = 0;
}

DeviceBlockIndexRef DeviceBlockIndex::ref() const noexcept {
  DeviceBlockIndexRef r;
  if (impl_) {
    const DeviceTable t = impl_->view();
    r.tags = t.tags;
    r.metas = t.metas;
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
