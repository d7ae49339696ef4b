// KeySet: a caller-supplied set of (group id, key) pairs.
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "host/random_seed.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/existence.hpp"

namespace prefixhit {

namespace {

struct GroupKey {
  int group_id;
  BlockDigest key;
  friend bool operator==(const GroupKey& a, const GroupKey& b) noexcept {
    return a.group_id == b.group_id && a.key == b.key;
  }
};

/// The hash secret, drawn once per process: digests come from requests, so an unseeded hash of
/// a few bytes lets crafted prompts pile every key into one bucket (quadratic inserts).
const detail::IndexHashKey& process_hash_key() {
  static const detail::IndexHashKey key = detail::checked_hash_key(detail::random_hash_seed());
  return key;
}

struct GroupKeyHash {
  const detail::IndexHashKey* secret = &process_hash_key();
  std::size_t operator()(const GroupKey& k) const noexcept {
    // The BlockIndex hash: all 32 digest bytes and the group id, under the seeded secret.
    return static_cast<std::size_t>(detail::slot_hash(
        detail::make_slot_key(k.key, static_cast<std::uint32_t>(k.group_id)), *secret));
  }
};

using GroupKeys = std::unordered_set<GroupKey, GroupKeyHash>;

std::uint64_t probe_keys(const GroupKeys& keys, int group_id, const BlockDigest* hashes,
                         std::int64_t first, std::int64_t step, int count) {
  std::uint64_t bits = 0;
  for (int k = 0; k < count; ++k) {
    if (keys.count(GroupKey{group_id, hashes[first + k * step]}) != 0) {
      bits |= std::uint64_t{1} << k;
    }
  }
  return bits;
}

/// KeySet::run_lookup's twin: probes the keys under the shared lock its caller holds.
class HeldKeys final : public ExistenceSource {
 public:
  HeldKeys(const GroupKeys& keys, std::size_t digest_size)
      : keys_(keys), digest_size_(digest_size) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override {
    return probe_keys(keys_, group_id, hashes, first, step, count);
  }
  std::size_t digest_size() const noexcept override { return digest_size_; }

 private:
  const GroupKeys& keys_;
  std::size_t digest_size_;
};

}  // namespace

struct KeySet::Impl {
  // Readers (probes, contains) share it; insert and clear take it exclusively, so a KeySet
  // written from one thread while another looks it up is safe (see existence.hpp).
  mutable std::shared_mutex mutex;
  GroupKeys keys;
};

KeySet::KeySet(std::size_t digest_size)
    : digest_size_(digest_size), impl_(std::make_unique<Impl>()) {
  check_digest_size(digest_size, "KeySet");
}
KeySet::~KeySet() = default;
KeySet::KeySet(KeySet&&) noexcept = default;
KeySet& KeySet::operator=(KeySet&&) noexcept = default;

bool KeySet::insert(int group_id, const BlockDigest& key) {
  check_digests(span<const BlockDigest>(&key, 1), digest_size_, "KeySet::insert: key");
  const std::unique_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->keys.insert(GroupKey{group_id, key}).second;
}

bool KeySet::contains(int group_id, const BlockDigest& key) const {
  // Every stored key fits the set's width, so a key that does not can never be present.
  const std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->keys.count(GroupKey{group_id, key}) != 0;
}

std::size_t KeySet::size() const noexcept {
  const std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return impl_->keys.size();
}

void KeySet::clear() noexcept {
  const std::unique_lock<std::shared_mutex> lock(impl_->mutex);
  impl_->keys.clear();
}

std::uint64_t KeySet::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                            std::int64_t step, int count) const {
  // One shared lock per window outside run_lookup: each window sees one state of the set.
  const std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  return probe_keys(impl_->keys, group_id, hashes, first, step, count);
}

void KeySet::run_lookup(const LookupBody& lookup) const {
  const std::shared_lock<std::shared_mutex> lock(impl_->mutex);
  lookup(HeldKeys(impl_->keys, digest_size_));
}

}  // namespace prefixhit
