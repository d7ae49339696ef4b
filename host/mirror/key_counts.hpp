// Per-key holder counts of a mirror: for each (group, digest, width) how many times each
// (rank namespace, medium) holds it. A key is present while every expected rank namespace has
// it in at least one medium (vLLM's all-namespaces rule; one namespace for vLLM streams).
//
// An open-addressing table (linear probing, seeded hash) rather than std::unordered_map: one
// allocation-free probe per block hash. Probes and deletions walk a dense array of 4-byte tags
// (32 bits of the hash; the home slot is in them), 16 per cache line, and read an entry only
// on a tag match or a move. An entry is one trivially copyable cache line (the common
// single-holder case needs nothing more; extra holders live in a side pool). Deletion shifts
// the entries after the hole back (no tombstones), so store/remove churn never forces a
// rehash and the table stays at most three quarters full.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
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
  /// One key's holders. Trivially copyable (extra holders live in a side pool), so that the
  /// backward shift of a deletion is a plain copy.
  struct alignas(64) Entry {
    std::uint64_t w[4];
    std::uint32_t meta;  // group | width << 8
    // Holders: the first inline (the common single-medium case), more in the pool.
    Holder first;
    std::uint32_t first_count;
    /// The applier's batch stamp: `was_present` is the key's presence before batch `epoch`.
    std::uint32_t epoch;
    std::uint32_t more;  // 1 + index into more_, 0 when none
    std::uint8_t ranks_present;
    bool was_present;
  };
  static_assert(sizeof(Entry) == 64, "one entry per cache line");
  static_assert(std::is_trivially_copyable_v<Entry>);

  /// The most a table is filled, kMaxLoadNum / kMaxLoadDen: linear probes stay short (a probe's
  /// tags share one or two cache lines) at 2/3 of the memory of a table kept half full.
  static constexpr std::size_t kMaxLoadNum = 3;
  static constexpr std::size_t kMaxLoadDen = 4;

  explicit KeyCounts(std::uint64_t seed) : seed_(seed | 1U) { rehash(1024); }

  /// Makes room so that `extra` more keys can be added without a rehash: entry indices stay
  /// valid until the next reserve() or drop_empty().
  void reserve(std::size_t extra) {
    // At most kMaxLoad full; a growth doubles until the table is at most half of that.
    if ((live_ + extra) * kMaxLoadDen >= tags_.size() * kMaxLoadNum) {
      std::size_t want = tags_.size();
      while ((live_ + extra) * kMaxLoadDen * 2 >= want * kMaxLoadNum) {
        want *= 2;
      }
      rehash(want);
    }
  }

  /// The key's hash, for the *_hashed calls (computed once per key by the applier).
  std::uint64_t hash_of(const EventKey& key) const {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    return hash(w, meta_of(key));
  }

  /// The entry of `key`, created with no holders when absent. Call reserve() first.
  std::size_t find_or_add(const EventKey& key) { return find_or_add_hashed(key, hash_of(key)); }

  std::size_t find_or_add_hashed(const EventKey& key, std::uint64_t h) {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    const std::uint32_t meta = meta_of(key);
    const std::uint32_t tag = tag_of(h);
    std::size_t i = tag & mask_;
    for (;; i = (i + 1) & mask_) {
      const std::uint32_t t = tags_[i];
      if (t == 0) {
        break;
      }
      if (t == tag && same(slots_[i], w, meta)) {
        return i;
      }
    }
    tags_[i] = tag;
    Entry& e = slots_[i];
    std::memcpy(e.w, w, sizeof w);
    e.meta = meta;
    e.first = Holder{};
    e.first_count = 0;
    e.epoch = 0;
    e.more = 0;
    e.ranks_present = 0;
    e.was_present = false;
    ++live_;
    return i;
  }

  const Entry& at(std::size_t i) const { return slots_[i]; }

  /// Starts loading the home slot of a key of hash `h` (its tag and its entry): a run's keys
  /// are prefetched ahead so that their cache misses overlap.
  void prefetch(std::uint64_t h) const {
    const std::size_t i = tag_of(h) & mask_;
    __builtin_prefetch(&tags_[i], 1, 3);
    __builtin_prefetch(&slots_[i], 1, 3);
  }
  void prefetch(const EventKey& key) const { prefetch(hash_of(key)); }

  /// The entry of `key`, or SIZE_MAX.
  std::size_t find(const EventKey& key) const { return find_hashed(key, hash_of(key)); }

  std::size_t find_hashed(const EventKey& key, std::uint64_t h) const {
    std::uint64_t w[4];
    std::memcpy(w, key.bytes.data(), sizeof w);
    const std::uint32_t meta = meta_of(key);
    const std::uint32_t tag = tag_of(h);
    for (std::size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const std::uint32_t t = tags_[i];
      if (t == 0) {
        return SIZE_MAX;
      }
      if (t == tag && same(slots_[i], w, meta)) {
        return i;
      }
    }
  }

  Entry& at(std::size_t i) { return slots_[i]; }

  /// Adds `delta` (+1 or -1) to a holder's count, clamped at 0. Returns false when a removal
  /// found no such holder (nothing changes then).
  bool add(std::size_t i, Holder h, int delta) {
    Entry& e = slots_[i];
    if (e.more == 0) {  // the common case: at most one holder, no pool
      if (e.first_count > 0 && e.first == h) {
        e.first_count = delta > 0 ? e.first_count + 1 : e.first_count - 1;
        e.ranks_present = e.first_count > 0 ? 1 : 0;
        return true;
      }
      if (e.first_count == 0) {
        if (delta < 0) {
          return false;
        }
        e.first = h;
        e.first_count = 1;
        e.ranks_present = 1;
        return true;
      }
    }
    return add_slow(e, h, delta);
  }

  /// Drops the entries among `indices` that have no holders left (duplicates allowed). Entry
  /// indices are invalid afterwards: deletion moves entries.
  void drop_empty(const std::vector<std::size_t>& indices) {
    begin_drops();
    for (const std::size_t i : indices) {
      note_if_empty(i);
    }
    drop_noted();
  }

  /// drop_empty() in two steps, so that the emptiness test can run while the entries are in
  /// cache: begin_drops(), note_if_empty() for each candidate, then drop_noted() once no
  /// entry changes any more.
  void begin_drops() { doomed_.clear(); }
  void note_if_empty(std::size_t i) {
    if (tags_[i] != 0 && empty_entry(i)) {
      doomed_.push_back(tags_[i]);
    }
  }
  void drop_noted() {
    // A deletion moves entries: each doomed one is found again by its tag (relocate()).
    constexpr std::size_t kAhead = 8;
    for (std::size_t k = 0; k < doomed_.size(); ++k) {
      if (k + kAhead < doomed_.size()) {
        __builtin_prefetch(&slots_[doomed_[k + kAhead] & mask_], 0, 3);
      }
      const std::size_t i = relocate(doomed_[k]);
      if (i != SIZE_MAX) {
        erase_at(i);
      }
    }
  }

  /// Visits every live entry.
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i < tags_.size(); ++i) {
      if (tags_[i] != 0) {
        f(i, slots_[i]);
      }
    }
  }

  void clear() {
    tags_.clear();
    slots_.clear();
    live_ = 0;
    more_.clear();
    free_more_.clear();
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
  using HolderList = std::vector<std::pair<Holder, std::uint32_t>>;

  static bool same(const Entry& e, const std::uint64_t (&w)[4], std::uint32_t meta) {
    return e.meta == meta && e.w[0] == w[0] && e.w[1] == w[1] && e.w[2] == w[2] && e.w[3] == w[3];
  }

  /// Non-zero (0 marks an empty slot); its low bits are the home slot (mask_ < 2^31).
  static std::uint32_t tag_of(std::uint64_t h) {
    return static_cast<std::uint32_t>(h) | 0x80000000U;
  }

  bool empty_entry(std::size_t i) const {
    const Entry& e = slots_[i];
    return e.first_count == 0 && (e.more == 0 || more_[e.more - 1].empty());
  }

  /// Where a doomed entry of tag `tag` is now: deletions only move entries back towards their home,
  /// and an entry is always reached by probing from its home, so probe for an empty entry with that
  /// tag. Another empty entry of the same tag may be found instead (then the doomed one was
  /// already dropped, a duplicate): dropping any empty entry is harmless, since an absent key
  /// and a key with no holders mean the same. SIZE_MAX when none is left.
  std::size_t relocate(std::uint32_t tag) const {
    for (std::size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const std::uint32_t t = tags_[i];
      if (t == 0) {
        return SIZE_MAX;
      }
      if (t == tag && empty_entry(i)) {
        return i;
      }
    }
  }

  bool add_slow(Entry& e, Holder h, int delta) {
    std::uint32_t* count = nullptr;
    if (e.first_count > 0 && e.first == h) {
      count = &e.first_count;
    } else if (e.more != 0) {
      for (auto& [holder, c] : more_[e.more - 1]) {
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
        if (e.more == 0) {
          e.more = take_list();
        }
        more_[e.more - 1].emplace_back(h, 0);
        count = &more_[e.more - 1].back().second;
      }
    }
    if (delta > 0) {
      ++*count;
    } else {
      --*count;
    }
    if (e.more != 0) {  // drop empty holders so that lists stay short
      HolderList& v = more_[e.more - 1];
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

  std::uint32_t take_list() {
    if (!free_more_.empty()) {
      const std::uint32_t m = free_more_.back();
      free_more_.pop_back();
      return m;
    }
    more_.emplace_back();
    return static_cast<std::uint32_t>(more_.size());
  }

  /// Backward-shift deletion: move each later entry of the cluster into the hole when its home
  /// slot is not after the hole (cyclically), so that every probe still finds it. Homes come
  /// from the tags: the entries themselves are read only when they move.
  void erase_at(std::size_t hole) {
    if (slots_[hole].more != 0) {
      more_[slots_[hole].more - 1].clear();
      free_more_.push_back(slots_[hole].more);
    }
    for (std::size_t j = (hole + 1) & mask_; tags_[j] != 0; j = (j + 1) & mask_) {
      const std::size_t home = tags_[j] & mask_;
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        tags_[hole] = tags_[j];
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    tags_[hole] = 0;
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

  std::uint16_t count_ranks(const Entry& e) const {
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
    if (e.more != 0) {
      for (const auto& [h, c] : more_[e.more - 1]) {
        if (c > 0) {
          note(h);
        }
      }
    }
    return static_cast<std::uint16_t>(n);
  }

  void rehash(std::size_t slots) {
    std::vector<std::uint32_t> old_tags = std::move(tags_);
    std::vector<Entry> old = std::move(slots_);
    tags_.assign(slots, 0);
    slots_ = std::vector<Entry>(slots);
    mask_ = slots - 1;
    for (std::size_t k = 0; k < old_tags.size(); ++k) {
      if (old_tags[k] == 0) {
        continue;
      }
      std::size_t i = old_tags[k] & mask_;
      while (tags_[i] != 0) {
        i = (i + 1) & mask_;
      }
      tags_[i] = old_tags[k];
      slots_[i] = old[k];
    }
  }

  std::vector<std::uint32_t> tags_;  // per slot: 0 empty, else tag_of(hash)
  std::vector<Entry> slots_;
  std::size_t mask_ = 0;
  std::size_t live_ = 0;
  std::vector<HolderList> more_;  // extra holders, per entry that has them
  std::vector<std::uint32_t> free_more_;
  std::vector<std::uint32_t> doomed_;  // tags of the entries to drop
  std::uint64_t seed_;
};

}  // namespace prefixhit::mirror
