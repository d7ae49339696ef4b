// The residency index's storage, shared by the index (residency_index.cpp) and the scorer
// (score_workers.cpp): an open-addressing key table whose slots hold a worker-set id, and the
// interned worker sets (bitsets over worker x tier columns).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "prefixhit/router.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace prefixhit {

namespace detail {

/// Allocates large arrays on 2 MiB boundaries and asks Linux for transparent huge pages: the key
/// table is read at random (tens of MB), and with 4 KiB pages every read also misses the TLB
/// (a page walk, dearer still in a VM). Small arrays use the ordinary heap.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHuge = std::size_t{1} << 21;

  HugePageAllocator() = default;
  template <class U>
  explicit HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kHuge) {
      return static_cast<T*>(::operator new(bytes));
    }
    void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
    if (p == nullptr) {
      throw std::bad_alloc();
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, (bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);  // a hint only
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHuge) {
      ::operator delete(p);
    } else {
      std::free(p);  // NOLINT(cppcoreguidelines-no-malloc): paired with aligned_alloc
    }
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const HugePageAllocator<U>& /*other*/) const noexcept {
    return false;
  }
};

}  // namespace detail

struct ResidencyIndex::Impl {
  static constexpr std::uint32_t kFreeSlot = 0xFFFFFFFFU;
  static constexpr std::uint32_t kTombstone = 0xFFFFFFFEU;
  static constexpr std::uint32_t kEmptySet = 0;  ///< set id 0: nobody; never freed

  /// 40 bytes: the digest words, (namespace, group id, width) packed, and the worker set.
  struct Slot {
    std::uint64_t d[4];
    std::uint32_t meta;
    std::uint32_t set;
  };

  int num_workers = 1;
  int num_tiers = 1;
  int columns = 1;        ///< num_workers * num_tiers
  std::size_t words = 1;  ///< 64-bit words per set
  std::size_t worker_words = 1;
  std::uint64_t seed = 0;

  using SlotVector = std::vector<Slot, detail::HugePageAllocator<Slot>>;
  SlotVector slots;
  std::size_t mask = 0;
  std::size_t occupied = 0;  ///< slots that are not free (live, dead or tombstones)
  std::size_t live_keys = 0;
  std::size_t pairs = 0;

  std::vector<std::uint64_t> set_bits;   ///< [set id * words]
  std::vector<std::uint32_t> set_refs;   ///< keys pointing at each set
  std::vector<std::uint32_t> set_count;  ///< columns in each set
  std::vector<std::uint8_t> set_interned;
  std::vector<std::uint32_t> free_sets;
  std::unordered_multimap<std::uint64_t, std::uint32_t> intern;

  mutable std::shared_mutex mutex;

  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  static std::uint32_t width_code(std::size_t digest_size) {
    return digest_size == 8 ? 1U : digest_size == 16 ? 2U : 3U;
  }
  static std::uint32_t make_meta(Namespace ns, int group_id, std::size_t digest_size) {
    return (ns << 8) | (static_cast<std::uint32_t>(group_id) << 2) | width_code(digest_size);
  }
  static void load_words(const BlockDigest& key, std::uint64_t* w) {
    std::memcpy(w, key.bytes.data(), 32);
  }
  std::uint64_t key_hash(const std::uint64_t* w, std::uint32_t meta) const {
    return mix(w[0] ^ seed ^ (std::uint64_t{meta} << 32)) ^ mix(w[1] + w[2] * 31 + w[3] * 131);
  }
  /// Slot of the key, or SIZE_MAX.
  std::size_t find(const std::uint64_t* w, std::uint32_t meta, std::uint64_t hash) const {
    for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.set == kFreeSlot) {
        return SIZE_MAX;
      }
      if (s.set != kTombstone && s.meta == meta && s.d[0] == w[0] && s.d[1] == w[1] &&
          s.d[2] == w[2] && s.d[3] == w[3]) {
        return i;
      }
    }
  }
  /// The worker set of a key (kEmptySet when absent).
  std::uint32_t set_of(const BlockDigest& key, std::uint32_t meta) const {
    std::uint64_t w[4];
    load_words(key, w);
    const std::size_t i = find(w, meta, key_hash(w, meta));
    return i == SIZE_MAX ? kEmptySet : slots[i].set;
  }
  /// Starts loading the key's first slot (a window prefetches all its keys before reading any).
  void prefetch(const BlockDigest& key, std::uint32_t meta) const {
    std::uint64_t w[4];
    load_words(key, w);
    __builtin_prefetch(&slots[key_hash(w, meta) & mask]);
  }
  const std::uint64_t* bits(std::uint32_t set) const {
    return set_bits.data() + static_cast<std::size_t>(set) * words;
  }
  bool has_column(std::uint32_t set, int column) const {
    return ((bits(set)[column / 64] >> (column % 64)) & 1U) != 0;
  }
  /// ORs the workers of `set` whose tier is in tier_mask into out[worker_words].
  void fold_workers(std::uint32_t set, std::uint32_t tier_mask, std::uint64_t* out) const {
    const std::uint64_t* b = bits(set);
    if (num_tiers == 1) {
      if ((tier_mask & 1U) != 0) {
        for (std::size_t k = 0; k < worker_words; ++k) {
          out[k] |= b[k];
        }
      }
      return;
    }
    for (std::size_t k = 0; k < words; ++k) {
      for (std::uint64_t x = b[k]; x != 0; x &= x - 1) {
        const int col = static_cast<int>(k * 64) + __builtin_ctzll(x);
        if (((tier_mask >> (col % num_tiers)) & 1U) != 0) {
          const int worker = col / num_tiers;
          out[worker / 64] |= std::uint64_t{1} << (worker % 64);
        }
      }
    }
  }
};

}  // namespace prefixhit
