// The residency index: keys -> interned worker sets (see router.hpp and residency_impl.hpp).
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>

#include "host/checks.hpp"
#include "host/random_seed.hpp"
#include "host/router/residency_impl.hpp"
#include "host/router/residency_writer.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {

namespace {

using Impl = ResidencyIndex::Impl;
using detail::ResidencyWriter;

}  // namespace

double ResidencyMemory::bytes_per_pair_beyond_key() const noexcept {
  if (pairs == 0) {
    return 0.0;
  }
  // A key is its 32 digest bytes and its 4-byte (namespace, group, width) word.
  const double key_bytes = 36.0 * static_cast<double>(keys);
  return (static_cast<double>(table_bytes + set_bytes) - key_bytes) / static_cast<double>(pairs);
}

ResidencyIndex::ResidencyIndex(const ResidencyOptions& options) : impl_(std::make_unique<Impl>()) {
  if (options.num_workers < 1 || options.num_workers > kMaxWorkers) {
    throw InvalidArgument("residency: num_workers must be in [1, " + std::to_string(kMaxWorkers) +
                          "], got " + std::to_string(options.num_workers));
  }
  if (options.num_tiers < 1 || options.num_tiers > kMaxTiers) {
    throw InvalidArgument("residency: num_tiers must be in [1, " + std::to_string(kMaxTiers) +
                          "], got " + std::to_string(options.num_tiers));
  }
  Impl& s = *impl_;
  s.num_workers = options.num_workers;
  s.num_tiers = options.num_tiers;
  s.columns = s.num_workers * s.num_tiers;
  s.words = (static_cast<std::size_t>(s.columns) + 63) / 64;
  s.worker_words = (static_cast<std::size_t>(s.num_workers) + 63) / 64;
  s.seed = options.seed;
  if (s.seed == 0) {
    s.seed = detail::random_hash_seed();
  }
  clear();
  ResidencyWriter(s).rehash(
      ResidencyWriter::round_pow2(std::max<std::size_t>(options.initial_capacity, 64)));
}

ResidencyIndex::~ResidencyIndex() = default;

namespace {

void check_call(const Impl& s, WorkerId worker, Namespace ns, int group_id,
                span<const BlockDigest> keys, std::size_t digest_size, int tier) {
  if (worker >= static_cast<WorkerId>(s.num_workers)) {
    throw InvalidArgument("residency: worker " + std::to_string(worker) + " is out of range [0, " +
                          std::to_string(s.num_workers) + ")");
  }
  if (tier < 0 || tier >= s.num_tiers) {
    throw InvalidArgument("residency: tier " + std::to_string(tier) + " is out of range [0, " +
                          std::to_string(s.num_tiers) + ")");
  }
  detail::check_namespace(ns, "residency");
  if (group_id < 0 || group_id >= kMaxGroups) {
    throw InvalidArgument("residency: group id " + std::to_string(group_id) +
                          " is out of range [0, " + std::to_string(kMaxGroups) + ")");
  }
  check_digests(keys, digest_size, "residency: keys");
}

}  // namespace

std::size_t ResidencyIndex::insert(WorkerId worker, Namespace ns, int group_id,
                                   span<const BlockDigest> keys, std::size_t digest_size,
                                   int tier) {
  Impl& s = *impl_;
  check_call(s, worker, ns, group_id, keys, digest_size, tier);
  const std::unique_lock lock(s.mutex);
  ResidencyWriter writer(s);
  writer.reserve(keys.size());
  const int column = static_cast<int>(worker) * s.num_tiers + tier;
  const std::uint32_t meta = Impl::make_meta(ns, group_id, digest_size);
  std::size_t added = 0;
  for (const BlockDigest& key : keys) {
    std::uint64_t w[4];
    Impl::load_words(key, w);
    bool found = false;
    const std::size_t i = writer.locate(w, meta, found);
    Impl::Slot& slot = s.slots[i];
    const std::uint32_t old = found ? slot.set : Impl::kEmptySet;
    if (found && s.has_column(old, column)) {
      continue;
    }
    const std::uint32_t next = writer.with_column(old, column, true);
    ++s.set_refs[next];
    if (!found) {
      if (slot.set == Impl::kFreeSlot) {
        ++s.occupied;
      }
      std::copy(w, w + 4, slot.d);
      slot.meta = meta;
      ++s.live_keys;
    } else {
      if (s.set_count[old] == 0) {
        ++s.live_keys;  // a key left empty by clear_worker comes back
      }
      writer.unref(old);
    }
    slot.set = next;
    ++s.pairs;
    ++added;
  }
  return added;
}

std::size_t ResidencyIndex::erase(WorkerId worker, Namespace ns, int group_id,
                                  span<const BlockDigest> keys, std::size_t digest_size, int tier) {
  Impl& s = *impl_;
  check_call(s, worker, ns, group_id, keys, digest_size, tier);
  const std::unique_lock lock(s.mutex);
  ResidencyWriter writer(s);
  const int column = static_cast<int>(worker) * s.num_tiers + tier;
  const std::uint32_t meta = Impl::make_meta(ns, group_id, digest_size);
  std::size_t removed = 0;
  for (const BlockDigest& key : keys) {
    std::uint64_t w[4];
    Impl::load_words(key, w);
    const std::size_t i = s.find(w, meta, s.key_hash(w, meta));
    if (i == SIZE_MAX || !s.has_column(s.slots[i].set, column)) {
      continue;
    }
    Impl::Slot& slot = s.slots[i];
    const std::uint32_t old = slot.set;
    const std::uint32_t next = writer.with_column(old, column, false);
    writer.unref(old);
    if (next == Impl::kEmptySet) {
      slot.set = Impl::kTombstone;
      --s.live_keys;
    } else {
      ++s.set_refs[next];
      slot.set = next;
    }
    --s.pairs;
    ++removed;
  }
  return removed;
}

void ResidencyIndex::clear_worker(WorkerId worker) {
  Impl& s = *impl_;
  if (worker >= static_cast<WorkerId>(s.num_workers)) {
    throw InvalidArgument("residency: worker " + std::to_string(worker) + " is out of range [0, " +
                          std::to_string(s.num_workers) + ")");
  }
  const std::unique_lock lock(s.mutex);
  ResidencyWriter writer(s);
  const int first = static_cast<int>(worker) * s.num_tiers;
  for (std::uint32_t id = 1; id < s.set_refs.size(); ++id) {
    if (s.set_refs[id] == 0 || s.set_count[id] == 0) {
      continue;
    }
    std::uint32_t cleared = 0;
    for (int c = first; c < first + s.num_tiers; ++c) {
      cleared += s.has_column(id, c) ? 1U : 0U;
    }
    if (cleared == 0) {
      continue;
    }
    writer.unintern(id);
    std::uint64_t* b = s.set_bits.data() + static_cast<std::size_t>(id) * s.words;
    for (int c = first; c < first + s.num_tiers; ++c) {
      b[c / 64] &= ~(std::uint64_t{1} << (c % 64));
    }
    s.set_count[id] -= cleared;
    s.pairs -= static_cast<std::size_t>(cleared) * s.set_refs[id];
    if (s.set_count[id] == 0) {
      s.live_keys -= s.set_refs[id];  // its keys are dead until a rehash sweeps them
      continue;
    }
    // Re-intern unless another set already has this content (then this one stays a duplicate,
    // which is correct, only less shared).
    if (writer.find_interned(b) == Impl::kFreeSlot) {
      writer.intern_as(id);
    }
  }
}

void ResidencyIndex::clear() {
  Impl& s = *impl_;
  const std::unique_lock lock(s.mutex);
  std::fill(s.slots.begin(), s.slots.end(), Impl::Slot{{0, 0, 0, 0}, 0, Impl::kFreeSlot});
  s.occupied = 0;
  s.live_keys = 0;
  s.pairs = 0;
  s.set_bits.assign(s.words, 0);  // set 0: the empty set
  s.set_refs.assign(1, 0);
  s.set_count.assign(1, 0);
  s.set_interned.assign(1, 0);
  s.free_sets.clear();
  s.intern.clear();
  ResidencyWriter(s).intern_as(Impl::kEmptySet);
}

bool ResidencyIndex::contains(WorkerId worker, Namespace ns, int group_id, const BlockDigest& key,
                              std::size_t digest_size, std::uint32_t tier_mask) const {
  const Impl& s = *impl_;
  if (worker >= static_cast<WorkerId>(s.num_workers)) {
    return false;
  }
  const std::shared_lock lock(s.mutex);
  const std::uint32_t set = s.set_of(key, Impl::make_meta(ns, group_id, digest_size));
  for (int t = 0; t < s.num_tiers; ++t) {
    if (((tier_mask >> t) & 1U) != 0 &&
        s.has_column(set, static_cast<int>(worker) * s.num_tiers + t)) {
      return true;
    }
  }
  return false;
}

std::uint64_t ResidencyIndex::WorkerView::probe(int group_id, const BlockDigest* hashes,
                                                std::int64_t first, std::int64_t step,
                                                int count) const {
  const Impl& s = *index_->impl_;
  if (group_id < 0 || group_id >= kMaxGroups || ns_ > kMaxNamespace ||
      worker_ >= static_cast<WorkerId>(s.num_workers)) {
    return 0;
  }
  const std::uint32_t meta = Impl::make_meta(ns_, group_id, digest_size_);
  const std::shared_lock lock(s.mutex);
  std::uint64_t bits = 0;
  for (int k = 0; k < count; ++k) {
    const std::uint32_t set = s.set_of(hashes[first + k * step], meta);
    for (int t = 0; t < s.num_tiers; ++t) {
      if (((tier_mask_ >> t) & 1U) != 0 &&
          s.has_column(set, static_cast<int>(worker_) * s.num_tiers + t)) {
        bits |= std::uint64_t{1} << k;
        break;
      }
    }
  }
  return bits;
}

int ResidencyIndex::num_workers() const noexcept {
  return impl_->num_workers;
}
int ResidencyIndex::num_tiers() const noexcept {
  return impl_->num_tiers;
}

std::size_t ResidencyIndex::size() const {
  const std::shared_lock lock(impl_->mutex);
  return impl_->live_keys;
}

ResidencyMemory ResidencyIndex::memory() const {
  const Impl& s = *impl_;
  const std::shared_lock lock(s.mutex);
  ResidencyMemory m;
  m.keys = s.live_keys;
  m.pairs = s.pairs;
  for (std::size_t id = 1; id < s.set_refs.size(); ++id) {
    m.worker_sets += s.set_refs[id] > 0 ? 1 : 0;
  }
  m.table_bytes = s.slots.capacity() * sizeof(Impl::Slot);
  // Each interned set also costs a hash-map node (key, id, next pointer) and a bucket pointer.
  constexpr std::size_t kNodeBytes = 32;
  m.set_bytes = s.set_bits.capacity() * 8 + s.set_refs.capacity() * 4 + s.set_count.capacity() * 4 +
                s.set_interned.capacity() + s.free_sets.capacity() * 4 +
                s.intern.size() * kNodeBytes + s.intern.bucket_count() * sizeof(void*);
  return m;
}

void ResidencyIndex::blocks_stored(WorkerId worker, Namespace ns, int group_id,
                                   span<const BlockDigest> keys, std::size_t digest_size,
                                   int tier) {
  insert(worker, ns, group_id, keys, digest_size, tier);
}

void ResidencyIndex::blocks_removed(WorkerId worker, Namespace ns, int group_id,
                                    span<const BlockDigest> keys, std::size_t digest_size,
                                    int tier) {
  erase(worker, ns, group_id, keys, digest_size, tier);
}

void ResidencyIndex::all_blocks_cleared(WorkerId worker) {
  clear_worker(worker);
}

}  // namespace prefixhit
