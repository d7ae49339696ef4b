// The device side of DeviceBlockIndex: the table as kernels see it, the keys of one call, and the
// per-key device functions of the kernels (device_index_kernels.cu): the coherent header loads
// and the claim-then-publish insert. The slot logic itself (hash, tags, buckets, compare, erase
// rule) is detail/index_slots.hpp, shared with the CPU BlockIndex.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "prefixhit/device_block_index.hpp"

namespace prefixhit::index_kernels {

using detail::BucketHeader;
using detail::BucketTags;
using detail::SlotKey;
using detail::SlotPlace;

/// The table as kernels see it.
struct DeviceTable {
  BucketHeader* headers;
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

/// A bucket's 16 tag bytes as the L2 holds them now (bypassing L1, which other SMs' atomics do
/// not update), with one 16-byte load. Every decision taken on a stale word is made safe by a
/// compare-and-swap on that word.
__device__ __forceinline__ BucketTags coherent_bucket_tags(const BucketHeader* header) {
  const ulonglong2 t = __ldcg(reinterpret_cast<const ulonglong2*>(header->tags));
  return BucketTags{{t.x, t.y}};
}

/// The 32-bit word `word` (0-2) of the header's tags: the unit of the tag CAS.
__device__ __forceinline__ std::uint32_t tag_word(const BucketTags& t, int word) {
  // A select, not t.w[word >> 1]: a dynamic index would put the tags in local memory.
  const std::uint64_t w = (word >> 1) == 0 ? t.w[0] : t.w[1];
  return static_cast<std::uint32_t>(w >> ((word & 1) * 32));
}

/// The tag word holding lane `lane`'s tag, for atomics.
__device__ __forceinline__ unsigned int* tag_word_ptr(BucketHeader* header, int lane) {
  return reinterpret_cast<unsigned int*>(header->tags) + (lane >> 2);
}

__device__ __forceinline__ bool coherent_slot_equal(const DeviceTable& t, std::uint64_t bucket,
                                                    int lane, const SlotKey& key) {
  const ulonglong2* p =
      reinterpret_cast<const ulonglong2*>(t.digests + detail::slot_of(bucket, lane));
  const ulonglong2 lo = __ldcg(p);
  const ulonglong2 hi = __ldcg(p + 1);
  const std::uint64_t stored[4] = {lo.x, lo.y, hi.x, hi.y};
  return detail::slot_words_equal(key, stored, __ldcg(&t.headers[bucket].metas[lane]));
}

/// Inserts one key unless present. Returns 1 if inserted, 0 if it was present, -1 if the table
/// had no free slot on the key's whole probe sequence.
///
/// Duplicates within one batch: a thread claims a slot by CAS-ing its tag from empty to busy,
/// writes digest and meta (the meta word in the header, beside the tags), then publishes the real
/// tag (release). A thread that sees a busy slot
/// waits for it to be published before deciding, and a failed CAS re-reads the bucket. Two
/// threads with the same key follow the same probe sequence and take the same empty slot of a
/// bucket (first_lane_from the key's preferred lane), so the second always sees the first one's
/// busy or published slot: a key is stored once.
/// Slots never return to empty during an insert, so a bucket seen without empties stays so.
__device__ inline int insert_key(const DeviceTable& t, const SlotKey& key, const SlotPlace& place) {
  for (std::uint64_t i = 0; i <= t.bucket_mask; ++i) {
    const std::uint64_t b = detail::probe_bucket(place, i, t.bucket_mask);
    BucketHeader* header = t.headers + b;
    while (true) {
      const BucketTags bucket = coherent_bucket_tags(header);
      const std::uint32_t busy = detail::match_bucket(bucket, detail::kBusyTag);
      const std::uint32_t matches = detail::match_bucket(bucket, place.tag);
      if (matches != 0) {
        __threadfence();  // acquire: the digests behind these published tags are visible
        for (std::uint32_t c = matches; c != 0; c &= c - 1) {
          if (coherent_slot_equal(t, b, detail::lowest_bit(c), key)) {
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
      const int lane = detail::first_lane_from(empty, place.lane);
      const int word = lane >> 2;
      const unsigned int shift = static_cast<unsigned int>(lane & 3) * 8U;
      unsigned int* word_ptr = tag_word_ptr(header, lane);
      const unsigned int expected = tag_word(bucket, word);
      const unsigned int claimed =
          expected | (static_cast<unsigned int>(detail::kBusyTag) << shift);
      if (atomicCAS(word_ptr, expected, claimed) != expected) {
        continue;  // the bucket changed under us: look again
      }
      const std::uint64_t slot = detail::slot_of(b, lane);
      ulonglong2* digest = reinterpret_cast<ulonglong2*>(t.digests + slot);
      __stcg(digest, make_ulonglong2(key.w[0], key.w[1]));
      __stcg(digest + 1, make_ulonglong2(key.w[2], key.w[3]));
      __stcg(&header->metas[lane], static_cast<unsigned int>(key.meta));
      __threadfence();  // release: digest and meta before the tag
      atomicXor(word_ptr, static_cast<unsigned int>(detail::kBusyTag ^ place.tag) << shift);
      return 1;
    }
  }
  return -1;
}

// ---- launchers (device_index_kernels.cu): return the launch status, never throw -------------

cudaError_t launch_contains(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                            std::uint8_t* out, int sm_count, cudaStream_t stream);
cudaError_t launch_find_missing(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                                std::uint8_t* present, DeviceCounters* counters, int sm_count,
                                cudaStream_t stream);
cudaError_t launch_insert(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                          const std::uint8_t* skip, DeviceCounters* counters, int sm_count,
                          cudaStream_t stream);
cudaError_t launch_erase(const DeviceTable& table, const KeyBatch& batch, std::uint64_t n,
                         DeviceCounters* counters, int sm_count, cudaStream_t stream);
cudaError_t launch_rehash(const DeviceTable& from, std::uint64_t slots, const DeviceTable& to,
                          DeviceCounters* counters, int sm_count, cudaStream_t stream);
cudaError_t launch_check_key_tails(const BlockDigest* keys, std::uint64_t n, int words,
                                   DeviceCounters* counters, int sm_count, cudaStream_t stream);
cudaError_t launch_check_groups(const std::int32_t* group_ids, std::uint64_t n,
                                DeviceCounters* counters, int sm_count, cudaStream_t stream);

}  // namespace prefixhit::index_kernels
