// The conformance runner under hostile vectors (issue 13, item 5): depth bombs are refused
// before parsing, a tiny case asking for a 2^28-entry mask costs no JSON, group ids beyond 32
// bits never alias group 0, and documents without real expectations fail.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "host/vectors/conformance.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kCase = R"({
  "name": "hostile",
  "config": {"hash_block_size": 16, "scheduler_block_size": 16, "use_eagle": false,
             "retention_interval": null,
             "groups": [{"kind": "full_attention", "block_size": 16, "num_kv_heads": 8,
                         "head_size": 128, "dtype": "bfloat16", "eagle": false}]},
  "expect_config": {"eagle_group_ids": [], "spec_groups": [[[0], false]],
                    "enable_partial_hash_hits": false, "lookup_alignment": 16},
  "hashes": ["0000000000000000000000000000000000000000000000000000000000000001"],
  "ops": [{"op": "find_longest_cache_hit", "max_length": 16, "apply_eagle": true,
           "exists": [[0, "0000000000000000000000000000000000000000000000000000000000000001"]],
           "expect": {"hit_length": 16, "masks": [[true]]}}]
})";

conformance::CaseResult run(const json& test_case) {
  static const auto backend = conformance::make_cpu_backend();
  return conformance::run_case(test_case, *backend);
}

TEST(VectorRunnerHostile, DepthBombsAreRefusedBeforeParsing) {
  // 70 000 levels segfaulted inside the JSON library (its error path recursed).
  for (const char open : {'[', '{'}) {
    std::string bomb = R"({"cases": [)" + std::string(70000, open);
    try {
      conformance::parse_document(bomb, "bomb.json");
      ADD_FAILURE() << "a depth bomb was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("nested more than"), std::string::npos) << e.what();
    }
  }
  // Brackets inside strings do not count; the real vectors' depth passes.
  const std::string text =
      R"({"cases": [)" + std::string(kCase) + R"(], "note": ")" + std::string(1000, '[') + R"("})";
  EXPECT_EQ(conformance::parse_document(text, "ok.json")["cases"].size(), 1U);
}

TEST(VectorRunnerHostile, AHugeMaskIsNotMaterialised) {
  // 436 bytes asking lookup_mask(2^28) with H = 1: 8.4 GB of JSON before, bad_alloc under a
  // memory limit. Now the engine's 256 MB mask is compared by size against the expectation.
  json c = json::parse(kCase);
  c["config"]["hash_block_size"] = 1;
  c["config"]["scheduler_block_size"] = 1;
  c["config"]["groups"][0]["block_size"] = 1;
  c["expect_config"]["lookup_alignment"] = 1;
  c["hashes"] = json::array();
  c["ops"] = json::array({json{{"op", "lookup_mask"},
                               {"aligned_token_len", std::int64_t{1} << 28},
                               {"expect", json{{"masks", json::array({nullptr})}}}}});
  const conformance::CaseResult r = run(c);
  EXPECT_TRUE(r.passed) << r.detail;  // lookup masks of full attention are "all" (null)
  // A sliding window's lookup mask is a real list: 2^28 entries against 2 expected.
  c["config"]["groups"][0]["kind"] = "sliding_window";
  c["config"]["groups"][0]["sliding_window"] = 4;
  c["config"]["scheduler_block_size"] = 64;  // keeps 3 of every 64 chunks
  c["expect_config"]["lookup_alignment"] = 64;
  c["ops"][0]["expect"] = json{{"masks", json::array({json::array({true, false})})}};
  const conformance::CaseResult s = run(c);
  EXPECT_FALSE(s.passed);
  EXPECT_NE(s.detail.find("not materialised"), std::string::npos) << s.detail;
}

TEST(VectorRunnerHostile, GroupIdsBeyond32BitsNeverAliasGroupZero) {
  for (const json& id : {json(std::uint64_t{1} << 32), json((std::int64_t{1} << 32) + 0),
                         json(-(std::int64_t{1} << 32)), json(std::uint64_t{1} << 63)}) {
    json c = json::parse(kCase);
    c["ops"][0]["exists"][0][0] = id;
    c["ops"][0]["expect"] = json{{"hit_length", 0}, {"masks", json::array({json::array()})}};
    const conformance::CaseResult r = run(c);
    EXPECT_TRUE(r.passed) << "group " << id.dump()
                          << " read as group 0 (a false hit): " << r.detail;
  }
}

TEST(VectorRunnerHostile, CasesWithoutRealExpectationsFail) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> edits = {
      {"expect null", [](json& c) { c["ops"][0]["expect"] = nullptr; }},
      {"expect {}", [](json& c) { c["ops"][0]["expect"] = json::object(); }},
      {"expect without masks", [](json& c) { c["ops"][0]["expect"].erase("masks"); }},
      {"expect error not a string",
       [](json& c) {
         c["ops"][0]["expect"] = {{"error", 3}};
       }},
      {"ops null", [](json& c) { c["ops"] = nullptr; }},
      {"ops an object", [](json& c) { c["ops"] = json::object(); }},
      {"expect_config {}", [](json& c) { c["expect_config"] = json::object(); }},
      {"expect_config null", [](json& c) { c["expect_config"] = nullptr; }},
      {"exists null", [](json& c) { c["ops"][0]["exists"] = nullptr; }},
  };
  for (const auto& [what, edit] : edits) {
    json c = json::parse(kCase);
    edit(c);
    const conformance::CaseResult r = run(c);
    EXPECT_FALSE(r.passed) << what << " passed";
    EXPECT_NE(r.detail.find("malformed case"), std::string::npos) << what << ": " << r.detail;
  }
  EXPECT_TRUE(run(json::parse(kCase)).passed);
}

TEST(VectorRunnerHostile, EmptyDocumentsAndFoldersAreErrors) {
  EXPECT_THROW(conformance::parse_document(R"({"cases": []})", "empty.json"), FormatError);
  std::string pattern = (fs::temp_directory_path() / "prefixhit-vectors-XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  try {
    conformance::collect_vector_files({pattern});
    ADD_FAILURE() << "an empty folder passed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no *.json"), std::string::npos) << e.what();
  }
  std::ofstream(pattern + "/notes.txt") << "not a vector";
  EXPECT_THROW(conformance::collect_vector_files({pattern}), IoError);
  fs::remove_all(pattern);
}

}  // namespace
}  // namespace prefixhit
