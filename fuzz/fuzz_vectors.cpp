// libFuzzer target: the conformance-vector loader and runner on arbitrary bytes.
//
// parse_document must either return a document or throw FormatError; run_case must never throw
// (a malformed case is a failed case with its reason) and must be deterministic. Anything else -
// another exception type, a crash, a sanitizer report, a huge allocation - is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "host/vectors/conformance.hpp"
#include "prefixhit/errors.hpp"

namespace {

// Bounds the work per input so that the fuzzer explores instead of replaying huge documents.
constexpr std::size_t kMaxCases = 8;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_vectors: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace prefixhit;
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json doc;
  try {
    doc = conformance::parse_document(text, "fuzz-input");
  } catch (const FormatError&) {
    return 0;  // the documented rejection of a malformed document
  }
  if (!doc.is_object() || !doc.contains("cases") || !doc["cases"].is_array()) {
    fail("parse_document accepted a document without a cases list", doc.dump().substr(0, 200));
  }
  static const auto backend = conformance::make_cpu_backend();
  std::size_t n = 0;
  for (const nlohmann::json& test_case : doc["cases"]) {
    if (n++ == kMaxCases) {
      break;
    }
    conformance::CaseResult first;
    conformance::CaseResult second;
    try {
      first = conformance::run_case(test_case, *backend);
      second = conformance::run_case(test_case, *backend);
    } catch (const std::exception& e) {
      fail("run_case threw (it must report a failed case instead)", e.what());
    }
    if (first.passed != second.passed || first.detail != second.detail) {
      fail("run_case is not deterministic", first.detail + " | " + second.detail);
    }
  }
  return 0;
}
