// Decoding of KV-event payloads (vLLM and Mooncake master) into flat batches of key changes.
#pragma once

#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

enum class EventType : std::uint8_t { stored, removed, cleared };

/// One event: its keys are keys[first_key, first_key + num_keys) of the batch.
struct DecodedEvent {
  EventType type = EventType::stored;
  std::uint16_t medium = 0;  ///< interned medium name (Decoder::medium_name)
  std::uint16_t rank = 0;    ///< index into the expected rank namespaces (Mooncake), else 0
  std::uint32_t first_key = 0;
  std::uint32_t num_keys = 0;
};

struct DecodedBatch {
  bool has_ts = false;
  double ts_ms = 0;  ///< the batch timestamp, in ms since the epoch
  std::vector<DecodedEvent> events;
  std::vector<EventKey> keys;
  std::uint64_t malformed_events = 0;
  std::uint64_t foreign_keys = 0;
  std::string last_error;  ///< why the last skipped event was skipped

  void reset() {
    has_ts = false;
    ts_ms = 0;
    events.clear();
    keys.clear();
    malformed_events = 0;
    foreign_keys = 0;
    last_error.clear();
  }
};

class Decoder {
 public:
  explicit Decoder(const EventMirrorOptions& options);
  /// Decodes one payload into `out` (reset first). A payload that is not msgpack, or not
  /// [ts, [events...], dp_rank?], throws FormatError; a bad event inside a good payload is
  /// counted in out.malformed_events and skipped.
  void decode(const std::uint8_t* data, std::size_t size, DecodedBatch& out);
  const std::string& medium_name(std::uint16_t id) const { return media_[id]; }

 private:
  std::uint16_t intern_medium(std::string_view name);

  EventMirrorOptions options_;
  std::vector<std::string> media_;
  /// Reused for every payload: after the first messages, decoding allocates nothing (strings
  /// and bins are referenced in the payload, not copied).
  msgpack::zone zone_{std::size_t{1} << 18};
};

}  // namespace prefixhit::mirror
