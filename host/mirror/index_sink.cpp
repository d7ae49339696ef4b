// The mirror's pieces that need neither ZeroMQ nor msgpack: the CPU index sink, the one
// mapping of event keys onto index digests, and the format names.
#include <string>

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

void BlockIndexSink::insert(Namespace ns, span<const EventKey> keys) {
  groups_.resize(keys.size());
  digests_.resize(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    groups_[i] = keys[i].group_id;
    digests_[i] = to_index_digest(keys[i]);
  }
  index_->insert(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_));
}

void BlockIndexSink::erase(Namespace ns, span<const EventKey> keys) {
  groups_.resize(keys.size());
  digests_.resize(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    groups_[i] = keys[i].group_id;
    digests_[i] = to_index_digest(keys[i]);
  }
  index_->erase(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_));
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
