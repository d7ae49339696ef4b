// The kernels of DeviceBlockIndex (names as Nsight shows them, all in prefixhit::index_kernels):
//   contains_keys        one thread per key: hash, one 16-byte load of the header's tags, a meta
//                        word from the same header, candidate digest compares
//   insert_keys          one thread per key: find-or-claim with a busy marker (see insert_key)
//   erase_keys           one thread per key: find, then CAS the tag to tombstone/empty
//   find_missing_keys    marks keys absent from the table (growth planning only)
//   rehash_slots         one thread per old slot: re-places live keys into a new table
//   check_group_ids      validates per-key group ids before anything is applied
//   check_key_tails      validates narrow keys (zero bytes past the width) before anything is
//                        applied
// and their launchers. The per-key device functions are device_index_slots.cuh; the slot logic
// is detail/index_slots.hpp, shared with the CPU BlockIndex and covered by its CPU tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/device_index_slots.cuh"

namespace prefixhit::index_kernels {

__global__ void __launch_bounds__(256)
    contains_keys(DeviceTable table, KeyBatch batch, std::uint64_t n, std::uint8_t* out) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    std::uint32_t meta = 0;
    bool hit = false;
    if (batch.meta_of(i, meta)) {
      const SlotKey key = batch.key(i, meta);
      hit = detail::find_slot_with<detail::DeviceSlotLoads>(
                table.headers, table.digests, table.bucket_mask, key, place_of(table, key)) >= 0;
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
    const bool hit = detail::find_slot(table.headers, table.digests, table.bucket_mask, key,
                                       place_of(table, key)) >= 0;
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
        detail::find_slot(table.headers, table.digests, table.bucket_mask, key, place);
    if (found < 0) {
      continue;
    }
    const auto slot = static_cast<std::uint64_t>(found);
    BucketHeader* header = table.headers + detail::bucket_of_slot(slot);
    const int lane = detail::lane_of_slot(slot);
    const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
    unsigned int* word_ptr = tag_word_ptr(header, lane);
    const std::uint8_t replacement = detail::erased_tag(coherent_bucket_tags(header));
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
    const BucketHeader& old_header = from.headers[detail::bucket_of_slot(s)];
    const int old_lane = detail::lane_of_slot(s);
    if (!detail::is_live_tag(old_header.tags[old_lane])) {
      continue;
    }
    const std::uint32_t meta = old_header.metas[old_lane];
    SlotKey key = detail::make_slot_key(from.digests[s], meta);
    const SlotPlace place = place_of(to, key);
    bool placed = false;
    for (std::uint64_t i = 0; i <= to.bucket_mask && !placed; ++i) {
      const std::uint64_t b = detail::probe_bucket(place, i, to.bucket_mask);
      BucketHeader* header = to.headers + b;
      while (true) {
        const BucketTags bucket = coherent_bucket_tags(header);
        const std::uint32_t empty = detail::match_bucket(bucket, detail::kEmptyTag);
        if (empty == 0) {
          break;
        }
        const int lane = detail::first_lane_from(empty, place.lane);
        const int word = lane >> 2;
        const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
        unsigned int* word_ptr = tag_word_ptr(header, lane);
        const unsigned int expected = tag_word(bucket, word);
        const unsigned int desired = expected | (static_cast<unsigned int>(place.tag) << shift);
        if (atomicCAS(word_ptr, expected, desired) == expected) {
          // The kernel ends before anything reads the new table, so plain stores after the
          // CAS suffice.
          to.digests[detail::slot_of(b, lane)] = from.digests[s];
          header->metas[lane] = meta;
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

}  // namespace prefixhit::index_kernels
