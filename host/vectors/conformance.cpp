// Conformance-vector runner: every case, every op, compared bit for bit, on a backend (the CPU
// one is here; gpu_backend.cpp is the GPU one). Reading a vector's fields is vector_parse.cpp;
// reading and finding the files is vector_files.cpp.
#include "host/vectors/conformance.hpp"

#include <algorithm>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include "host/vectors/vector_parse.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::conformance {

using detail::clip;
using detail::get_bool;
using detail::get_int;
using detail::get_optional_int;
using detail::get_string;
using nlohmann::json;

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  LookupResult find_longest_cache_hit(const Coordinator& coordinator,
                                      span<const BlockDigest> hashes, std::int64_t max_length,
                                      const KeySet& store, bool apply_eagle) override {
    return coordinator.find_longest_cache_hit(hashes, max_length, store, apply_eagle);
  }
  LookupResult load_mask(const Coordinator& coordinator, span<const BlockDigest> hashes,
                         std::int64_t token_len) override {
    return coordinator.load_mask(hashes, token_len);
  }
};

/// Mask entries (booleans) in an expected "masks" value; what a matching result can hold.
std::size_t expected_mask_entries(const json& expect) {
  const auto it = expect.find("masks");
  if (it == expect.end() || !it->is_array()) {
    return 0;
  }
  std::size_t total = 0;
  for (const json& mask : *it) {
    total += mask.is_array() ? mask.size() : 0;
  }
  return total;
}

/// A result larger than the expectation cannot match it, so it is not materialised as JSON
/// (about 16 bytes per entry): a tiny vector asking for a 2^28-entry mask costs the engine's
/// one byte per entry, not gigabytes. The placeholder names both sizes and never matches.
json oversized_masks(std::size_t actual, std::size_t budget) {
  return "<" + std::to_string(actual) + " mask entries, more than the " + std::to_string(budget) +
         " the vector expects; not materialised>";
}

json lookup_masks_json(const LookupResult& result, std::size_t budget) {
  std::size_t total = 0;
  for (const GroupHit& hit : result.groups) {
    total += static_cast<std::size_t>(std::max<std::int64_t>(hit.num_blocks, 0));
  }
  if (total > budget) {
    return oversized_masks(total, budget);
  }
  json masks = json::array();
  for (const GroupHit& hit : result.groups) {
    json list = json::array();
    for (std::int64_t i = 0; i < hit.num_blocks; ++i) {
      list.push_back(i >= hit.num_placeholders);
    }
    masks.push_back(std::move(list));
  }
  return masks;
}

json chunk_masks_json(const std::vector<ChunkMask>& masks, std::size_t budget) {
  std::size_t total = 0;
  for (const ChunkMask& mask : masks) {
    total += mask.is_all() ? 0 : mask.keep->size();
  }
  if (total > budget) {
    return oversized_masks(total, budget);
  }
  json out = json::array();
  for (const ChunkMask& mask : masks) {
    if (mask.is_all()) {
      out.push_back(nullptr);
      continue;
    }
    json list = json::array();
    for (std::uint8_t keep : *mask.keep) {
      list.push_back(keep != 0);
    }
    out.push_back(std::move(list));
  }
  return out;
}

json error_json(const Error& e) {
  return json{{"error", to_string(e.kind())}};
}

/// The result fields each op must state (unless it expects an error).
const std::vector<std::string>& result_fields(const std::string& kind) {
  static const std::vector<std::string> lookup = {"hit_length", "masks"};
  static const std::vector<std::string> masks = {"masks"};
  static const std::vector<std::string> length = {"length"};
  static const std::vector<std::string> keys = {"keys"};
  static const std::vector<std::string> none;
  if (kind == "find_longest_cache_hit") {
    return lookup;
  }
  if (kind == "load_mask" || kind == "store_mask" || kind == "lookup_mask") {
    return masks;
  }
  if (kind == "align_lookup_length") {
    return length;
  }
  if (kind == "chunk_keys") {
    return keys;
  }
  return none;
}

/// What a successful construction's expect_config must state.
const std::vector<std::string> kConfigFields = {"eagle_group_ids", "spec_groups",
                                                "enable_partial_hash_hits", "lookup_alignment"};

/// An expectation that can fail: an object naming an error kind, or stating every field of
/// the result. null, {} or a partial object would let any result pass.
void check_expectation(const json& expect, const std::vector<std::string>& fields,
                       const std::string& what) {
  if (!expect.is_object()) {
    throw FormatError(what + " must be an object, got " + clip(expect.dump(), 80));
  }
  if (expect.contains("error")) {
    if (!expect["error"].is_string()) {
      throw FormatError(what + ".error must be a string, got " + clip(expect["error"].dump(), 80));
    }
    return;
  }
  for (const std::string& field : fields) {
    if (!expect.contains(field)) {
      throw FormatError(what + " must give '" + field + "' (or an 'error'), got " +
                        clip(expect.dump(), 200));
    }
  }
}

/// Whether the actual value matches what the vector expects. Errors match on the kind alone.
bool matches(const json& expect, const json& actual) {
  if (expect.is_object() && expect.contains("error")) {
    return actual.is_object() && actual.contains("error") && actual["error"] == expect["error"];
  }
  if (actual.is_object() && actual.contains("error")) {
    return false;
  }
  for (const auto& [key, value] : expect.items()) {
    if (!actual.contains(key) || actual.at(key) != value) {
      return false;
    }
  }
  return true;
}

/// The group id of an `exists` entry, or nullopt for an id no KeySet group can have (beyond
/// 32 bits): such a key never matches, so it is dropped rather than wrapped onto group 0.
std::optional<int> exists_group_id(const json& id) {
  if (id.is_number_unsigned()) {
    const auto value = id.get<std::uint64_t>();
    return value <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
               ? std::optional<int>(static_cast<int>(value))
               : std::nullopt;
  }
  const auto value = id.get<std::int64_t>();
  return value >= std::numeric_limits<int>::min() && value <= std::numeric_limits<int>::max()
             ? std::optional<int>(static_cast<int>(value))
             : std::nullopt;
}

json run_op(const json& op, const json& expect, const Coordinator& coordinator,
            const std::vector<BlockDigest>& hashes, Backend& backend) {
  const std::string kind = get_string(op, "op");
  const std::size_t budget = expected_mask_entries(expect);
  try {
    if (kind == "find_longest_cache_hit") {
      KeySet store;
      const json& exists = op.at("exists");
      if (!exists.is_array()) {
        throw FormatError("exists must be a list, got " + clip(exists.dump(), 80));
      }
      for (const json& entry : exists) {
        if (!entry.is_array() || entry.size() != 2 || !entry[0].is_number_integer() ||
            !entry[1].is_string()) {
          throw FormatError("exists entries must be [group_id, \"hex\"], got " +
                            clip(entry.dump(), 200));
        }
        const BlockDigest key = parse_vector_digest(entry[1].get<std::string>());
        if (const std::optional<int> group_id = exists_group_id(entry[0])) {
          store.insert(*group_id, key);
        }
      }
      const LookupResult result = backend.find_longest_cache_hit(
          coordinator, hashes, get_int(op, "max_length"), store, get_bool(op, "apply_eagle"));
      return json{{"hit_length", result.hit_length}, {"masks", lookup_masks_json(result, budget)}};
    }
    if (kind == "load_mask") {
      const LookupResult result = backend.load_mask(coordinator, hashes, get_int(op, "token_len"));
      return json{{"masks", lookup_masks_json(result, budget)}};
    }
    if (kind == "store_mask") {
      return json{{"masks", chunk_masks_json(
                                coordinator.store_mask(get_int(op, "aligned_token_len"),
                                                       get_int(op, "start_token"),
                                                       get_optional_int(op, "num_prompt_tokens")),
                                budget)}};
    }
    if (kind == "lookup_mask") {
      return json{
          {"masks",
           chunk_masks_json(coordinator.lookup_mask(get_int(op, "aligned_token_len")), budget)}};
    }
    if (kind == "align_lookup_length") {
      return json{{"length", coordinator.align_lookup_length(get_int(op, "length"))}};
    }
    if (kind == "chunk_keys") {
      json keys = json::array();
      for (const BlockDigest& key : coordinator.chunk_keys(hashes, get_int(op, "block_size"))) {
        keys.push_back(key.to_hex());
      }
      return json{{"keys", std::move(keys)}};
    }
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    return error_json(e);
  }
  throw FormatError("unknown op '" + kind + "'");
}

/// Expected chunk keys are padded like the hashes, so 4-byte toy keys compare equal.
json normalise_expect(const std::string& kind, const json& expect) {
  if (kind != "chunk_keys" || !expect.contains("keys")) {
    return expect;
  }
  json out = expect;
  for (json& key : out["keys"]) {
    key = parse_vector_digest(key.get<std::string>()).to_hex();
  }
  return out;
}

std::string describe_op(const json& op) {
  json params = op;
  params.erase("expect");
  params.erase("exists");
  return params.dump();
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") {
    return make_cpu_backend();
  }
  if (name == "gpu") {
    return make_gpu_backend();
  }
  throw InvalidArgument("unknown backend '" + name + "' (expected cpu or gpu)");
}

std::size_t FileResult::passed() const {
  return static_cast<std::size_t>(
      std::count_if(cases.begin(), cases.end(), [](const CaseResult& c) { return c.passed; }));
}

CaseResult run_case(const json& test_case, Backend& backend) {
  CaseResult result;
  try {
    result.name = test_case.contains("name") && test_case["name"].is_string()
                      ? test_case["name"].get<std::string>()
                      : std::string("<unnamed>");
    const json& expect_config = test_case.at("expect_config");
    check_expectation(expect_config, kConfigFields, "expect_config");
    const json& ops = test_case.at("ops");
    if (!ops.is_array()) {
      throw FormatError("ops must be a list, got " + clip(ops.dump(), 80));
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].is_object()) {
        throw FormatError("op " + std::to_string(i) + " must be an object");
      }
      check_expectation(ops[i].at("expect"), result_fields(get_string(ops[i], "op")),
                        "op " + std::to_string(i) + " expect");
    }
    const Config config = parse_config(test_case.at("config"));
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(config);
    } catch (const Error& e) {
      if (expect_config.contains("error") && expect_config["error"] == to_string(e.kind())) {
        result.passed = true;
        return result;
      }
      result.detail = "config: expected " + clip(expect_config.dump()) + ", got error " +
                      to_string(e.kind()) + ": " + e.what();
      return result;
    }
    if (expect_config.contains("error")) {
      result.detail = "config: expected error " + expect_config["error"].dump() +
                      ", but construction succeeded";
      return result;
    }
    json spec_groups = json::array();
    for (const SpecGroup& sg : coordinator->spec_groups()) {
      spec_groups.push_back(json::array({sg.group_ids, sg.use_eagle}));
    }
    const json actual_config = {
        {"eagle_group_ids", coordinator->eagle_group_ids()},
        {"spec_groups", spec_groups},
        {"enable_partial_hash_hits", coordinator->enable_partial_hash_hits()},
        {"lookup_alignment", coordinator->lookup_alignment()}};
    if (!matches(expect_config, actual_config)) {
      result.detail =
          "config: expected " + clip(expect_config.dump()) + ", got " + clip(actual_config.dump());
      return result;
    }
    std::vector<BlockDigest> hashes;
    if (test_case.contains("hashes")) {
      for (const json& hex : test_case["hashes"]) {
        hashes.push_back(parse_vector_digest(hex.get<std::string>()));
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const json& op = ops[i];
      const json expect = normalise_expect(get_string(op, "op"), op.at("expect"));
      const json actual = run_op(op, expect, *coordinator, hashes, backend);
      if (!matches(expect, actual)) {
        result.detail = "op " + std::to_string(i) + " " + clip(describe_op(op), 300) +
                        ": expected " + clip(expect.dump()) + ", got " + clip(actual.dump());
        return result;
      }
    }
    result.passed = true;
  } catch (const std::bad_alloc&) {
    result.passed = false;
    result.detail = "case needs more memory than is available (std::bad_alloc)";
  } catch (const std::exception& e) {
    result.passed = false;
    result.detail = std::string("malformed case: ") + e.what();
  }
  return result;
}

}  // namespace prefixhit::conformance
