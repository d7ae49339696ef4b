// The capacity policy of the block indexes, shared by the CPU BlockIndex and the CUDA
// DeviceBlockIndex: the table size of a bucket count, the load limit, and the bucket count a
// rehash grows to. Host code; the slot layout it counts is detail/index_slots.hpp.
#pragma once

#include <cstdint>

#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::detail {

/// Slots of a table of `buckets` buckets.
inline constexpr std::uint64_t slots_of_buckets(std::uint64_t buckets) {
  return buckets * kBucketSlots;
}

/// Bytes of a table of `slots` slots: a 64-byte header per bucket and a digest per slot
/// (37.33 bytes per slot, 46.7 per key at load 0.8).
inline constexpr std::uint64_t table_bytes_of_slots(std::uint64_t slots) {
  return slots / kBucketSlots * sizeof(BucketHeader) + slots * sizeof(BlockDigest);
}

/// The power-of-two bucket count that holds at least `slots` slots (>= 1), capped at `max_buckets`.
inline std::uint64_t buckets_for_slots(std::uint64_t slots, std::uint64_t max_buckets) {
  const std::uint64_t wanted = (slots + kBucketSlots - 1) / kBucketSlots;
  std::uint64_t buckets = 1;
  while (buckets < wanted && buckets < max_buckets) {
    buckets <<= 1;
  }
  return buckets;
}

/// The most live keys a table of `slots` slots may hold at `max_load_factor`.
inline std::uint64_t load_limit(std::uint64_t slots, double max_load_factor) {
  return static_cast<std::uint64_t>(static_cast<double>(slots) * max_load_factor);
}

/// The smallest power-of-two bucket count whose load limit is at least `keys` (>= 1 bucket).
inline std::uint64_t buckets_for_keys(std::uint64_t keys, double max_load_factor) {
  std::uint64_t buckets = 1;
  while (load_limit(slots_of_buckets(buckets), max_load_factor) < keys) {
    buckets <<= 1;
  }
  return buckets;
}

/// The largest power-of-two bucket count within `max_slots` slots (0: unbounded => 2^58).
inline std::uint64_t max_buckets_for(std::uint64_t max_slots) {
  if (max_slots == 0) {
    return std::uint64_t{1} << 58;
  }
  std::uint64_t buckets = 1;
  // Capped at 2^58 buckets: far past it the slot count (buckets * 12) would wrap around.
  while (buckets < (std::uint64_t{1} << 58) && slots_of_buckets(buckets << 1) <= max_slots) {
    buckets <<= 1;
  }
  return buckets;
}

/// The bucket count a rehash should produce so that `live` keys fit: at least the current one,
/// and at least double it when growing, so n inserts cost O(n) rehash work in total. Returns 0
/// when `live` keys cannot fit under `max_buckets`.
inline std::uint64_t plan_buckets(std::uint64_t live, std::uint64_t current_buckets,
                                  std::uint64_t max_buckets, double max_load_factor) {
  const std::uint64_t needed = buckets_for_keys(live, max_load_factor);
  if (needed > max_buckets) {
    return 0;
  }
  if (needed <= current_buckets) {
    return current_buckets;  // a same-size rehash drops the tombstones
  }
  const std::uint64_t doubled = current_buckets << 1;
  std::uint64_t target = needed > doubled ? needed : doubled;
  return target > max_buckets ? max_buckets : target;
}

}  // namespace prefixhit::detail
