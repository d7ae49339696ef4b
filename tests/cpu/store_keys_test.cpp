// vLLM's Mooncake store keys: formatting, parsing and rank namespaces.
#include "prefixhit/store_keys.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "prefixhit/errors.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::random_digest;
using testing::seed_note;
using testing::test_seed;

BlockDigest counting_digest() {
  BlockDigest d;
  for (std::size_t i = 0; i < d.bytes.size(); ++i) {
    d.bytes[i] = static_cast<std::uint8_t>(i * 17);
  }
  return d;
}

TEST(StoreKeys, FormatIsVllms) {
  const BlockDigest d = counting_digest();
  const std::string hex = digest_hex(d);
  EXPECT_EQ(hex.substr(0, 8), "00112233");
  EXPECT_EQ(hex.size(), 64U);
  EXPECT_EQ(store_key({"", "Qwen3-32B"}, {1, 0, 0, 2}, 3, d),
            "Qwen3-32B@tp_rank:1@pcp0@dcp0@pp_rank:2@group:3@" + hex);
  EXPECT_EQ(store_key({"tenant-a", "m"}, {0, 1, 1, 0}, 0, d),
            "tenant-a@m@tp_rank:0@pcp1@dcp1@pp_rank:0@group:0@" + hex);
  EXPECT_EQ(store_key_prefix({"", "m"}, {}, 7), "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:7");
}

TEST(StoreKeys, ParseRoundTripsRandomKeys) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const char* prefixes[] = {"", "tenant", "a@b", "ns@x@y"};
  const char* models[] = {"Qwen3-32B", "DeepSeek-V4-Flash", "m", "llama.3_1"};
  for (int trial = 0; trial < 500; ++trial) {
    const StoreKeyFormat format{prefixes[rng() % 4], models[rng() % 4]};
    const RankNamespace ns{static_cast<int>(rng() % 64), static_cast<int>(rng() % 4),
                           static_cast<int>(rng() % 8), static_cast<int>(rng() % 16)};
    const int group = static_cast<int>(rng() % 32);
    const BlockDigest d = random_digest(rng);
    const std::string key = store_key(format, ns, group, d);
    const StoreKey parsed = parse_store_key(key);
    EXPECT_EQ(parsed.cache_prefix, format.cache_prefix) << key;
    EXPECT_EQ(parsed.model_name, format.model_name) << key;
    EXPECT_EQ(parsed.ns, ns) << key;
    EXPECT_TRUE(parsed.has_group);
    EXPECT_EQ(parsed.group_id, group);
    ASSERT_EQ(parsed.digest.size(), 32U);
    EXPECT_TRUE(std::equal(parsed.digest.begin(), parsed.digest.end(), d.bytes.begin()));
  }
}

TEST(StoreKeys, ParsesShortDigestsUppercaseAndTheGrouplessForm) {
  const StoreKey a = parse_store_key("m@tp_rank:0@pcp0@dcp0@pp_rank:1@group:2@0011AABBccddeeff");
  EXPECT_EQ(a.digest.size(), 8U);
  EXPECT_EQ(a.digest[2], 0xAA);
  EXPECT_EQ(a.group_id, 2);
  const StoreKey b =
      parse_store_key("m@tp_rank:3@pcp0@dcp0@pp_rank:0@00112233445566778899aabbccddeeff");
  EXPECT_FALSE(b.has_group);
  EXPECT_EQ(b.group_id, 0);
  EXPECT_EQ(b.ns.tp_rank, 3);
  EXPECT_EQ(b.digest.size(), 16U);
}

TEST(StoreKeys, RejectsOtherKeysWithAReason) {
  const char* bad[] = {
      "12345",                                        // a plain integer key
      "0x1f",                                         //
      "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@",     // empty digest
      "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@abc",  // odd digest
      "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@zz",   // not hex
      "m@tp_rank:x@pcp0@dcp0@pp_rank:0@group:0@00",   // bad tp rank
      "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:-1@00",  // negative group
      "m@pcp0@dcp0@head_or_tp_rank:0@pp_rank:0@00",   // vLLM Ascend's layout
      "@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@00",    // empty model
  };
  for (const char* key : bad) {
    EXPECT_FALSE(try_parse_store_key(key).has_value()) << key;
    try {
      parse_store_key(key);
      ADD_FAILURE() << "parsed " << key;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("not a vLLM Mooncake store key"), std::string::npos);
    }
  }
  std::string long_hex(66, 'a');
  EXPECT_FALSE(try_parse_store_key("m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@" + long_hex));
}

TEST(StoreKeys, ReplicationFactorsFollowTheSpecKind) {
  const ParallelLayout tp8{8, 1, 1, 1, 4};
  EXPECT_EQ(tp_replication_factor(GroupSpec::full_attention(16), tp8), 2);
  EXPECT_EQ(tp_replication_factor(GroupSpec::sliding_window_attention(16, 32), tp8), 2);
  EXPECT_EQ(tp_replication_factor(GroupSpec::mla_attention(16), tp8), 8);
  EXPECT_EQ(tp_replication_factor(GroupSpec::sliding_window_mla(16, 32), tp8), 8);
  EXPECT_EQ(tp_replication_factor(GroupSpec::mamba(16, MambaCacheMode::all), tp8), 1);
  const ParallelLayout dcp{8, 1, 2, 1, 4};
  EXPECT_EQ(tp_replication_factor(GroupSpec::full_attention(16), dcp), 1);
  EXPECT_EQ(tp_replication_factor(GroupSpec::mla_attention(16), dcp), 1);
  const ParallelLayout many_heads{4, 1, 1, 1, 32};
  EXPECT_EQ(tp_replication_factor(GroupSpec::full_attention(16), many_heads), 1);
  EXPECT_THROW(tp_replication_factor(GroupSpec::full_attention(16), ParallelLayout{0, 1, 1, 1, 1}),
               InvalidArgument);
}

TEST(StoreKeys, RankNamespacesInVllmsOrder) {
  const ParallelLayout layout{4, 2, 1, 2, 2};
  const auto spaces = rank_namespaces(layout, 2);  // 2 TP shards x 2 pcp x 2 pp
  ASSERT_EQ(spaces.size(), 8U);
  EXPECT_EQ(spaces[0], (RankNamespace{0, 0, 0, 0}));
  EXPECT_EQ(spaces[1], (RankNamespace{0, 0, 0, 1}));
  EXPECT_EQ(spaces[2], (RankNamespace{1, 0, 0, 0}));
  EXPECT_EQ(spaces[4], (RankNamespace{0, 1, 0, 0}));
  const auto dcp = rank_namespaces(ParallelLayout{4, 1, 2, 1, 1}, 1);
  ASSERT_EQ(dcp.size(), 4U);
  for (const RankNamespace& ns : dcp) {
    EXPECT_EQ(ns.dcp_rank, ns.tp_rank % 2);
  }
  EXPECT_THROW(rank_namespaces(ParallelLayout{4, 1, 2, 1, 1}, 2), InvalidArgument);
  EXPECT_THROW(rank_namespaces(ParallelLayout{4, 1, 1, 1, 1}, 5), InvalidArgument);
}

}  // namespace
}  // namespace prefixhit
