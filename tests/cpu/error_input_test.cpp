// Hostile and malformed input gives typed exceptions with clear messages, never a crash:
// malformed JSON documents and cases, wrong digest lengths, bad configurations, bad batch
// shapes, absurd sizes and bad index arguments. (Corrupt index files: index_file_test.cpp.)
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "host/vectors/conformance.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {
namespace {

using nlohmann::json;

/// Expects `f` to throw exactly `E` with a message containing `needle`.
template <class E, class F>
void expect_error(F&& f, const std::string& needle, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << what << ": message \"" << e.what() << "\" does not mention \"" << needle << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

const char* kValidCase = R"({
  "name": "ok",
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
  auto backend = conformance::make_cpu_backend();
  return conformance::run_case(test_case, *backend);
}

TEST(ErrorInput, MalformedDocumentsAreFormatErrors) {
  const std::vector<std::pair<std::string, std::string>> docs = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"{\"cases\": [}", "not valid JSON"},
      {"\xff\xfe\x00garbage", "not valid JSON"},
      {"[]", "needs an object with a 'cases' list"},
      {"{\"cases\": {}}", "needs an object with a 'cases' list"},
      {"42", "needs an object"},
      {R"({"format": "prefixhit-conformance/9", "cases": []})", "unsupported format"},
      {R"({"format": 7, "cases": []})", "unsupported format"},
  };
  for (const auto& doc : docs) {
    const std::string& text = doc.first;  // a plain reference: lambdas cannot capture bindings
    expect_error<FormatError>([&] { conformance::parse_document(text, "doc.json"); }, doc.second,
                              "document " + text.substr(0, 20));
  }
  // Names its origin.
  expect_error<FormatError>([] { conformance::parse_document("{", "origin-name.json"); },
                            "origin-name.json", "origin");
}

TEST(ErrorInput, DeeplyNestedJsonIsRejectedOrParsedWithoutACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  try {
    conformance::parse_document(deep, "deep.json");
    ADD_FAILURE() << "a nested list is not a conformance document";
  } catch (const FormatError&) {
  }
}

TEST(ErrorInput, TheValidCaseTemplatePasses) {
  const conformance::CaseResult r = run(json::parse(kValidCase));
  EXPECT_TRUE(r.passed) << r.detail;
}

TEST(ErrorInput, MalformedCasesFailWithAReasonAndNeverThrow) {
  struct Edit {
    std::string name;
    std::function<void(json&)> apply;
    std::string needle;
  };
  const std::vector<Edit> edits = {
      {"missing config", [](json& c) { c.erase("config"); }, "config"},
      {"config is a list", [](json& c) { c["config"] = json::array(); },
       "config must be an object"},
      {"hash_block_size is a string", [](json& c) { c["config"]["hash_block_size"] = "16"; },
       "must be an integer"},
      {"use_eagle is a number", [](json& c) { c["config"]["use_eagle"] = 1; }, "must be a boolean"},
      {"groups is an object", [](json& c) { c["config"]["groups"] = json::object(); },
       "groups must be a list"},
      {"unknown kind", [](json& c) { c["config"]["groups"][0]["kind"] = "cross_attention"; },
       "unknown group kind"},
      // Unknown fields are spec identity (issue 10); a near miss of a known one is refused.
      {"misspelt group field", [](json& c) { c["config"]["groups"][0]["blok_size"] = 16; },
       "'blok_size' looks like a misspelling of 'block_size'"},
      {"block_size is a float", [](json& c) { c["config"]["groups"][0]["block_size"] = 16.5; },
       "must be an integer"},
      {"digest of 63 hex digits", [](json& c) { c["hashes"][0] = std::string(63, 'a'); },
       "must be 64 hex digits"},
      {"digest of 66 hex digits", [](json& c) { c["hashes"][0] = std::string(66, 'a'); },
       "must be 64 hex digits"},
      {"digest of 4 bytes minus one digit", [](json& c) { c["hashes"][0] = "abcdef0"; },
       "must be 64 hex digits"},
      {"empty digest", [](json& c) { c["hashes"][0] = ""; }, "must be 64 hex digits"},
      {"non-hex digest", [](json& c) { c["hashes"][0] = std::string(64, 'g'); },
       "non-hex character"},
      {"digest is a number", [](json& c) { c["hashes"][0] = 5; }, "malformed case"},
      {"exists entry of one element", [](json& c) { c["ops"][0]["exists"][0] = json::array({0}); },
       "exists entries must be"},
      {"exists key too short", [](json& c) { c["ops"][0]["exists"][0][1] = "ab"; },
       "must be 64 hex digits"},
      {"max_length is null", [](json& c) { c["ops"][0]["max_length"] = nullptr; },
       "must be an integer"},
      {"unknown op", [](json& c) { c["ops"][0]["op"] = "drop_tables"; }, "unknown op"},
      {"ops is missing", [](json& c) { c.erase("ops"); }, "ops"},
  };
  for (const Edit& e : edits) {
    json c = json::parse(kValidCase);
    e.apply(c);
    conformance::CaseResult r;
    ASSERT_NO_THROW(r = run(c)) << e.name;
    EXPECT_FALSE(r.passed) << e.name;
    EXPECT_NE(r.detail.find(e.needle), std::string::npos)
        << e.name << ": detail \"" << r.detail << "\" does not mention \"" << e.needle << "\"";
  }
}

TEST(ErrorInput, WrongDigestLengthsAreInvalidArguments) {
  const std::uint8_t bytes[64] = {};
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{64}}) {
    expect_error<InvalidArgument>([&] { BlockDigest::from_bytes(bytes, size); },
                                  "must be 8, 16 or 32 bytes, got " + std::to_string(size),
                                  "from_bytes " + std::to_string(size));
  }
  expect_error<InvalidArgument>([] { BlockDigest::from_hex("abc"); }, "got 3 characters",
                                "short hex");
  expect_error<InvalidArgument>([] { BlockDigest::from_hex(std::string(64, 'z')); },
                                "non-hex character at position 0", "non-hex");
  expect_error<FormatError>([] { conformance::parse_vector_digest(std::string(10, '0')); },
                            "must be 64 hex digits", "vector digest of 5 bytes");
}

TEST(ErrorInput, BadConfigurationsAreInvalidConfigNamingTheField) {
  auto base = [] {
    Config c;
    c.hash_block_size = 16;
    c.scheduler_block_size = 64;
    c.groups = {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)};
    return c;
  };
  struct Bad {
    std::string name;
    std::function<void(Config&)> edit;
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {"no groups", [](Config& c) { c.groups.clear(); }, "at least one"},
      {"33 groups", [](Config& c) { c.groups.assign(33, GroupSpec::full_attention(64)); },
       "at most 32"},
      {"zero H", [](Config& c) { c.hash_block_size = 0; }, "hash_block_size must be positive"},
      {"negative S", [](Config& c) { c.scheduler_block_size = -64; },
       "scheduler_block_size must be positive"},
      {"zero block size", [](Config& c) { c.groups[1].block_size = 0; },
       "groups[1].block_size must be positive"},
      {"block not a multiple of H", [](Config& c) { c.groups[1].block_size = 24; },
       "is not a multiple of hash_block_size"},
      {"S not a multiple of a block", [](Config& c) { c.scheduler_block_size = 48; },
       "is not a multiple of"},
      {"negative retention", [](Config& c) { c.retention_interval = -1; }, "retention_interval"},
      {"window missing", [](Config& c) { c.groups[1].sliding_window.reset(); },
       "needs sliding_window"},
      {"zero window", [](Config& c) { c.groups[1].sliding_window = 0; },
       "sliding_window must be positive"},
      {"chunk on a window group", [](Config& c) { c.groups[1].attention_chunk_size = 64; },
       "attention_chunk_size is not a field"},
      {"negative heads", [](Config& c) { c.groups[0].num_kv_heads = -1; }, "must not be negative"},
  };
  for (const Bad& b : bad) {
    Config c = base();
    b.edit(c);
    expect_error<InvalidConfig>([&] { Coordinator{c}; }, b.needle, b.name);
  }
}

TEST(ErrorInput, BadBatchShapesAreInvalidArguments) {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 16;
  c.groups = {GroupSpec::full_attention(16)};
  const Coordinator co(c);
  const KeySet store;
  std::vector<BlockDigest> digests(10);
  auto batch_of = [&](const std::vector<std::int64_t>& offsets,
                      const std::vector<std::int64_t>& max_lengths,
                      const std::vector<std::uint8_t>& eagle) {
    return [&co, &store, &digests, offsets, max_lengths, eagle] {
      LookupBatch b;
      b.digests = span<const BlockDigest>(digests);
      b.offsets = span<const std::int64_t>(offsets.data(), offsets.size());
      b.max_lengths = span<const std::int64_t>(max_lengths.data(), max_lengths.size());
      b.apply_eagle = span<const std::uint8_t>(eagle.data(), eagle.size());
      co.find_longest_cache_hits(b, store);
    };
  };
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  expect_error<InvalidArgument>(batch_of({}, {}, {}), "got none", "no offsets");
  expect_error<InvalidArgument>(batch_of({1, 10}, {0}, {}), "offsets[0] must be 0",
                                "offsets[0] != 0");
  expect_error<InvalidArgument>(batch_of({0, 6, 4, 10}, {0, 0, 0}, {}), "must not decrease",
                                "decreasing offsets");
  expect_error<InvalidArgument>(batch_of({0, -5, 10}, {0, 0}, {}), "must not decrease",
                                "negative offset");
  expect_error<InvalidArgument>(batch_of({0, 4, 9}, {0, 0}, {}), "end at 9 but 10 digests",
                                "offsets end short");
  expect_error<InvalidArgument>(batch_of({0, 4, huge}, {0, 0}, {}), "digests were given",
                                "offsets end past the digests");
  expect_error<InvalidArgument>(batch_of({0, 4, 10}, {0}, {}), "max_lengths",
                                "too few max_lengths");
  expect_error<InvalidArgument>(batch_of({0, 4, 10}, {0, 0}, {1}), "apply_eagle",
                                "too few apply_eagle flags");
  // Past the hashes full attention stops at the last hash (the reference's answer, issue 10).
  EXPECT_NO_THROW(batch_of({0, 4, 10}, {0, 112}, {})());
  expect_error<InvalidArgument>(batch_of({0, 4, 10}, {-1, 0}, {}), "request 0: max_length -1",
                                "negative max_length");
  expect_error<InvalidArgument>(batch_of({0, 4, 10}, {0, huge}, {}), "request 1",
                                "max_length INT64_MAX");
  // A request past the hash list alone.
  expect_error<InvalidArgument>(
      [&] { co.find_longest_cache_hit(span<const BlockDigest>(digests), huge, store); },
      "is outside [0, 1099511627776]", "one-by-one max_length");
  expect_error<InvalidArgument>([&] { co.load_mask(-1, 0); }, "must not be negative",
                                "negative num_hashes");
}

TEST(ErrorInput, BadMaskArgumentsAreTypedErrors) {
  Config c;
  c.hash_block_size = 16;
  c.scheduler_block_size = 64;
  c.groups = {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)};
  const Coordinator co(c);
  expect_error<UnalignedLength>([&] { co.store_mask(100); }, "not a multiple of the lookup",
                                "unaligned");
  expect_error<InvalidArgument>([&] { co.store_mask(-64); }, "must not be negative",
                                "negative length");
  expect_error<InvalidArgument>([&] { co.store_mask(64, -1); }, "start_token", "negative start");
  expect_error<InvalidArgument>([&] { co.store_mask(64, 0, -3); }, "num_prompt_tokens",
                                "negative prompt");
  expect_error<InvalidArgument>([&] { co.chunk_keys({}, 24); }, "positive multiple",
                                "chunk_keys block 24");
  expect_error<InvalidArgument>([&] { co.chunk_keys({}, 0); }, "positive multiple",
                                "chunk_keys block 0");
}

TEST(ErrorInput, BadIndexArgumentsAreTypedErrorsAndApplyNothing) {
  BlockIndex index;
  std::vector<BlockDigest> keys(3);
  keys[1].bytes[0] = 1;
  keys[2].bytes[0] = 2;
  expect_error<InvalidArgument>([&] { index.insert(kMaxNamespace + 1, 0, keys); },
                                "exceeds the 24-bit", "namespace 2^24");
  expect_error<InvalidArgument>([&] { index.insert(0, -1, keys); }, "group id -1", "group -1");
  expect_error<InvalidArgument>([&] { index.insert(0, kMaxGroups, keys); }, "group id 32",
                                "group 32");
  const std::vector<std::int32_t> two_groups = {0, 1};
  expect_error<InvalidArgument>([&] { index.insert(0, two_groups, keys); },
                                "2 group ids for 3 keys", "group id count");
  const std::vector<std::int32_t> bad_groups = {0, 1, 99};
  expect_error<InvalidArgument>([&] { index.insert(0, bad_groups, keys); }, "group_ids[2] = 99",
                                "one bad group id");
  expect_error<InvalidArgument>([&] { index.contains(0, 0, keys, nullptr); }, "out is null",
                                "null output");
  EXPECT_EQ(index.size(), 0U) << "a rejected call applied keys";
  auto options = [](double load, std::size_t max) {
    BlockIndexOptions o;
    o.max_load_factor = load;
    o.max_capacity = max;
    return o;
  };
  expect_error<InvalidArgument>([&] { BlockIndex{options(0.0, 0)}; }, "max_load_factor",
                                "load factor 0");
  expect_error<InvalidArgument>([&] { BlockIndex{options(1.0, 0)}; }, "max_load_factor",
                                "load factor 1");
  expect_error<InvalidArgument>(
      [&] { BlockIndex{options(std::numeric_limits<double>::quiet_NaN(), 0)}; }, "max_load_factor",
      "load factor NaN");
  expect_error<InvalidArgument>([&] { BlockIndex{options(0.8, 5)}; }, "max_capacity",
                                "max_capacity 5");
}

TEST(ErrorInput, AbsurdIndexCapacityIsAnErrorNotACrash) {
  // 2^50 slots is past any address space: the allocation fails and must surface as
  // CapacityExceeded. (Under ASan this needs allocator_may_return_null=1, which
  // scripts/sanitizers.sh sets: that is the behaviour of the real allocator.)
  BlockIndexOptions o;
  o.initial_capacity = std::size_t{1} << 50;
  expect_error<CapacityExceeded>([&] { BlockIndex{o}; }, "cannot allocate", "2^50 slots");
}

// Former findings of fuzz_vectors (fuzz/findings/README.md): absurd sizes overflowed the
// max_length check (UBSan) and made store_mask allocate terabytes (ASan).
TEST(ErrorInput, AbsurdSizesAreErrorsNotUndefinedBehaviour) {
  Config big;
  big.hash_block_size = std::int64_t{1} << 62;
  big.scheduler_block_size = big.hash_block_size;
  big.groups = {GroupSpec::full_attention(big.hash_block_size)};
  try {
    const Coordinator co(big);
    const std::vector<BlockDigest> one(1);
    const KeySet store;
    // Either the configuration is rejected, or the lookup runs without overflow.
    EXPECT_EQ(co.find_longest_cache_hit(one, 5, store).hit_length, 0);
  } catch (const InvalidConfig&) {
  }
  Config tiny;
  tiny.hash_block_size = 1;
  tiny.scheduler_block_size = 1;
  tiny.retention_interval = 0;
  tiny.groups = {GroupSpec::sliding_window_attention(1, 4)};
  const Coordinator co(tiny);
  expect_error<InvalidArgument>([&] { co.store_mask(std::int64_t{4} * 1000 * 1000 * 1000 * 1000); },
                                "aligned_token_len", "a 4 TB store mask");
}

}  // namespace
}  // namespace prefixhit
