// The mirror's pieces that need neither ZeroMQ nor msgpack: the CPU index sink, the one
// mapping of event keys onto index digests, and the format names.
#include <cstdint>
#include <string>
#include <vector>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

BlockDigest to_index_digest(const EventKey& key) noexcept {
  // A narrower digest lives in the first digest_size bytes, zero past them (BlockDigest's form);
  // the width itself goes to the index with the key, so widths never meet.
  BlockDigest d;
  d.bytes = key.bytes;
  for (std::size_t i = key.digest_size; i < BlockDigest::kSize; ++i) {
    d.bytes[i] = 0;
  }
  return d;
}

namespace {

constexpr std::size_t kWidths[] = {32, 16, 8};

/// kWidths' index of a digest width (8, 16 or 32).
std::size_t width_slot(std::size_t width) {
  return width == 32 ? 0 : width == 16 ? 1 : 2;
}

}  // namespace

void BlockIndexSink::apply(bool insert, Namespace ns, span<const EventKey> keys) {
  // One pass stages every width (a batch usually has one); then one index call per width.
  for (Staged& s : staged_) {
    s.digests.clear();
    s.groups.clear();
    s.group = -2;
  }
  for (const EventKey& key : keys) {
    Staged& s = staged_[width_slot(key.digest_size)];
    s.digests.push_back(to_index_digest(key));
    s.groups.push_back(key.group_id);
    s.group = s.group == -2 || s.group == key.group_id ? key.group_id : -1;
  }
  std::size_t done = 0;  // widths applied, in kWidths order
  try {
    for (; done < 3; ++done) {
      apply_width(insert, ns, staged_[done], kWidths[done]);
    }
  } catch (...) {
    // All or nothing across widths: the keys changed presence, so the opposite call on the
    // widths already applied restores them.
    for (std::size_t w = 0; w < done; ++w) {
      try {
        apply_width(!insert, ns, staged_[w], kWidths[w]);
      } catch (...) {  // nothing more can be done; the original error is what matters
      }
    }
    throw;
  }
}

void BlockIndexSink::apply_width(bool insert, Namespace ns, const Staged& s, std::size_t width) {
  if (s.group >= 0) {  // one group: the index's cheaper single-group call
    if (insert) {
      index_->insert(ns, s.group, span<const BlockDigest>(s.digests), width);
    } else {
      index_->erase(ns, s.group, span<const BlockDigest>(s.digests), width);
    }
  } else if (s.group == -1) {
    if (insert) {
      index_->insert(ns, span<const std::int32_t>(s.groups), span<const BlockDigest>(s.digests),
                     width);
    } else {
      index_->erase(ns, span<const std::int32_t>(s.groups), span<const BlockDigest>(s.digests),
                    width);
    }
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
