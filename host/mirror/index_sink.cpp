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

/// Fills `digests` (and `groups`, unless every key has the same group) with the keys of width
/// `width`; returns that group, -1 when the keys span several groups, or -2 when no key has the
/// width.
int stage(span<const EventKey> keys, std::size_t width, std::vector<std::int32_t>& groups,
          std::vector<BlockDigest>& digests) {
  digests.clear();
  groups.clear();
  digests.reserve(keys.size());
  groups.reserve(keys.size());
  int group = -2;
  for (const EventKey& key : keys) {
    if (key.digest_size != width) {
      continue;
    }
    digests.push_back(to_index_digest(key));
    groups.push_back(key.group_id);
    group = group == -2 || group == key.group_id ? key.group_id : -1;
  }
  return group;
}

constexpr std::size_t kWidths[] = {32, 16, 8};

/// Bit w/8 set for each width present: a batch usually has one width, staged in one pass.
unsigned widths_in(span<const EventKey> keys) {
  unsigned bits = 0;
  for (const EventKey& key : keys) {
    bits |= 1U << (key.digest_size / 8U);
  }
  return bits;
}

}  // namespace

void BlockIndexSink::apply(bool insert, Namespace ns, span<const EventKey> keys) {
  const unsigned present = widths_in(keys);
  std::size_t done = 0;  // widths applied, in kWidths order
  try {
    for (const std::size_t width : kWidths) {  // one call to the index per width
      if ((present & (1U << (width / 8U))) != 0) {
        apply_width(insert, ns, keys, width);
      }
      ++done;
    }
  } catch (...) {
    // All or nothing across widths: the keys changed presence, so the opposite call on the
    // widths already applied restores them.
    for (std::size_t w = 0; w < done; ++w) {
      if ((present & (1U << (kWidths[w] / 8U))) != 0) {
        try {
          apply_width(!insert, ns, keys, kWidths[w]);
        } catch (...) {  // nothing more can be done; the original error is what matters
        }
      }
    }
    throw;
  }
}

void BlockIndexSink::apply_width(bool insert, Namespace ns, span<const EventKey> keys,
                                 std::size_t width) {
  const int group = stage(keys, width, groups_, digests_);
  if (group >= 0) {
    if (insert) {
      index_->insert(ns, group, span<const BlockDigest>(digests_), width);
    } else {
      index_->erase(ns, group, span<const BlockDigest>(digests_), width);
    }
  } else if (group == -1) {
    if (insert) {
      index_->insert(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_),
                     width);
    } else {
      index_->erase(ns, span<const std::int32_t>(groups_), span<const BlockDigest>(digests_),
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
