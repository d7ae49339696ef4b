// The residency index's writer: the key table and the interned worker sets, written under the
// index's exclusive lock (residency_index.cpp holds the public calls, residency_impl.hpp the
// layout).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "host/router/residency_impl.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit::detail {

/// Writes the key table and the interned sets; every method runs under the exclusive lock.
class ResidencyWriter {
 public:
  using Impl = ResidencyIndex::Impl;

  explicit ResidencyWriter(Impl& s) : s_(s) {}

  /// The hash of a set's content (its `words` 64-bit words), the key of the intern map.
  static std::uint64_t content_hash(const std::uint64_t* b, std::size_t words) {
    std::uint64_t h = 0x243F6A8885A308D3ULL;
    for (std::size_t k = 0; k < words; ++k) {
      h = Impl::mix(h ^ b[k]) + k;
    }
    return h;
  }

  /// A table capacity: the next power of two at or above n, at least 64.
  static std::size_t round_pow2(std::size_t n) {
    std::size_t c = 64;
    while (c < n) {
      c *= 2;
    }
    return c;
  }

  /// The id of the set with this content (interning it when new). Empty content is kEmptySet.
  std::uint32_t find_interned(const std::uint64_t* b) const {
    auto range = s_.intern.equal_range(content_hash(b, s_.words));
    for (auto it = range.first; it != range.second; ++it) {
      if (std::equal(b, b + s_.words, s_.bits(it->second))) {
        return it->second;
      }
    }
    return Impl::kFreeSlot;
  }

  /// Registers an existing set's content under its id.
  void intern_as(std::uint32_t id) {
    s_.intern.emplace(content_hash(s_.bits(id), s_.words), id);
    s_.set_interned[id] = 1;
  }

  std::uint32_t intern(const std::uint64_t* b) {
    if (const std::uint32_t same = find_interned(b); same != Impl::kFreeSlot) {
      return same;
    }
    std::uint32_t id = 0;
    if (!s_.free_sets.empty()) {
      id = s_.free_sets.back();
      s_.free_sets.pop_back();
    } else {
      id = static_cast<std::uint32_t>(s_.set_refs.size());
      s_.set_refs.push_back(0);
      s_.set_count.push_back(0);
      s_.set_interned.push_back(0);
      s_.set_bits.resize(s_.set_bits.size() + s_.words);
    }
    std::copy(b, b + s_.words, s_.set_bits.begin() + static_cast<std::ptrdiff_t>(id * s_.words));
    std::uint32_t count = 0;
    for (std::size_t k = 0; k < s_.words; ++k) {
      count += static_cast<std::uint32_t>(__builtin_popcountll(b[k]));
    }
    s_.set_count[id] = count;
    s_.set_interned[id] = 1;
    s_.intern.emplace(content_hash(b, s_.words), id);
    return id;
  }

  void unintern(std::uint32_t id) {
    if (s_.set_interned[id] == 0) {
      return;
    }
    auto range = s_.intern.equal_range(content_hash(s_.bits(id), s_.words));
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == id) {
        s_.intern.erase(it);
        break;
      }
    }
    s_.set_interned[id] = 0;
  }

  /// Drops a reference. A set left unreferenced is freed when the writer ends, so that no id is
  /// reused (and no memoised transition goes stale) within one call.
  void unref(std::uint32_t id) {
    if (id != Impl::kEmptySet && --s_.set_refs[id] == 0) {
      pending_free_.push_back(id);
    }
  }

  ~ResidencyWriter() {
    for (const std::uint32_t id : pending_free_) {
      if (s_.set_refs[id] == 0 && s_.set_count[id] != kFreed) {
        unintern(id);
        s_.set_count[id] = kFreed;
        s_.free_sets.push_back(id);
      }
    }
  }
  ResidencyWriter(const ResidencyWriter&) = delete;
  ResidencyWriter& operator=(const ResidencyWriter&) = delete;

  /// `set` with `column` turned on or off, memoised for the call.
  std::uint32_t with_column(std::uint32_t set, int column, bool on) {
    const auto it = memo_.find(set);
    if (it != memo_.end()) {
      return it->second;
    }
    tmp_.assign(s_.bits(set), s_.bits(set) + s_.words);
    const std::uint64_t bit = std::uint64_t{1} << (column % 64);
    if (on) {
      tmp_[static_cast<std::size_t>(column / 64)] |= bit;
    } else {
      tmp_[static_cast<std::size_t>(column / 64)] &= ~bit;
    }
    const std::uint32_t id = intern(tmp_.data());
    memo_.emplace(set, id);
    return id;
  }

  /// Makes room for `extra` new keys under a 3/4 load (rehashing drops tombstones and keys
  /// whose set became empty in clear_worker).
  void reserve(std::size_t extra) {
    if ((s_.occupied + extra) * 4 <= s_.slots.size() * 3) {
      return;
    }
    rehash(round_pow2((s_.live_keys + extra) * 2));
  }

  void rehash(std::size_t capacity) {
    Impl::SlotVector old(capacity, Impl::Slot{{0, 0, 0, 0}, 0, Impl::kFreeSlot});
    old.swap(s_.slots);
    s_.mask = capacity - 1;
    s_.occupied = 0;
    for (const Impl::Slot& slot : old) {
      if (slot.set == Impl::kFreeSlot || slot.set == Impl::kTombstone) {
        continue;
      }
      if (s_.set_count[slot.set] == 0) {
        unref(slot.set);  // left empty by clear_worker: drop the key
        continue;
      }
      std::size_t i = s_.key_hash(slot.d, slot.meta) & s_.mask;
      while (s_.slots[i].set != Impl::kFreeSlot) {
        i = (i + 1) & s_.mask;
      }
      s_.slots[i] = slot;
      ++s_.occupied;
    }
  }

  /// The key's slot, or a slot to put it in (the first tombstone on its path, else a free one).
  std::size_t locate(const std::uint64_t* w, std::uint32_t meta, bool& found) const {
    std::size_t tomb = SIZE_MAX;
    for (std::size_t i = s_.key_hash(w, meta) & s_.mask;; i = (i + 1) & s_.mask) {
      const Impl::Slot& slot = s_.slots[i];
      if (slot.set == Impl::kFreeSlot) {
        found = false;
        return tomb != SIZE_MAX ? tomb : i;
      }
      if (slot.set == Impl::kTombstone) {
        if (tomb == SIZE_MAX) {
          tomb = i;
        }
        continue;
      }
      if (slot.meta == meta && std::equal(w, w + 4, slot.d)) {
        found = true;
        return i;
      }
    }
  }

  static constexpr std::uint32_t kFreed = 0xFFFFFFFFU;

 private:
  Impl& s_;
  std::vector<std::uint32_t> pending_free_;
  std::unordered_map<std::uint32_t, std::uint32_t> memo_;
  std::vector<std::uint64_t> tmp_;
};

}  // namespace prefixhit::detail
