// The resident CPU block index: open addressing over 12-slot buckets, each with a 64-byte header
// line of tags and meta words, using the slot logic shared with the GPU index
// (detail/index_slots.hpp).
#include "prefixhit/block_index.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <vector>

#include "host/block_index_impl.hpp"
#include "host/block_index_table.hpp"
#include "host/probes.hpp"
#include "host/random_seed.hpp"
#include "host/scratch_pool.hpp"
#include "prefixhit/detail/index_capacity.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

namespace detail {
namespace {
std::atomic<std::uint64_t> g_planned_lookup_min_bytes{kPlannedLookupMinBytes};
}  // namespace

std::uint64_t planned_lookup_min_bytes() noexcept {
  return g_planned_lookup_min_bytes.load(std::memory_order_relaxed);
}
void set_planned_lookup_min_bytes(std::uint64_t bytes) noexcept {
  g_planned_lookup_min_bytes.store(bytes, std::memory_order_relaxed);
}
}  // namespace detail

static_assert(kMaxNamespace == detail::kIndexMaxNamespace, "namespace width must agree");

namespace {

using cpu_index::allocate_table;
using cpu_index::clear_headers;
using detail::kBucketSlots;
using detail::SlotKey;

void validate_key_owner(Namespace ns, std::int64_t group_id, const char* call) {
  if (!detail::valid_namespace(ns)) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": namespace " + std::to_string(ns) +
                          " exceeds the 24-bit maximum " + std::to_string(kMaxNamespace));
  }
  if (!detail::valid_group(group_id)) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": group id " +
                          std::to_string(group_id) + " is outside [0, " +
                          std::to_string(kMaxGroups) + ")");
  }
}

void validate_group_ids(Namespace ns, span<const std::int32_t> group_ids, std::size_t keys,
                        const char* call) {
  if (group_ids.size() != keys) {
    throw InvalidArgument(std::string("BlockIndex::") + call + ": " +
                          std::to_string(group_ids.size()) + " group ids for " +
                          std::to_string(keys) + " keys");
  }
  validate_key_owner(ns, 0, call);
  for (std::size_t i = 0; i < group_ids.size(); ++i) {
    if (!detail::valid_group(group_ids[i])) {
      throw InvalidArgument(std::string("BlockIndex::") + call + ": group_ids[" +
                            std::to_string(i) + "] = " + std::to_string(group_ids[i]) +
                            " is outside [0, " + std::to_string(kMaxGroups) + ")");
    }
  }
}

template <class ImplPtr>
auto& live_impl(const ImplPtr& impl) {
  if (!impl) {
    throw InvalidArgument("BlockIndex: this index was moved from");
  }
  return *impl;
}

}  // namespace

BlockIndex::BlockIndex() : BlockIndex(BlockIndexOptions{}) {}

BlockIndex::BlockIndex(const BlockIndexOptions& options) : impl_(std::make_unique<Impl>()) {
  // A factor so small that no table holds one key would make every insert grow forever.
  if (!(options.max_load_factor >= kMinMaxLoadFactor && options.max_load_factor <= 0.95)) {
    throw InvalidArgument("BlockIndexOptions.max_load_factor must be in [" +
                          std::to_string(kMinMaxLoadFactor) + ", 0.95], got " +
                          std::to_string(options.max_load_factor));
  }
  if (options.max_capacity != 0 && options.max_capacity < static_cast<std::size_t>(kBucketSlots)) {
    throw InvalidArgument("BlockIndexOptions.max_capacity must be 0 (unbounded) or at least " +
                          std::to_string(kBucketSlots) + " slots, got " +
                          std::to_string(options.max_capacity));
  }
  // Slot counts near 2^64 overflow the bucket arithmetic; no machine holds 2^40 slots anyway.
  if (static_cast<std::uint64_t>(options.max_capacity) > kMaxIndexSlots) {
    throw InvalidArgument("BlockIndexOptions.max_capacity must be at most 2^40 slots (" +
                          std::to_string(kMaxIndexSlots) + "; 0 is unbounded), got " +
                          std::to_string(options.max_capacity));
  }
  // A request for more slots than any machine holds is a mistake, not a reason to wrap around
  // to a tiny table.
  constexpr std::uint64_t kMaxInitialSlots = kMaxIndexSlots;
  if (static_cast<std::uint64_t>(options.initial_capacity) > kMaxInitialSlots) {
    throw CapacityExceeded("BlockIndex cannot allocate " +
                           std::to_string(options.initial_capacity) +
                           " slots: initial_capacity is above the 2^40-slot limit");
  }
  impl_->options = options;
  impl_->seed = options.seed != 0 ? options.seed : detail::random_hash_seed();
  impl_->hash_key = detail::checked_hash_key(impl_->seed);
  impl_->max_buckets = detail::max_buckets_for(options.max_capacity);
  impl_->table = allocate_table(detail::buckets_for_slots(
      static_cast<std::uint64_t>(options.initial_capacity), impl_->max_buckets));
  impl_->publish_counts();
}

BlockIndex::~BlockIndex() = default;
BlockIndex::BlockIndex(BlockIndex&&) noexcept = default;
BlockIndex& BlockIndex::operator=(BlockIndex&&) noexcept = default;

std::size_t BlockIndex::insert(Namespace ns, int group_id, span<const BlockDigest> keys,
                               std::size_t digest_size) {
  validate_key_owner(ns, group_id, "insert");
  check_digests(keys, digest_size, "BlockIndex::insert: keys");
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  return live_impl(impl_).insert_many(
      keys.size(), [&](std::size_t i) { return detail::make_slot_key(keys[i], meta); },
      keys.data());
}

std::size_t BlockIndex::insert(Namespace ns, span<const std::int32_t> group_ids,
                               span<const BlockDigest> keys, std::size_t digest_size) {
  validate_group_ids(ns, group_ids, keys.size(), "insert");
  check_digests(keys, digest_size, "BlockIndex::insert: keys");
  const std::uint32_t code = detail::digest_width_code(digest_size);
  return live_impl(impl_).insert_many(
      keys.size(),
      [&](std::size_t i) {
        return detail::make_slot_key(keys[i], detail::pack_meta(ns, group_ids[i], code));
      },
      keys.data());
}

std::size_t BlockIndex::erase(Namespace ns, int group_id, span<const BlockDigest> keys,
                              std::size_t digest_size) {
  validate_key_owner(ns, group_id, "erase");
  check_digests(keys, digest_size, "BlockIndex::erase: keys");
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  return live_impl(impl_).erase_many(
      keys.size(), [&](std::size_t i) { return detail::make_slot_key(keys[i], meta); });
}

std::size_t BlockIndex::erase(Namespace ns, span<const std::int32_t> group_ids,
                              span<const BlockDigest> keys, std::size_t digest_size) {
  validate_group_ids(ns, group_ids, keys.size(), "erase");
  check_digests(keys, digest_size, "BlockIndex::erase: keys");
  const std::uint32_t code = detail::digest_width_code(digest_size);
  return live_impl(impl_).erase_many(keys.size(), [&](std::size_t i) {
    return detail::make_slot_key(keys[i], detail::pack_meta(ns, group_ids[i], code));
  });
}

void BlockIndex::contains(Namespace ns, int group_id, span<const BlockDigest> keys,
                          std::uint8_t* out, std::size_t digest_size) const {
  validate_key_owner(ns, group_id, "contains");
  check_digests(keys, digest_size, "BlockIndex::contains: keys");
  if (keys.empty()) {
    return;
  }
  if (out == nullptr) {
    throw InvalidArgument("BlockIndex::contains: out is null for " + std::to_string(keys.size()) +
                          " keys");
  }
  const std::uint32_t meta =
      detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size));
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  impl.lookup_many(
      keys.size(),
      [&](std::size_t i) {
        return Impl::KeyRef{&keys[i], meta};
      },
      out);
}

void BlockIndex::contains(Namespace ns, span<const std::int32_t> group_ids,
                          span<const BlockDigest> keys, std::uint8_t* out,
                          std::size_t digest_size) const {
  validate_group_ids(ns, group_ids, keys.size(), "contains");
  check_digests(keys, digest_size, "BlockIndex::contains: keys");
  if (keys.empty()) {
    return;
  }
  if (out == nullptr) {
    throw InvalidArgument("BlockIndex::contains: out is null for " + std::to_string(keys.size()) +
                          " keys");
  }
  const std::uint32_t code = detail::digest_width_code(digest_size);
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  impl.lookup_many(
      keys.size(),
      [&](std::size_t i) {
        return Impl::KeyRef{&keys[i], detail::pack_meta(ns, group_ids[i], code)};
      },
      out);
}

bool BlockIndex::contains(Namespace ns, int group_id, const BlockDigest& key,
                          std::size_t digest_size) const {
  validate_key_owner(ns, group_id, "contains");
  check_digests(span<const BlockDigest>(&key, 1), digest_size, "BlockIndex::contains: key");
  const SlotKey slot_key = detail::make_slot_key(
      key, detail::pack_meta(ns, group_id, detail::digest_width_code(digest_size)));
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  return impl.find(slot_key) >= 0;
}

std::size_t BlockIndex::size() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->live_mirror.load(std::memory_order_relaxed)) : 0;
}

std::size_t BlockIndex::capacity() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->capacity_mirror.load(std::memory_order_relaxed))
               : 0;
}

std::size_t BlockIndex::used_slots() const noexcept {
  return impl_ ? static_cast<std::size_t>(impl_->used_mirror.load(std::memory_order_relaxed)) : 0;
}

void BlockIndex::clear() {
  Impl& impl = live_impl(impl_);
  std::unique_lock<std::shared_mutex> lock(impl.mutex);
  clear_headers(impl.table);
  impl.live = 0;
  impl.tombstones = 0;
  impl.publish_counts();
}

const BlockIndexOptions& BlockIndex::options() const noexcept {
  static const BlockIndexOptions kMovedFrom{};
  return impl_ ? impl_->options : kMovedFrom;
}

std::uint64_t BlockIndex::hash_seed() const noexcept {
  return impl_ ? impl_->seed : 0;
}

void BlockIndex::for_each(
    const std::function<void(Namespace, int, const BlockDigest&)>& visit) const {
  for_each_key([&](Namespace ns, int group_id, std::size_t /*digest_size*/,
                   const BlockDigest& key) { visit(ns, group_id, key); });
}

void BlockIndex::for_each_key(
    const std::function<void(Namespace, int, std::size_t, const BlockDigest&)>& visit) const {
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  Impl::for_each_live_slot(impl.table, [&](std::uint64_t /*bucket*/, int /*lane*/,
                                           std::uint32_t meta, const BlockDigest& digest) {
    visit(detail::meta_namespace(meta), detail::meta_group(meta), detail::meta_digest_size(meta),
          digest);
  });
}

const char* BlockIndex::slot_hash_form() noexcept {
#if PREFIXHIT_SLOT_HASH_AESNI
  return "aes-ni";
#elif PREFIXHIT_SLOT_HASH_ARM_AES
  return "armv8-aes";
#else
  return "table";
#endif
}

BlockIndex::Layout BlockIndex::layout() const {
  const Impl& impl = live_impl(impl_);
  std::shared_lock<std::shared_mutex> lock(impl.mutex);
  // Two digests share a 64-byte line: the digest array is line-aligned and a bucket's 12 slots
  // fill whole lines.
  constexpr std::uint64_t kDigestsPerLine = 64 / sizeof(BlockDigest);
  Layout layout;
  Impl::for_each_live_slot(
      impl.table, [&](std::uint64_t b, int lane, std::uint32_t meta, const BlockDigest& digest) {
        ++layout.keys;
        const detail::SlotPlace home = impl.place(detail::make_slot_key(digest, meta));
        if (home.bucket == b) {
          ++layout.in_home_bucket;
          layout.in_prefetched_line +=
              static_cast<std::size_t>(detail::slot_of(b, lane) / kDigestsPerLine ==
                                       detail::slot_of(b, home.lane) / kDigestsPerLine);
        } else if (detail::probe_bucket(home, 1, impl.table.bucket_mask) == b) {
          ++layout.in_second_bucket;
        }
      });
  return layout;
}

namespace {

/// A view's shared lock: taken here, or not at all for run_lookup's twin, whose caller holds it.
std::shared_lock<std::shared_mutex> shared_unless_held(std::shared_mutex& mutex, bool held) {
  return held ? std::shared_lock<std::shared_mutex>(mutex, std::defer_lock)
              : std::shared_lock<std::shared_mutex>(mutex);
}

}  // namespace

std::uint64_t BlockIndex::View::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                                      std::int64_t step, int count) const {
  if (count <= 0 || hashes == nullptr || !detail::valid_group(group_id) ||
      !detail::valid_namespace(ns_) || !BlockDigest::valid_size(digest_size_) || !index_->impl_) {
    return 0;  // such a key can never have been inserted
  }
  const Impl& impl = *index_->impl_;
  const std::uint32_t meta =
      detail::pack_meta(ns_, group_id, detail::digest_width_code(digest_size_));
  const int n = count > 64 ? 64 : count;
  const std::shared_lock<std::shared_mutex> lock = shared_unless_held(impl.mutex, held_);
  return impl.lookup_window(n, [&](int k) {
    return Impl::KeyRef{hashes + first + k * step, meta};
  });
}

void BlockIndex::View::run_lookup(const LookupBody& lookup) const {
  if (held_ || !index_->impl_) {
    lookup(*this);  // already under the lock, or a moved-from index (every probe answers 0)
    return;
  }
  const std::shared_lock<std::shared_mutex> lock(index_->impl_->mutex);
  View held = *this;
  held.held_ = true;
  lookup(held);
}

bool BlockIndex::View::prefers_probe_many() const noexcept {
  if (!index_->impl_) {
    return false;
  }
  const std::uint64_t slots = index_->impl_->capacity_mirror.load(std::memory_order_relaxed);
  return detail::table_bytes_of_slots(slots) >= detail::planned_lookup_min_bytes();
}

void BlockIndex::View::probe_many(const ProbeWindow* windows, std::size_t n,
                                  std::uint64_t* out) const {
  std::fill(out, out + n, std::uint64_t{0});
  if (n == 0 || !detail::valid_namespace(ns_) || !BlockDigest::valid_size(digest_size_) ||
      !index_->impl_) {
    return;  // such a key can never have been inserted
  }
  const std::uint32_t width_code = detail::digest_width_code(digest_size_);
  // One key stream over all windows: the i-th key's digest, window and bit. A window with a bad
  // group id (or no hashes) contributes no keys and answers 0, as probe() does.
  struct WindowKey {
    Impl::KeyRef key;
    std::uint32_t window;
    std::uint32_t bit;
  };
  // Reused across calls and threads (a batch's workers come and go: worker_pool.hpp).
  static detail::ScratchPool<std::vector<WindowKey>> pool;
  const auto lease = pool.lease();
  std::vector<WindowKey>& refs = *lease;
  const auto keys_of = [](const ProbeWindow& win) {
    return win.hashes == nullptr || !detail::valid_group(win.group_id) ? 0
           : win.count > 64                                            ? 64
                                                                       : std::max(win.count, 0);
  };
  std::size_t total = 0;
  for (std::size_t w = 0; w < n; ++w) {
    total += static_cast<std::size_t>(keys_of(windows[w]));
  }
  refs.resize(total);  // sized once: the fill below is the hot loop's setup, per key
  WindowKey* ref = refs.data();
  for (std::size_t w = 0; w < n; ++w) {
    const ProbeWindow& win = windows[w];
    const int count = keys_of(win);
    if (count == 0) {
      continue;  // a bad group id or no hashes: no keys, and the window answers 0
    }
    const std::uint32_t meta = detail::pack_meta(ns_, win.group_id, width_code);
    for (int k = 0; k < count; ++k) {
      // Each key's address from its index: stepping a pointer past the last key could leave the
      // caller's array, which C++ does not allow even unread.
      const BlockDigest* digest = win.hashes + win.first + static_cast<std::int64_t>(k) * win.step;
      *ref++ = WindowKey{Impl::KeyRef{digest, meta}, static_cast<std::uint32_t>(w),
                         static_cast<std::uint32_t>(k)};
    }
  }
  const Impl& impl = *index_->impl_;
  const std::shared_lock<std::shared_mutex> lock = shared_unless_held(impl.mutex, held_);
  impl.lookup_stream(
      refs.size(), [&](std::size_t i) { return refs[i].key; },
      [&](std::size_t i, bool found) {
        out[refs[i].window] |= static_cast<std::uint64_t>(found) << refs[i].bit;
      });
}

}  // namespace prefixhit
