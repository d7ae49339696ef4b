// Loader and runner for the conformance vectors (SEMANTICS.md 9). Shared by the CLI
// (`prefixhit conformance`), the GoogleTest suites and the fuzzers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::conformance {

/// How lookups are answered while running vectors. Masks and configuration always come from
/// the host Coordinator; backends differ in where the finders run.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual LookupResult find_longest_cache_hit(const Coordinator& coordinator,
                                              span<const BlockDigest> hashes,
                                              std::int64_t max_length, const KeySet& store,
                                              bool apply_eagle) = 0;
  virtual LookupResult load_mask(const Coordinator& coordinator, span<const BlockDigest> hashes,
                                 std::int64_t token_len) = 0;
};

/// The CPU engine (Coordinator's own methods).
std::unique_ptr<Backend> make_cpu_backend();
/// The CUDA engine; throws Unavailable when CUDA is not built in or no device is present.
std::unique_ptr<Backend> make_gpu_backend();
/// "cpu" or "gpu"; throws InvalidArgument for another name.
std::unique_ptr<Backend> make_backend(const std::string& name);

struct CaseResult {
  std::string name;
  bool passed = false;
  std::string detail;  ///< for a failure: the op, expected and actual values
};

struct FileResult {
  std::string path;
  std::string family;
  std::vector<CaseResult> cases;
  std::size_t passed() const;
  std::size_t failed() const { return cases.size() - passed(); }
};

/// A digest from a vector's hex string. 4-byte toy hashes (vllm_unit_cases.json, orig_hashes)
/// are zero-padded to 32 bytes; any other length is a FormatError.
BlockDigest parse_vector_digest(const std::string& hex);

/// Parses a vector `config` object (SEMANTICS.md 9.2). Throws FormatError for a malformed
/// document; semantic problems surface later as InvalidConfig from the Coordinator.
Config parse_config(const nlohmann::json& config);
GroupSpec parse_group_spec(const nlohmann::json& group);

/// Runs one case; never throws (a malformed case is a failed case with its reason).
CaseResult run_case(const nlohmann::json& test_case, Backend& backend);
/// Loads and runs one vector file. Throws FormatError / IoError if the file cannot be read.
FileResult run_file(const std::string& path, Backend& backend);
/// The deepest list/object nesting a vector document may have (real ones use about 6).
inline constexpr std::size_t kMaxVectorNesting = 64;

/// Parses a whole vector document from text. Throws FormatError naming the problem: not JSON,
/// nested deeper than kMaxVectorNesting (checked before parsing), not a conformance document,
/// or no cases. Every case must state real expectations (an error kind, or every result field):
/// run_case reports null, {} or partial expectations, and "ops" that is not a list, as failures.
nlohmann::json parse_document(const std::string& text, const std::string& origin);

/// Files named by `paths` (files as given, folders expanded to their *.json, sorted).
/// Throws IoError for a path that does not exist or a folder without *.json files.
std::vector<std::string> collect_vector_files(const std::vector<std::string>& paths);

/// The default vectors folder: $PREFIXHIT_VECTORS if set, else the configured one.
std::string default_vectors_dir();

}  // namespace prefixhit::conformance
