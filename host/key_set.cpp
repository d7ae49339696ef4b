// KeySet: a caller-supplied set of (group id, key) pairs.
#include <cstring>
#include <unordered_set>

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

struct GroupKeyHash {
  std::size_t operator()(const GroupKey& k) const noexcept {
    // Digests are SHA-256 outputs; their first word is already uniform.
    std::uint64_t word = 0;
    std::memcpy(&word, k.key.bytes.data(), sizeof(word));
    return static_cast<std::size_t>(
        word ^ (static_cast<std::uint64_t>(k.group_id) * 0x9E3779B97F4A7C15ULL));
  }
};

}  // namespace

struct KeySet::Impl {
  std::unordered_set<GroupKey, GroupKeyHash> keys;
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
  return impl_->keys.insert(GroupKey{group_id, key}).second;
}

bool KeySet::contains(int group_id, const BlockDigest& key) const {
  // Every stored key fits the set's width, so a key that does not can never be present.
  return impl_->keys.count(GroupKey{group_id, key}) != 0;
}

std::size_t KeySet::size() const noexcept {
  return impl_->keys.size();
}

void KeySet::clear() noexcept {
  impl_->keys.clear();
}

std::uint64_t KeySet::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                            std::int64_t step, int count) const {
  std::uint64_t bits = 0;
  for (int k = 0; k < count; ++k) {
    if (contains(group_id, hashes[first + k * step])) {
      bits |= std::uint64_t{1} << k;
    }
  }
  return bits;
}

}  // namespace prefixhit
