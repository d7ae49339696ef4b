// The GPU residency index's key table (router_gpu.hpp): an open-addressing table of
// (digest words, packed namespace/group/width) -> worker-set id, at most half full. Built on the
// host (snapshot_residency) and probed by the table kernel; one hash and one probe loop for both.
#pragma once

#include <cstdint>

#include "prefixhit/detail/hd.hpp"

namespace prefixhit::detail {

/// A slot's set id when the slot is free.
inline constexpr std::uint32_t kFreeResidencySlot = 0xFFFFFFFFU;

PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t residency_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// The home slot hash of a key (its four digest words and packed meta).
PREFIXHIT_HD PREFIXHIT_FORCEINLINE std::uint64_t residency_slot_hash(const std::uint64_t* w,
                                                                     std::uint32_t meta,
                                                                     std::uint64_t seed) {
  return residency_mix(w[0] ^ seed ^ (std::uint64_t{meta} << 32)) ^
         residency_mix(w[1] + w[2] * 31 + w[3] * 131);
}

/// The set id of a key in a table `t` (members keys [4 * capacity], metas, slot_sets, mask,
/// seed), or 0 (the empty set) when absent. Every probe sequence ends at a free slot, since the
/// table is at most half full.
template <class Table>
PREFIXHIT_HD std::uint32_t residency_find_set(const Table& t, const std::uint64_t* w,
                                              std::uint32_t meta) {
  for (std::uint64_t i = residency_slot_hash(w, meta, t.seed) & t.mask;; i = (i + 1) & t.mask) {
    const std::uint32_t set = t.slot_sets[i];
    if (set == kFreeResidencySlot) {
      return 0;
    }
    const std::uint64_t* k = t.keys + 4 * i;
    if (t.metas[i] == meta && k[0] == w[0] && k[1] == w[1] && k[2] == w[2] && k[3] == w[3]) {
      return set;
    }
  }
}

}  // namespace prefixhit::detail
