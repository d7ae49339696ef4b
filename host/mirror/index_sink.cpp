// The mirror's pieces that need neither ZeroMQ nor msgpack: the CPU index sink, the one
// mapping of event keys onto index digests, and the format names.
#include <cstdint>
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

BlockDigest to_index_digest(const EventKey& key) noexcept {
  // Zero-padded past digest_size; the width-aware index will take key.digest_size instead.
  BlockDigest d;
  d.bytes = key.bytes;
  for (std::size_t i = key.digest_size; i < BlockDigest::kSize; ++i) {
    d.bytes[i] = 0;
  }
  return d;
}

namespace {

/// Fills `digests` (and `groups`, unless every key has the same group); returns that group, or
/// -1 when the keys span several groups.
int stage(span<const EventKey> keys, std::vector<std::int32_t>& groups,
          std::vector<BlockDigest>& digests) {
  digests.resize(keys.size());
  bool one_group = true;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    digests[i] = to_index_digest(keys[i]);
    one_group = one_group && keys[i].group_id == keys[0].group_id;
  }
  if (one_group) {
    return keys.empty() ? 0 : keys[0].group_id;  // one vLLM event: the common case
  }
  groups.resize(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    groups[i] = keys[i].group_id;
  }
  return -1;
}

}  // namespace

void BlockIndexSink::insert(Namespace ns, span<const EventKey> keys) {
  const int group = stage(keys, groups_, digests_);
  if (group >= 0) {
    index_->insert(ns, group, span<const BlockDigest>(digests_));
  } else {
    index_->insert(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_));
  }
}

void BlockIndexSink::erase(Namespace ns, span<const EventKey> keys) {
  const int group = stage(keys, groups_, digests_);
  if (group >= 0) {
    index_->erase(ns, group, span<const BlockDigest>(digests_));
  } else {
    index_->erase(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_));
  }
}

const char* to_string(EventFormat format) noexcept {
  return format == EventFormat::vllm ? "vllm" : "mooncake";
}

EventFormat parse_event_format(const std::string& name) {
  if (name == "vllm") {
    return EventFormat::vllm;
  }
  if (name == "mooncake") {
    return EventFormat::mooncake;
  }
  throw InvalidArgument("unknown event format '" + name + "' (expected vllm or mooncake)");
}

}  // namespace prefixhit
