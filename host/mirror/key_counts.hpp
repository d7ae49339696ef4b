// Per-key holder counts of a mirror: for each (group, digest, width) how many times each
// (rank namespace, medium) holds it. A key is present while every expected rank namespace has
// it in at least one medium (vLLM's all-namespaces rule; one namespace for vLLM streams).
//
// An open-addressing table (linear probing, seeded hash) rather than std::unordered_map: one
// allocation-free probe per block hash. An entry is one cache line (the common single-holder
// case needs no second allocation), so a probe costs one miss. Deletion shifts the entries
// after the hole back (no tombstones), so store/remove churn never forces a rehash and the
// table stays at most half full.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

/// (rank namespace index, medium id) of one holder.
struct Holder {
  std::uint16_t rank = 0;
  std::uint16_t medium = 0;
  friend bool operator==(Holder a, Holder b) noexcept {
    return a.rank == b.rank && a.medium == b.medium;
  }
};

class KeyCounts {
 public:
  struct alignas(64) Entry {
    std::uint64_t w[4] = {0, 0, 0, 0};
    std::uint32_t meta = 0;  // group | width << 8
    // Holders: the first inline (the common single-medium case), more in `more`.
    Holder first{};
    std::uint32_t first_count = 0;
    /// The applier's batch stamp: `was_present` is the key's presence before batch `epoch`.
    std::uint32_t epoch = 0;
    std::unique_ptr<std::vector<std::pair<Holder, std::uint32_t>>> more;
    std::uint8_t state = 0;  // kEmpty, kLive
    std::uint8_t ranks_present = 0;
    bool was_present = false;
  };
  static_assert(sizeof(Entry) == 64, "one entry per cache line");

  explicit KeyCounts(std::uint64_t seed) : seed_(seed | 1U) { rehash(1024); }

  /// Makes room so that `extra` more keys can be added without a rehash: entry indices stay
  /// valid until the next reserve() or drop_empty().
  void reserve(std::size_t extra) {
    // At most half full (short linear probes); growing leaves it at most a quarter full.
    if ((live_ + extra) * 2 >= slots_.size()) {
      std::size_t want = slots_.size();
      while ((live_ + extra) * 4 >= want) {
        want *= 2;
      }
      rehash(want);
    }
  }

  /// The entry of `key`, created with no holders when absent. Call reserve() first.
  std::size_t find_or_add(const EventKey& key) {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    const std::uint32_t meta = meta_of(key);
    std::size_t i = hash(w, meta) & mask_;
    for (;; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.state == kEmpty) {
        break;
      }
      if (e.meta == meta && e.w[0] == w[0] && e.w[1] == w[1] && e.w[2] == w[2] && e.w[3] == w[3]) {
        return i;
      }
    }
    Entry& e = slots_[i];
    e = Entry{};
    std::memcpy(e.w, w, sizeof w);
    e.meta = meta;
    e.state = kLive;
    ++live_;
    return i;
  }

  const Entry& at(std::size_t i) const { return slots_[i]; }

  /// Starts loading `key`'s home slot: an event's keys are prefetched together so that their
  /// cache misses overlap (the table outgrows L2 at a few ten thousand keys).
  void prefetch(const EventKey& key) const {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    __builtin_prefetch(&slots_[hash(w, meta_of(key)) & mask_], 0, 3);
  }

  /// The entry of `key`, or SIZE_MAX.
  std::size_t find(const EventKey& key) const {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    const std::uint32_t meta = meta_of(key);
    for (std::size_t i = hash(w, meta) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.state == kEmpty) {
        return SIZE_MAX;
      }
      if (e.meta == meta && e.w[0] == w[0] && e.w[1] == w[1] && e.w[2] == w[2] && e.w[3] == w[3]) {
        return i;
      }
    }
  }

  Entry& at(std::size_t i) { return slots_[i]; }

  /// Adds `delta` (+1 or -1) to a holder's count, clamped at 0. Returns false when a removal
  /// found no such holder (nothing changes then).
  bool add(std::size_t i, Holder h, int delta) {
    Entry& e = slots_[i];
    std::uint32_t* count = nullptr;
    if (e.first_count > 0 && e.first == h) {
      count = &e.first_count;
    } else if (e.more) {
      for (auto& [holder, c] : *e.more) {
        if (holder == h) {
          count = &c;
          break;
        }
      }
    }
    if (count == nullptr) {
      if (delta < 0) {
        return false;
      }
      if (e.first_count == 0) {
        e.first = h;
        count = &e.first_count;
      } else {
        if (!e.more) {
          e.more = std::make_unique<std::vector<std::pair<Holder, std::uint32_t>>>();
        }
        e.more->emplace_back(h, 0);
        count = &e.more->back().second;
      }
    }
    if (delta > 0) {
      ++*count;
    } else {
      --*count;
    }
    if (e.more) {  // drop empty holders so that lists stay short
      auto& v = *e.more;
      for (std::size_t k = 0; k < v.size();) {
        if (v[k].second == 0) {
          v[k] = v.back();
          v.pop_back();
        } else {
          ++k;
        }
      }
      if (e.first_count == 0 && !v.empty()) {
        e.first = v.back().first;
        e.first_count = v.back().second;
        v.pop_back();
      }
    }
    e.ranks_present = static_cast<std::uint8_t>(count_ranks(e));
    return true;
  }

  /// Drops the entries among `indices` that have no holders left (duplicates allowed). Entry
  /// indices are invalid afterwards: deletion moves entries.
  void drop_empty(const std::vector<std::size_t>& indices) {
    doomed_.clear();
    for (const std::size_t i : indices) {
      const Entry& e = slots_[i];
      if (e.state == kLive && e.first_count == 0 && (!e.more || e.more->empty())) {
        doomed_.push_back(key_of(e));
        // The backward shift reads the slots after the hole, which no probe touched: start
        // loading them now so that the misses of all the deletions overlap.
        __builtin_prefetch(&slots_[(i + 1) & mask_], 0, 3);
        __builtin_prefetch(&slots_[(i + 2) & mask_], 0, 3);
      }
    }
    for (const EventKey& key : doomed_) {
      const std::size_t i = find(key);
      if (i != SIZE_MAX) {
        erase_at(i);
      }
    }
  }

  /// Visits every live entry.
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].state == kLive) {
        f(i, slots_[i]);
      }
    }
  }

  void clear() {
    slots_.clear();
    live_ = 0;
    rehash(1024);
  }

  static EventKey key_of(const Entry& e) {
    EventKey k;
    std::memcpy(k.bytes.data(), e.w, sizeof e.w);
    k.group_id = static_cast<std::int32_t>(e.meta & 0xFFU);
    k.digest_size = static_cast<std::uint8_t>(e.meta >> 8);
    return k;
  }

 private:
  static constexpr std::uint8_t kEmpty = 0;
  static constexpr std::uint8_t kLive = 1;

  /// Backward-shift deletion: move each later entry of the cluster into the hole when its home
  /// slot is not after the hole (cyclically), so that every probe still finds it.
  void erase_at(std::size_t hole) {
    for (std::size_t j = (hole + 1) & mask_; slots_[j].state != kEmpty; j = (j + 1) & mask_) {
      const std::size_t home = hash(slots_[j].w, slots_[j].meta) & mask_;
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = std::move(slots_[j]);
        hole = j;
      }
    }
    slots_[hole] = Entry{};
    --live_;
  }

  static std::uint32_t meta_of(const EventKey& key) {
    return static_cast<std::uint32_t>(key.group_id & 0xFF) |
           (static_cast<std::uint32_t>(key.digest_size) << 8);
  }

  std::uint64_t hash(const std::uint64_t (&w)[4], std::uint32_t meta) const {
    // Digests are uniform, but a hostile publisher may choose them: mix with a private seed.
    std::uint64_t x = (w[0] ^ seed_) * 0x9E3779B97F4A7C15ULL;
    x ^= (w[1] + meta) * 0xC2B2AE3D27D4EB4FULL;
    x ^= w[2] * 0x165667B19E3779F9ULL ^ w[3];
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 32);
  }

  static std::uint16_t count_ranks(const Entry& e) {
    // Distinct ranks with a positive count; lists are short (ranks x media).
    std::uint16_t seen[64];
    std::size_t n = 0;
    auto note = [&](Holder h) {
      for (std::size_t k = 0; k < n; ++k) {
        if (seen[k] == h.rank) {
          return;
        }
      }
      if (n < 64) {
        seen[n++] = h.rank;
      }
    };
    if (e.first_count > 0) {
      note(e.first);
    }
    if (e.more) {
      for (const auto& [h, c] : *e.more) {
        if (c > 0) {
          note(h);
        }
      }
    }
    return static_cast<std::uint16_t>(n);
  }

  void rehash(std::size_t slots) {
    std::vector<Entry> old = std::move(slots_);
    slots_ = std::vector<Entry>(slots);
    mask_ = slots - 1;
    live_ = 0;
    for (Entry& e : old) {
      if (e.state != kLive) {
        continue;
      }
      std::size_t i = hash(e.w, e.meta) & mask_;
      while (slots_[i].state != kEmpty) {
        i = (i + 1) & mask_;
      }
      slots_[i] = std::move(e);
      ++live_;
    }
  }

  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
  std::size_t live_ = 0;
  std::vector<EventKey> doomed_;
  std::uint64_t seed_;
};

}  // namespace prefixhit::mirror
