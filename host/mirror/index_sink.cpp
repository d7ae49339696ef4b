// The mirror's pieces that need neither ZeroMQ nor msgpack: the CPU index sink, the one
// mapping of event keys onto index digests, and the format names.
#include <cstdint>
#include <string>
#include <vector>

#include "host/mirror/staging.hpp"
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

struct BlockIndexSink::Stages {
  mirror::WidthStages widths;
};

BlockIndexSink::BlockIndexSink(BlockIndex& index)
    : index_(&index), stages_(std::make_unique<Stages>()) {}
BlockIndexSink::~BlockIndexSink() = default;

namespace {

/// One index call for the staged keys of one width.
void apply_stage(BlockIndex& index, bool insert, Namespace ns, const mirror::WidthStage& s,
                 std::size_t width) {
  const span<const BlockDigest> digests(s.digests);
  if (s.group >= 0) {  // one group: the index's cheaper single-group call
    if (insert) {
      index.insert(ns, s.group, digests, width);
    } else {
      index.erase(ns, s.group, digests, width);
    }
  } else if (insert) {
    index.insert(ns, span<const std::int32_t>(s.groups), digests, width);
  } else {
    index.erase(ns, span<const std::int32_t>(s.groups), digests, width);
  }
}

}  // namespace

void BlockIndexSink::apply(bool insert, Namespace ns, span<const EventKey> keys) {
  mirror::stage_by_width(keys, stages_->widths);
  mirror::apply_by_width(stages_->widths, insert,
                         [&](bool ins, const mirror::WidthStage& s, std::size_t width) {
                           apply_stage(*index_, ins, ns, s, width);
                         });
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
