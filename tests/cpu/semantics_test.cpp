// Versioned semantics (issue 15, SEMANTICS.md 11), exact spec identity and max_length past the
// hashes (issue 10), on hand-worked examples. The vector folders cover the rest.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"

namespace prefixhit {
namespace {

std::vector<BlockDigest> numbered_hashes(std::size_t n) {
  std::vector<BlockDigest> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].bytes[0] = static_cast<std::uint8_t>(i & 0xFF);
    out[i].bytes[31] = 0xCD;
  }
  return out;
}

Config make_config(Semantics semantics, std::int64_t h, std::int64_t s,
                   std::vector<GroupSpec> groups, bool use_eagle = false) {
  Config c;
  c.semantics = semantics;
  c.hash_block_size = h;
  c.scheduler_block_size = s;
  c.use_eagle = use_eagle;
  c.groups = std::move(groups);
  return c;
}

std::vector<bool> bools(const std::string& pattern) {
  std::vector<bool> out;
  for (char c : pattern) {
    out.push_back(c == 'T');
  }
  return out;
}

std::vector<bool> as_bools(const ChunkMask& mask) {
  std::vector<bool> out;
  for (std::int64_t c = mask.first_chunk; c < mask.end_chunk; ++c) {
    out.push_back(mask.contains(c));
  }
  return out;
}

std::vector<std::int64_t> kept(const ChunkMask& mask) {
  std::vector<std::int64_t> out;
  for (std::int64_t c = mask.first_chunk; c < mask.end_chunk; ++c) {
    if (mask.contains(c)) {
      out.push_back(c);
    }
  }
  return out;
}

constexpr Semantics kBoth[] = {Semantics::pr49069, Semantics::vllm_0_33};

TEST(SemanticsNames, RoundTripAndRejectUnknown) {
  EXPECT_EQ(parse_semantics("pr49069"), Semantics::pr49069);
  EXPECT_EQ(parse_semantics("vllm-0.33"), Semantics::vllm_0_33);
  EXPECT_STREQ(to_string(Semantics::vllm_0_33), "vllm-0.33");
  EXPECT_THROW(parse_semantics("vllm-0.34"), InvalidArgument);
  EXPECT_EQ(Config{}.semantics, Semantics::pr49069);  // the C++ default keeps old results
}

// Issue 10's example: the EAGLE window group differs from the plain one only in head_size_v.
TEST(SpecIdentity, IssueExampleKeepsTheEagleWindowGroupApart) {
  for (Semantics sem : kBoth) {
    GroupSpec fa = GroupSpec::full_attention(64);
    fa.num_kv_heads = 8;
    fa.head_size = 64;
    GroupSpec swa = GroupSpec::sliding_window_attention(16, 32);
    GroupSpec swa_v = GroupSpec::sliding_window_attention(16, 32, true);
    swa_v.identity = R"({"head_size_v":128})";
    const Coordinator c(make_config(sem, 16, 64, {fa, swa, swa_v}, true));
    EXPECT_EQ(c.eagle_group_ids(), std::vector<int>({2})) << to_string(sem);
    ASSERT_EQ(c.spec_groups().size(), 3U);
    const auto masks = c.store_mask(128, 0, 130);
    EXPECT_EQ(as_bools(masks[1]), bools("FFTTFFTT"));
    EXPECT_EQ(as_bools(masks[2]), bools("FFTTTFTT"));
    // Without the identity the two window groups merge, as before.
    swa_v.identity.clear();
    const Coordinator merged(make_config(sem, 16, 64, {fa, swa, swa_v}, true));
    EXPECT_EQ(merged.eagle_group_ids(), std::vector<int>({1, 2}));
    EXPECT_EQ(merged.spec_groups().size(), 2U);
  }
}

TEST(SpecIdentity, TyposOfKnownFieldsAreToldApartFromRealExtraFields) {
  EXPECT_EQ(spec_field_typo("blok_size"), "block_size");
  EXPECT_EQ(spec_field_typo("Block-Size"), "block_size");
  EXPECT_EQ(spec_field_typo("slidingwindow"), "sliding_window");
  EXPECT_EQ(spec_field_typo("dtyp"), "dtype");
  EXPECT_EQ(spec_field_typo("eagel"), "eagle");
  for (const char* real : {"head_size_v", "dtypes", "shapes", "compress_ratio", "page_size_padded",
                           "kv_quant_mode", "block_size"}) {
    EXPECT_TRUE(spec_field_typo(real).empty()) << real;
  }
}

TEST(Merging, CoverageWindowUnder033) {
  GroupSpec a = GroupSpec::sliding_window_attention(16, 32);
  a.extra_retained_tokens = 16;
  const GroupSpec b = GroupSpec::sliding_window_attention(16, 48);
  const GroupSpec c = GroupSpec::sliding_window_attention(16, 32);
  EXPECT_TRUE(a.same_spec(b, Semantics::vllm_0_33));
  EXPECT_FALSE(a.same_spec(c, Semantics::vllm_0_33));
  EXPECT_FALSE(a.same_spec(b, Semantics::pr49069));
  // pr49069 has no such field: a configuration using it is refused, not guessed at.
  EXPECT_THROW(Coordinator(make_config(Semantics::pr49069, 16, 16, {a})), InvalidConfig);
  EXPECT_THROW(
      Coordinator(make_config(Semantics::pr49069, 16, 16, {GroupSpec::circular_buffer(16)})),
      InvalidConfig);
}

TEST(PartialHits, EngineRuleOf111) {
  const GroupSpec fa = GroupSpec::full_attention(32);
  const GroupSpec mamba = GroupSpec::mamba(32, MambaCacheMode::align);
  const std::vector<GroupSpec> fa_mamba = {fa, mamba};
  EXPECT_TRUE(partial_hits_rule(fa_mamba, 16));
  const std::vector<GroupSpec> lone = {mamba};
  EXPECT_FALSE(partial_hits_rule(lone, 16));  // a lone Mamba group never gets partial hits
  const std::vector<GroupSpec> with_wide_window = {fa, mamba,
                                                   GroupSpec::sliding_window_attention(32, 64)};
  EXPECT_FALSE(partial_hits_rule(with_wide_window, 16));
  const std::vector<GroupSpec> with_window = {fa, mamba,
                                              GroupSpec::sliding_window_attention(16, 64)};
  EXPECT_TRUE(partial_hits_rule(with_window, 16));
  // A non-cacheable wide group does not switch it off, but counts as a group.
  const std::vector<GroupSpec> with_buffer = {mamba, GroupSpec::circular_buffer(48)};
  EXPECT_TRUE(partial_hits_rule(with_buffer, 16));
  const std::vector<GroupSpec> equal_blocks = {fa, GroupSpec::mamba(16, MambaCacheMode::align)};
  EXPECT_FALSE(partial_hits_rule(equal_blocks, 16));
  const std::vector<GroupSpec> dcp = {fa, GroupSpec::mamba(16, MambaCacheMode::align),
                                      GroupSpec::sliding_window_attention(8, 64)};
  EXPECT_TRUE(partial_hits_rule(dcp, 16, 2));  // B >= H with dcp > 1; B * dcp == H
  EXPECT_THROW(partial_hits_rule(fa_mamba, 0), InvalidArgument);
  EXPECT_THROW(partial_hits_rule(fa_mamba, 16, 0), InvalidArgument);
}

TEST(PartialHits, InputUnder033AndCheckedUnderPr49069) {
  const std::vector<GroupSpec> groups = {GroupSpec::full_attention(32),
                                         GroupSpec::sliding_window_attention(32, 64)};
  Config forced = make_config(Semantics::vllm_0_33, 16, 32, groups);
  forced.enable_partial_hash_hits = true;
  const Coordinator c(forced);
  EXPECT_TRUE(c.enable_partial_hash_hits());
  EXPECT_EQ(c.lookup_alignment(), 16);
  Config old = make_config(Semantics::pr49069, 16, 32, groups);
  old.enable_partial_hash_hits = false;  // agrees with rule 1.3
  EXPECT_NO_THROW(Coordinator{old});
  old.enable_partial_hash_hits = true;
  EXPECT_THROW(Coordinator{old}, InvalidConfig);
}

TEST(NonCacheable, EmptyListsAndKZero) {
  GroupSpec bounded = GroupSpec::sliding_window_mla(24, 48);
  bounded.bounded_replay = true;
  const Coordinator only(
      make_config(Semantics::vllm_0_33, 16, 32, {GroupSpec::circular_buffer(24), bounded}));
  EXPECT_TRUE(only.spec_groups().empty());
  const auto hashes = numbered_hashes(4);
  const KeySet empty;
  const LookupResult r = only.find_longest_cache_hit(hashes, 50, empty);
  EXPECT_EQ(r.hit_length, 50);  // K = 0: nothing shortens max_length
  EXPECT_EQ(r.groups[0].num_blocks, 0);
  EXPECT_EQ(r.groups[1].num_blocks, 0);
  // Masks: a circular buffer is every chunk; a window with S mod B != 0 too.
  const auto masks = only.store_mask(64);
  EXPECT_TRUE(masks[0].is_all());
  EXPECT_TRUE(masks[1].is_all());

  const Coordinator mixed(make_config(Semantics::vllm_0_33, 16, 32,
                                      {GroupSpec::full_attention(32), GroupSpec::circular_buffer(8),
                                       GroupSpec::full_attention(16)}));
  KeySet store;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    store.insert(0, hashes[i]);
    store.insert(1, hashes[i]);
    store.insert(2, hashes[i]);
  }
  const LookupResult m = mixed.find_longest_cache_hit(hashes, 64, store);
  EXPECT_EQ(m.hit_length, 64);
  EXPECT_EQ(m.groups[0].num_blocks, 2);
  EXPECT_EQ(m.groups[1].num_blocks, 0);
  EXPECT_EQ(m.groups[2].num_blocks, 4);
}

TEST(FixedPoint, EveryFullAttentionSpecGroupIsTruncatedUnder033) {
  const auto hashes = numbered_hashes(8);
  KeySet store;
  for (std::size_t i = 0; i < 8; ++i) {
    store.insert(0, hashes[i]);
  }
  for (std::size_t j = 0; j < 4; ++j) {
    store.insert(1, hashes[2 * j + 1]);
  }
  store.insert(2, hashes[1]);
  for (Semantics sem : kBoth) {
    const Coordinator c(make_config(sem, 16, 32,
                                    {GroupSpec::full_attention(16), GroupSpec::full_attention(32),
                                     GroupSpec::sliding_window_attention(16, 16)}));
    const LookupResult r = c.find_longest_cache_hit(hashes, 127, store);
    EXPECT_EQ(r.hit_length, 32);
    EXPECT_EQ(r.groups[0].num_blocks, 2);
    EXPECT_EQ(r.groups[1].num_blocks, sem == Semantics::vllm_0_33 ? 1 : 3);
  }
}

// SEMANTICS.md 11.7's example: FA(32) + SWA(8, w=8, eagle), H=8, S=32, R=0, length 128.
TEST(Masks, EagleReplayBoundariesUnder033) {
  Config config =
      make_config(Semantics::vllm_0_33, 8, 32,
                  {GroupSpec::full_attention(32), GroupSpec::sliding_window_attention(8, 8, true)});
  config.retention_interval = 0;
  const Coordinator c(config);
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(kept(c.store_mask(128, 0, 0)[1]), V({0}));
  EXPECT_EQ(kept(c.store_mask(128, 0, 1)[1]), V({0}));
  EXPECT_EQ(kept(c.store_mask(128, 0, 33)[1]), V({0}));
  EXPECT_EQ(kept(c.store_mask(128, 0, 96)[1]), V({3, 4, 7, 8}));
  EXPECT_EQ(kept(c.store_mask(128, 0, 100)[1]), V({7, 8}));
  EXPECT_EQ(kept(c.store_mask(128, 0, -1)[1]), V({0}));  // the reference floors -1 too
  config.semantics = Semantics::pr49069;
  const Coordinator old(config);
  EXPECT_EQ(kept(old.store_mask(128, 0, 33)[1]), V({3, 4}));
  EXPECT_TRUE(kept(old.store_mask(128, 0, 0)[1]).empty());
  EXPECT_THROW(old.store_mask(128, 0, -1), InvalidArgument);
}

TEST(Masks, MambaIsNeverStoredUnder033) {
  Config config =
      make_config(Semantics::vllm_0_33, 16, 16,
                  {GroupSpec::full_attention(16), GroupSpec::mamba(16, MambaCacheMode::all)});
  config.retention_interval = 32;
  const Coordinator c(config);
  const auto masks = c.store_mask(128, 0, 90);
  ASSERT_FALSE(masks[1].is_all());
  EXPECT_TRUE(kept(masks[1]).empty());
  EXPECT_EQ(masks[1].end_chunk - masks[1].first_chunk, 8);
  EXPECT_TRUE(c.lookup_mask(128)[1].is_all());
}

// Issue 10: past the last hash the reference stops there for full attention and indexes past
// the hash list (IndexError) where a finder reads a block beyond it.
TEST(MaxLength, PastTheHashesFollowsTheReferencePerFinder) {
  const auto hashes = numbered_hashes(4);  // 64 tokens at H = 16
  KeySet all;
  for (const BlockDigest& d : hashes) {
    all.insert(0, d);
  }
  for (Semantics sem : kBoth) {
    const Coordinator fa(make_config(sem, 16, 16, {GroupSpec::full_attention(16)}));
    EXPECT_EQ(fa.find_longest_cache_hit(hashes, 128, all).hit_length, 64);
    EXPECT_EQ(fa.load_mask(hashes, 128).groups[0].num_blocks, 4);

    const Coordinator swa(make_config(sem, 16, 16, {GroupSpec::sliding_window_attention(16, 32)}));
    EXPECT_THROW(swa.find_longest_cache_hit(hashes, 80, all), InvalidArgument);
    EXPECT_EQ(swa.find_longest_cache_hit(hashes, 79, all).hit_length, 64);

    const Coordinator mamba(make_config(sem, 16, 16, {GroupSpec::mamba(16, MambaCacheMode::all)}));
    EXPECT_THROW(mamba.find_longest_cache_hit(hashes, 80, all), InvalidArgument);

    // Chunked local reads only from the chunk start: placeholders alone never fail.
    const Coordinator local(make_config(sem, 16, 16, {GroupSpec::chunked_local(16, 64)}));
    EXPECT_EQ(local.find_longest_cache_hit(hashes, 128, KeySet{}).hit_length, 128);
    EXPECT_THROW(local.find_longest_cache_hit(hashes, 100, KeySet{}), InvalidArgument);
    EXPECT_THROW(local.find_longest_cache_hit(hashes, 80, KeySet{}), InvalidArgument);
    EXPECT_EQ(local.find_longest_cache_hit(hashes, 64, KeySet{}).hit_length, 64);

    EXPECT_THROW(fa.find_longest_cache_hit(hashes, -1, all), InvalidArgument);
    EXPECT_THROW(fa.find_longest_cache_hit(hashes, kMaxLookupTokens + 1, all), InvalidArgument);
  }
}

TEST(MaxLength, BatchFollowsTheOneByOneRule) {
  const Coordinator fa(make_config(Semantics::vllm_0_33, 16, 16, {GroupSpec::full_attention(16)}));
  const auto hashes = numbered_hashes(4);
  KeySet all;
  for (const BlockDigest& d : hashes) {
    all.insert(0, d);
  }
  const std::vector<std::int64_t> offsets = {0, 4};
  const std::vector<std::int64_t> lengths = {1000};
  LookupBatch batch;
  batch.digests = span<const BlockDigest>(hashes);
  batch.offsets = span<const std::int64_t>(offsets);
  batch.max_lengths = span<const std::int64_t>(lengths);
  EXPECT_EQ(fa.find_longest_cache_hits(batch, all).hit_lengths[0], 64);

  const Coordinator swa(
      make_config(Semantics::vllm_0_33, 16, 16, {GroupSpec::sliding_window_attention(16, 32)}));
  try {
    swa.find_longest_cache_hits(batch, all);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("request 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("past the last of the 4 hashes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace prefixhit
