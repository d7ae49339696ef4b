// The conformance-vector files: reading a document (refusing JSON nested past kMaxVectorNesting
// before the JSON library recurses over it), running every case of a file, and finding the files.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "host/vectors/conformance.hpp"
#include "host/vectors/vector_parse.hpp"
#include "prefixhit/errors.hpp"

#ifndef PREFIXHIT_DEFAULT_VECTORS_DIR
#define PREFIXHIT_DEFAULT_VECTORS_DIR "tests/data/conformance"
#endif

namespace prefixhit::conformance {

using detail::clip;
using nlohmann::json;

namespace {

/// The deepest nesting of lists and objects in `text` (outside strings), scanned without
/// recursion so that a document nested 100 000 levels deep is refused before the JSON library
/// recurses over it. Stops counting past `limit`.
std::size_t nesting_depth(const std::string& text, std::size_t limit) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // skip the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) {
        return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

json parse_document(const std::string& text, const std::string& origin) {
  if (nesting_depth(text, kMaxVectorNesting) > kMaxVectorNesting) {
    throw FormatError(origin + ": nested more than " + std::to_string(kMaxVectorNesting) +
                      " levels deep; a conformance document needs far fewer");
  }
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(origin + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array()) {
    throw FormatError(origin +
                      ": not a conformance document (needs an object with a 'cases' list)");
  }
  if (doc.contains("format") && doc["format"] != "prefixhit-conformance/1") {
    throw FormatError(origin + ": unsupported format " + clip(doc["format"].dump(), 80) +
                      " (expected \"prefixhit-conformance/1\")");
  }
  if (doc["cases"].empty()) {
    throw FormatError(origin + ": no cases (a vector file must hold at least one)");
  }
  return doc;
}

FileResult run_file(const std::string& path, Backend& backend) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError("cannot open vector file '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  const json doc = parse_document(text.str(), path);
  FileResult out;
  out.path = path;
  out.family = doc.value("family", std::filesystem::path(path).stem().string());
  out.cases.reserve(doc["cases"].size());
  for (const json& test_case : doc["cases"]) {
    out.cases.push_back(run_case(test_case, backend));
  }
  return out;
}

std::vector<std::string> collect_vector_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path)) {
        if (entry.is_regular_file() && entry.path().extension() == ".json") {
          found.push_back(entry.path().string());
        }
      }
      if (found.empty()) {
        throw IoError("vector folder '" + path + "' holds no *.json files");
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(path, ec)) {
      files.push_back(path);
    } else {
      throw IoError("no such vector file or folder: '" + path + "'");
    }
  }
  return files;
}

std::string default_vectors_dir() {
  if (const char* env = std::getenv("PREFIXHIT_VECTORS"); env != nullptr && *env != '\0') {
    return env;
  }
  return PREFIXHIT_DEFAULT_VECTORS_DIR;
}

}  // namespace prefixhit::conformance
