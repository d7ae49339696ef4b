// Internal to host/vectors: the typed JSON field readers and the message clipper that the
// runner's pieces share. vector_parse.cpp defines them; conformance.cpp (cases and ops) and
// vector_files.cpp (documents) use them too. Not part of the public conformance.hpp API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace prefixhit::conformance::detail {

/// `text` cut to `limit` characters, naming its full length, for error messages.
std::string clip(const std::string& text, std::size_t limit = 600);

/// A field of `object` of the stated type. A value of another type is a FormatError naming the
/// field and the value; a missing field is the JSON library's out_of_range.
std::int64_t get_int(const nlohmann::json& object, const char* key);
/// Absent and null are both nullopt.
std::optional<std::int64_t> get_optional_int(const nlohmann::json& object, const char* key);
bool get_bool(const nlohmann::json& object, const char* key);
std::string get_string(const nlohmann::json& object, const char* key);

}  // namespace prefixhit::conformance::detail
