// Reading a conformance vector (SEMANTICS.md 9.2): the typed field readers, digests, group specs
// and configs. Running the cases is conformance.cpp; the files themselves are vector_files.cpp.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "host/vectors/conformance.hpp"
#include "host/vectors/vector_parse.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::conformance {

using nlohmann::json;

namespace detail {

std::string clip(const std::string& text, std::size_t limit) {
  if (text.size() <= limit) {
    return text;
  }
  return text.substr(0, limit) + "... (" + std::to_string(text.size()) + " chars)";
}

std::int64_t get_int(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_number_integer()) {
    throw FormatError(std::string("field '") + key + "' must be an integer, got " + value.dump());
  }
  return value.get<std::int64_t>();
}

std::optional<std::int64_t> get_optional_int(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return std::nullopt;
  }
  if (!it->is_number_integer()) {
    throw FormatError(std::string("field '") + key + "' must be an integer or null, got " +
                      it->dump());
  }
  return it->get<std::int64_t>();
}

bool get_bool(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_boolean()) {
    throw FormatError(std::string("field '") + key + "' must be a boolean, got " + value.dump());
  }
  return value.get<bool>();
}

std::string get_string(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_string()) {
    throw FormatError(std::string("field '") + key + "' must be a string, got " + value.dump());
  }
  return value.get<std::string>();
}

}  // namespace detail

using detail::clip;
using detail::get_bool;
using detail::get_int;
using detail::get_optional_int;
using detail::get_string;

BlockDigest parse_vector_digest(const std::string& hex) {
  if (hex.size() == 2 * BlockDigest::kSize) {
    return BlockDigest::from_hex(hex);
  }
  if (hex.size() == 8) {
    // The vLLM unit test's toy 4-byte hashes, zero-padded to a full digest.
    return BlockDigest::from_hex(hex + std::string(2 * BlockDigest::kSize - 8, '0'));
  }
  throw FormatError("digest '" + clip(hex, 80) + "' must be 64 hex digits (or 8 for toy hashes)");
}

GroupSpec parse_group_spec(const json& group) {
  if (!group.is_object()) {
    throw FormatError("a group must be an object, got " + clip(group.dump(), 80));
  }
  GroupSpec spec;
  spec.kind = parse_group_kind(get_string(group, "kind"));
  spec.block_size = get_int(group, "block_size");
  spec.eagle = group.contains("eagle") && get_bool(group, "eagle");
  json identity = json::object();  // every other field: part of spec equality (SEMANTICS.md 2.1)
  for (const auto& [key, value] : group.items()) {
    if (key == "kind" || key == "block_size" || key == "eagle") {
      continue;
    }
    if (key == "num_kv_heads") {
      spec.num_kv_heads = get_int(group, "num_kv_heads");
    } else if (key == "head_size") {
      spec.head_size = get_int(group, "head_size");
    } else if (key == "dtype") {
      spec.dtype = get_string(group, "dtype");
    } else if (key == "sliding_window") {
      spec.sliding_window = get_optional_int(group, "sliding_window");
    } else if (key == "attention_chunk_size") {
      spec.attention_chunk_size = get_optional_int(group, "attention_chunk_size");
    } else if (key == "mamba_cache_mode") {
      spec.mamba_cache_mode = parse_mamba_cache_mode(get_string(group, "mamba_cache_mode"));
    } else if (key == "state_dim") {
      spec.state_dim = get_int(group, "state_dim");
    } else if (key == "extra_retained_tokens") {
      spec.extra_retained_tokens = get_int(group, "extra_retained_tokens");
    } else if (key == "bounded_replay") {
      spec.bounded_replay = get_bool(group, "bounded_replay");
    } else if (const std::string_view typo = spec_field_typo(key); !typo.empty()) {
      throw FormatError("group field '" + key + "' looks like a misspelling of '" +
                        std::string(typo) + "' in " + clip(group.dump(), 200));
    } else {
      identity[key] = value;
    }
  }
  if (!identity.empty()) {
    spec.identity = identity.dump();  // keys sorted, compact: equal fields give equal text
  }
  return spec;
}

Config parse_config(const json& config) {
  try {
    if (!config.is_object()) {
      throw FormatError("config must be an object");
    }
    Config out;
    if (const auto it = config.find("semantics"); it != config.end()) {
      out.semantics = parse_semantics(get_string(config, "semantics"));
    }
    out.hash_block_size = get_int(config, "hash_block_size");
    out.scheduler_block_size = get_int(config, "scheduler_block_size");
    out.use_eagle = get_bool(config, "use_eagle");
    out.retention_interval = get_optional_int(config, "retention_interval");
    // An input under vllm-0.33 (SEMANTICS.md 11.1); derived and informational under pr49069.
    if (out.semantics == Semantics::vllm_0_33) {
      if (const auto it = config.find("enable_partial_hash_hits");
          it != config.end() && !it->is_null()) {
        out.enable_partial_hash_hits = get_bool(config, "enable_partial_hash_hits");
      }
    }
    const json& groups = config.at("groups");
    if (!groups.is_array()) {
      throw FormatError("config.groups must be a list");
    }
    for (const json& group : groups) {
      out.groups.push_back(parse_group_spec(group));
    }
    return out;
  } catch (const json::exception& e) {
    throw FormatError(std::string("malformed config: ") + e.what());
  } catch (const InvalidArgument& e) {
    throw FormatError(std::string("malformed config: ") + e.what());
  }
}

}  // namespace prefixhit::conformance
