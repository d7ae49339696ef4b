// Decoding of KV-event payloads (vLLM and Mooncake master) into flat batches of key changes.
#pragma once

#include <msgpack.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

enum class EventType : std::uint8_t { stored, removed, cleared };

/// One event: its keys are keys[first_key, first_key + num_keys) of the batch.
struct DecodedEvent {
  EventType type = EventType::stored;
  std::uint16_t medium = 0;  ///< interned medium name (MediumTable)
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

/// Medium names and their ids, shared by the decoders of one mirror (the receiving thread
/// decodes live messages, the applying thread replayed ones), so that an id means the same
/// medium whichever thread decoded the event.
class MediumTable {
 public:
  MediumTable() { names_.emplace_back(""); }  // id 0: no medium given
  /// The id of `name`, added if new; throws FormatError past 256 distinct media.
  std::uint16_t intern(std::string_view name);

 private:
  std::mutex mutex_;
  std::vector<std::string> names_;
};

class Decoder {
 public:
  /// `media` is shared with the mirror's other decoder; null: a table of its own.
  explicit Decoder(const EventMirrorOptions& options, std::shared_ptr<MediumTable> media = nullptr);
  /// Decodes one payload into `out` (reset first). A payload that is not msgpack, or not
  /// [ts, [events...], dp_rank?], throws FormatError; a bad event inside a good payload is
  /// counted in out.malformed_events and skipped.
  void decode(const std::uint8_t* data, std::size_t size, DecodedBatch& out);

 private:
  std::uint16_t intern_medium(std::string_view name);

  EventMirrorOptions options_;
  std::shared_ptr<MediumTable> media_;
  /// Names this decoder has met and their ids: the shared table (and its lock) is asked only
  /// for a name not seen here before.
  std::vector<std::pair<std::string, std::uint16_t>> known_media_;
  /// Reused for every payload: after the first messages, decoding allocates nothing (strings
  /// and bins are referenced in the payload, not copied).
  msgpack::zone zone_{std::size_t{1} << 18};
};

}  // namespace prefixhit::mirror
