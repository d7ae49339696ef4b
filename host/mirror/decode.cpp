// msgpack decoding of vLLM KV events (tagged maps and positional arrays; hashes as bytes or
// 64-bit ints) and of Mooncake master events (maps with vLLM store keys in object_key).
#include "host/mirror/decode.hpp"

#include <msgpack.hpp>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "prefixhit/errors.hpp"

namespace prefixhit::mirror {

namespace {

/// Limits against hostile payloads: no container or string can make the unpacker allocate
/// more than the payload's own size suggests, and nesting stays shallow.
const msgpack::unpack_limit kLimits(/*array=*/1U << 24, /*map=*/1U << 16, /*str=*/1U << 20,
                                    /*bin=*/1U << 20, /*ext=*/1U << 20, /*depth=*/16);

/// Reference strings/bins in the payload instead of copying them (it outlives the object).
bool reference_all(msgpack::type::object_type, std::size_t, void*) {
  return true;
}

/// A field that is wrong: the event is skipped with this message.
struct BadEvent {
  std::string message;
};

[[noreturn]] void bad(const std::string& message) {
  throw BadEvent{message};
}

std::string_view as_str(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::STR) {
    bad(std::string(field) + " is not a string");
  }
  return {o.via.str.ptr, o.via.str.size};
}

bool is_nil(const msgpack::object& o) {
  return o.type == msgpack::type::NIL;
}

bool is_int(const msgpack::object& o) {
  return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
}

std::int64_t as_int(const msgpack::object& o, const char* field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<std::uint64_t>(INT64_MAX)) {
      bad(std::string(field) + " is out of range");
    }
    return static_cast<std::int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    return o.via.i64;
  }
  bad(std::string(field) + " is not an integer");
}

void optional_int(const msgpack::object& o, const char* field) {
  if (!is_nil(o) && !is_int(o)) {
    bad(std::string(field) + " is neither nil nor an integer");
  }
}

void optional_str(const msgpack::object& o, const char* field) {
  if (!is_nil(o) && o.type != msgpack::type::STR) {
    bad(std::string(field) + " is neither nil nor a string");
  }
}

/// A vLLM block hash: 8/16/32 bytes (width = length) or a 64-bit int (width 8, big-endian).
EventKey hash_key(const msgpack::object& o, const char* field) {
  EventKey k;
  if (is_int(o)) {
    // Negative values are the same 64 bits read as signed (Mooncake's legacy block_hashes).
    const std::uint64_t v = o.via.u64;
    for (int b = 0; b < 8; ++b) {
      k.bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(v >> (56 - 8 * b));
    }
    k.digest_size = 8;
    return k;
  }
  if (o.type == msgpack::type::BIN || o.type == msgpack::type::STR) {
    const std::size_t n = o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size;
    const char* p = o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr;
    if (n != 8 && n != 16 && n != 32) {
      bad(std::string(field) + " has " + std::to_string(n) + " bytes (a digest has 8, 16 or 32)");
    }
    std::memcpy(k.bytes.data(), p, n);
    k.digest_size = static_cast<std::uint8_t>(n);
    return k;
  }
  bad(std::string(field) + " is neither bytes nor an integer");
}

int group_of(const msgpack::object& o) {
  if (is_nil(o)) {
    return 0;
  }
  const std::int64_t g = as_int(o, "group_idx");
  if (g < 0 || g >= kMaxGroups) {
    bad("group_idx " + std::to_string(g) + " is outside [0, " + std::to_string(kMaxGroups) + ")");
  }
  return static_cast<int>(g);
}

const msgpack::object& nil_object() {
  static const msgpack::object nil;
  return nil;
}

/// Field `name` of a map (nil when absent).
const msgpack::object& field(const msgpack::object_map& map, std::string_view name) {
  for (std::uint32_t i = 0; i < map.size; ++i) {
    const msgpack::object& k = map.ptr[i].key;
    if (k.type == msgpack::type::STR && std::string_view(k.via.str.ptr, k.via.str.size) == name) {
      return map.ptr[i].val;
    }
  }
  return nil_object();
}

/// The event's fields by name, for both encodings of vLLM events.
struct VllmFields {
  std::string_view tag;
  const msgpack::object* hashes = &nil_object();
  const msgpack::object* parent = &nil_object();
  const msgpack::object* tokens = &nil_object();
  const msgpack::object* block_size = &nil_object();
  const msgpack::object* lora_id = &nil_object();
  const msgpack::object* medium = &nil_object();
  const msgpack::object* lora_name = &nil_object();
  const msgpack::object* group_idx = &nil_object();
  const msgpack::object* spec_kind = &nil_object();
  const msgpack::object* spec_window = &nil_object();
};

VllmFields vllm_fields(const msgpack::object& ev) {
  VllmFields f;
  if (ev.type == msgpack::type::MAP) {
    const msgpack::object_map& m = ev.via.map;
    f.tag = as_str(field(m, "type"), "type");
    f.hashes = &field(m, "block_hashes");
    f.parent = &field(m, "parent_block_hash");
    f.tokens = &field(m, "token_ids");
    f.block_size = &field(m, "block_size");
    f.lora_id = &field(m, "lora_id");
    f.medium = &field(m, "medium");
    f.lora_name = &field(m, "lora_name");
    f.group_idx = &field(m, "group_idx");
    f.spec_kind = &field(m, "kv_cache_spec_kind");
    f.spec_window = &field(m, "kv_cache_spec_sliding_window");
    return f;
  }
  if (ev.type != msgpack::type::ARRAY || ev.via.array.size == 0) {
    bad("an event is neither a tagged map nor a tagged array");
  }
  // Positional: [tag, fields...] in the event class's field order; trailing defaults omitted.
  const msgpack::object_array& a = ev.via.array;
  f.tag = as_str(a.ptr[0], "event tag");
  auto at = [&](std::uint32_t i) { return i < a.size ? &a.ptr[i] : &nil_object(); };
  if (f.tag == "BlockStored") {
    if (a.size < 5) {
      bad("positional BlockStored has " + std::to_string(a.size - 1) + " fields (at least 4)");
    }
    f.hashes = at(1);
    f.parent = at(2);
    f.tokens = at(3);
    f.block_size = at(4);
    f.lora_id = at(5);
    f.medium = at(6);
    f.lora_name = at(7);
    // 8: extra_keys (not part of the store key)
    f.group_idx = at(9);
    f.spec_kind = at(10);
    f.spec_window = at(11);
  } else if (f.tag == "BlockRemoved") {
    if (a.size < 2) {
      bad("positional BlockRemoved has no block_hashes");
    }
    f.hashes = at(1);
    f.medium = at(2);
    f.group_idx = at(3);
  }
  return f;
}

}  // namespace

std::uint16_t MediumTable::intern(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) {
      return static_cast<std::uint16_t>(i);
    }
  }
  if (names_.size() >= 256) {
    throw FormatError("more than 256 distinct media");
  }
  names_.emplace_back(name);
  return static_cast<std::uint16_t>(names_.size() - 1);
}

Decoder::Decoder(const EventMirrorOptions& options, std::shared_ptr<MediumTable> media)
    : options_(options), media_(media ? std::move(media) : std::make_shared<MediumTable>()) {
  if (options_.ranks.empty()) {
    options_.ranks.push_back(RankNamespace{});
  }
}

std::uint16_t Decoder::intern_medium(std::string_view name) {
  for (const auto& [known, id] : known_media_) {
    if (known == name) {
      return id;
    }
  }
  std::uint16_t id = 0;
  try {
    id = media_->intern(name);
  } catch (const FormatError& e) {
    bad(e.what());
  }
  known_media_.emplace_back(std::string(name), id);
  return id;
}

void Decoder::decode(const std::uint8_t* data, std::size_t size, DecodedBatch& out) {
  out.reset();
  zone_.clear();
  msgpack::object root;
  std::size_t offset = 0;
  try {
    bool referenced = false;
    root = msgpack::unpack(zone_, reinterpret_cast<const char*>(data), size, offset, referenced,
                           reference_all, nullptr, kLimits);
  } catch (const std::exception& e) {
    throw FormatError(std::string("payload is not msgpack: ") + e.what());
  }
  if (offset != size) {
    throw FormatError("payload has " + std::to_string(size - offset) +
                      " bytes after its msgpack object");
  }
  if (root.type != msgpack::type::ARRAY || root.via.array.size < 2 || root.via.array.size > 3) {
    throw FormatError("payload is not [ts, events, dp_rank]");
  }
  const msgpack::object& ts = root.via.array.ptr[0];
  const bool seconds = options_.format == EventFormat::vllm;  // vLLM: float s; Mooncake: int ms
  if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32) {
    out.has_ts = true;
    out.ts_ms = seconds ? ts.via.f64 * 1e3 : ts.via.f64;
  } else if (ts.type == msgpack::type::POSITIVE_INTEGER) {
    out.has_ts = true;
    out.ts_ms = static_cast<double>(ts.via.u64) * (seconds ? 1e3 : 1.0);
  } else if (!is_nil(ts)) {
    throw FormatError("payload timestamp is not a number");
  }
  const msgpack::object& events = root.via.array.ptr[1];
  if (events.type != msgpack::type::ARRAY) {
    throw FormatError("payload events are not an array");
  }
  out.events.reserve(events.via.array.size);
  for (std::uint32_t e = 0; e < events.via.array.size; ++e) {
    const std::size_t keys_before = out.keys.size();
    try {
      const msgpack::object& ev = events.via.array.ptr[e];
      DecodedEvent d;
      d.first_key = static_cast<std::uint32_t>(keys_before);
      if (options_.format == EventFormat::vllm) {
        const VllmFields f = vllm_fields(ev);
        if (f.tag == "AllBlocksCleared") {
          d.type = EventType::cleared;
        } else if (f.tag == "BlockStored" || f.tag == "BlockRemoved") {
          d.type = f.tag == "BlockStored" ? EventType::stored : EventType::removed;
          if (d.type == EventType::stored) {
            // Checked for type only: the digest already covers tokens, lora and extra keys.
            if (!is_nil(*f.parent) && !is_int(*f.parent) && f.parent->type != msgpack::type::BIN) {
              bad("parent_block_hash is not a hash");
            }
            if (f.tokens->type != msgpack::type::ARRAY) {
              bad("token_ids is not an array");
            }
            as_int(*f.block_size, "block_size");
            optional_int(*f.lora_id, "lora_id");
            optional_str(*f.lora_name, "lora_name");
            optional_str(*f.spec_kind, "kv_cache_spec_kind");
            optional_int(*f.spec_window, "kv_cache_spec_sliding_window");
          }
          optional_str(*f.medium, "medium");
          if (!is_nil(*f.medium)) {
            d.medium = intern_medium(as_str(*f.medium, "medium"));
          }
          const int group = group_of(*f.group_idx);
          if (f.hashes->type != msgpack::type::ARRAY) {
            bad("block_hashes is not an array");
          }
          const msgpack::object_array& hs = f.hashes->via.array;
          for (std::uint32_t i = 0; i < hs.size; ++i) {
            EventKey k = hash_key(hs.ptr[i], "a block hash");
            k.group_id = group;
            out.keys.push_back(k);
          }
        } else {
          bad("unknown event type '" + std::string(f.tag) + "'");
        }
      } else {
        if (ev.type != msgpack::type::MAP) {
          bad("a Mooncake event is not a map");
        }
        const msgpack::object_map& m = ev.via.map;
        const msgpack::object& kind_obj =
            is_nil(field(m, "event_type")) ? field(m, "type") : field(m, "event_type");
        const std::string_view kind = as_str(kind_obj, "event_type");
        if (kind == "stored" || kind == "BlockStoreEvent" || kind == "BlockStored" ||
            kind == "updated" || kind == "BlockUpdateEvent") {
          d.type = EventType::stored;  // an update re-states a replica: same as a store
        } else if (kind == "removed" || kind == "BlockRemoveEvent" || kind == "BlockRemoved") {
          d.type = EventType::removed;
        } else if (kind == "remove_all" || kind == "RemoveAllEvent" || kind == "cleared" ||
                   kind == "AllBlocksCleared") {
          d.type = EventType::cleared;
        } else {
          bad("unknown Mooncake event type '" + std::string(kind) + "'");
        }
        if (d.type != EventType::cleared) {
          const msgpack::object& medium = field(m, "medium");
          optional_str(medium, "medium");
          if (!is_nil(medium)) {
            d.medium = intern_medium(as_str(medium, "medium"));
          }
          const msgpack::object& key_obj = field(m, "object_key");
          if (is_nil(key_obj)) {
            bad("a Mooncake event has no object_key (start the master with "
                "--kv_events_emit_object_key=true)");
          }
          StoreKeyParts parts;
          const std::string_view key_str = as_str(key_obj, "object_key");
          bool keep = parse_store_key_parts(key_str, parts);
          keep = keep && (options_.model.empty() || parts.model == options_.model);
          keep =
              keep && (!options_.match_cache_prefix || parts.cache_prefix == options_.cache_prefix);
          std::size_t rank = options_.ranks.size();
          for (std::size_t r = 0; keep && r < options_.ranks.size(); ++r) {
            if (options_.ranks[r] == parts.rank) {
              rank = r;
            }
          }
          if (!keep || rank == options_.ranks.size()) {
            ++out.foreign_keys;  // another model, prefix or rank, or not a vLLM store key
            continue;
          }
          d.rank = static_cast<std::uint16_t>(rank);
          out.keys.push_back(parts.key);
        }
      }
      d.num_keys = static_cast<std::uint32_t>(out.keys.size() - keys_before);
      out.events.push_back(d);
    } catch (const BadEvent& b) {
      out.keys.resize(keys_before);
      ++out.malformed_events;
      out.last_error = "event " + std::to_string(e) + ": " + b.message;
    }
  }
}

}  // namespace prefixhit::mirror
