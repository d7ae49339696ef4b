// Unit tests of the coordinator: validation, spec groups, each finder, the fixed point, masks,
// chunk keys and the integer helpers, on the worked examples of SEMANTICS.md.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/hashing.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

std::vector<BlockDigest> numbered_hashes(std::size_t n) {
  std::vector<BlockDigest> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].bytes[0] = static_cast<std::uint8_t>(i & 0xFF);
    out[i].bytes[1] = static_cast<std::uint8_t>(i >> 8);
    out[i].bytes[31] = 0xAB;
  }
  return out;
}

Config make_config(std::int64_t h, std::int64_t s, std::vector<GroupSpec> groups,
                   bool use_eagle = false) {
  Config c;
  c.hash_block_size = h;
  c.scheduler_block_size = s;
  c.use_eagle = use_eagle;
  c.groups = std::move(groups);
  return c;
}

/// Stores block keys `blocks` of group `group` (block size in hashes: s).
void store_blocks(KeySet& store, int group, const std::vector<BlockDigest>& hashes, std::size_t s,
                  const std::vector<std::size_t>& blocks) {
  for (std::size_t j : blocks) {
    store.insert(group, hashes[(j + 1) * s - 1]);
  }
}

std::vector<bool> bools(const std::string& pattern) {
  std::vector<bool> out;
  for (char c : pattern) {
    out.push_back(c == 'T');
  }
  return out;
}

std::vector<std::int64_t> kept_chunks(const ChunkMask& mask) {
  std::vector<std::int64_t> out;
  for (std::int64_t c = mask.first_chunk; c < mask.end_chunk; ++c) {
    if (mask.contains(c)) {
      out.push_back(c);
    }
  }
  return out;
}

TEST(IntegerHelpers, FloorAndCeilFollowPython) {
  using detail::ceil_div;
  using detail::floor_div;
  using detail::floor_mod;
  EXPECT_EQ(floor_div(-1, 32), -1);
  EXPECT_EQ(floor_div(-32, 32), -1);
  EXPECT_EQ(floor_div(-33, 32), -2);
  EXPECT_EQ(floor_div(7, 2), 3);
  EXPECT_EQ(ceil_div(7, 2), 4);
  EXPECT_EQ(ceil_div(-7, 2), -3);
  EXPECT_EQ(ceil_div(0, 5), 0);
  EXPECT_EQ(floor_mod(-1, 16), 15);
  EXPECT_EQ(floor_mod(17, 16), 1);
}

// floor_div and floor_mod shift and mask for a power-of-two divisor: on fresh random operands of
// both signs, every divisor 1..4096 (powers of two and not) and some past 2^40 must give
// Python's `//` and `%`, computed here with plain division and a sign fix.
TEST(IntegerHelpers, PowerOfTwoShortcutsMatchDivision) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  const auto python_div = [](std::int64_t a, std::int64_t b) {
    const std::int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
  };
  std::vector<std::int64_t> divisors;
  for (std::int64_t b = 1; b <= 4096; ++b) {
    divisors.push_back(b);
  }
  for (int e = 40; e < 62; ++e) {
    divisors.push_back(std::int64_t{1} << e);
    divisors.push_back((std::int64_t{1} << e) + 1);
  }
  for (const std::int64_t b : divisors) {
    for (int i = 0; i < 16; ++i) {
      const auto a = static_cast<std::int64_t>(rng() >> (rng() % 64)) * (rng() % 2 == 0 ? 1 : -1);
      const std::int64_t q = python_div(a, b);
      ASSERT_EQ(detail::floor_div(a, b), q) << a << " // " << b;
      // a - q * b in wrapping arithmetic: the product may overflow where the remainder fits.
      const auto r =
          static_cast<std::int64_t>(static_cast<std::uint64_t>(a) -
                                    static_cast<std::uint64_t>(q) * static_cast<std::uint64_t>(b));
      ASSERT_EQ(detail::floor_mod(a, b), r) << a << " % " << b;
      ASSERT_EQ(detail::ceil_div(a, b), -python_div(-a, b)) << a << " / " << b;
    }
  }
  EXPECT_EQ(detail::floor_div(-5, -2), 2);  // a negative divisor keeps the division
  EXPECT_EQ(detail::floor_mod(5, -2), -1);
  // -(2^63 - 1) = -4 * (2^61 + 1) + 5, where -4 * (2^61 + 1) itself overflows (found by UBSan on
  // a fresh seed); and INT64_MIN % -1, which traps.
  const std::int64_t big = (std::int64_t{1} << 61) + 1;
  EXPECT_EQ(detail::floor_div(std::numeric_limits<std::int64_t>::min() + 1, big), -4);
  EXPECT_EQ(detail::floor_mod(std::numeric_limits<std::int64_t>::min() + 1, big), 5);
  EXPECT_EQ(detail::floor_mod(std::numeric_limits<std::int64_t>::min(), -1), 0);
  EXPECT_EQ(detail::floor_mod(-7, -1), 0);
}

TEST(Validation, RejectsEachRuleWithANamedField) {
  auto expect_invalid = [](const Config& c, const std::string& fragment) {
    try {
      Coordinator coordinator(c);
      ADD_FAILURE() << "expected InvalidConfig mentioning '" << fragment << "'";
    } catch (const InvalidConfig& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_EQ(e.kind(), ErrorKind::invalid_config);
    }
  };
  expect_invalid(make_config(16, 64, {GroupSpec::full_attention(24)}), "groups[0].block_size");
  expect_invalid(make_config(16, 40, {GroupSpec::full_attention(16)}), "scheduler_block_size");
  expect_invalid(make_config(16, 32, {GroupSpec::full_attention(64)}), "groups[0].block_size");
  expect_invalid(make_config(16, 64, {}), "at least one");
  expect_invalid(make_config(0, 64, {GroupSpec::full_attention(16)}), "hash_block_size");
  expect_invalid(make_config(16, 64, {GroupSpec::full_attention(-16)}), "block_size");
  GroupSpec no_window = GroupSpec::sliding_window_attention(16, 32);
  no_window.sliding_window.reset();
  expect_invalid(make_config(16, 64, {no_window}), "sliding_window");
  GroupSpec zero_window = GroupSpec::sliding_window_attention(16, 0);
  expect_invalid(make_config(16, 64, {zero_window}), "sliding_window");
  GroupSpec bad_mamba = GroupSpec::mamba(16, MambaCacheMode::all);
  bad_mamba.sliding_window = 8;
  expect_invalid(make_config(16, 64, {bad_mamba}), "not a field");
  Config negative_r = make_config(16, 64, {GroupSpec::full_attention(16)});
  negative_r.retention_interval = -1;
  expect_invalid(negative_r, "retention_interval");
  std::vector<GroupSpec> many(kMaxGroups + 1, GroupSpec::full_attention(16));
  expect_invalid(make_config(16, 64, many), "at most");
}

TEST(SpecGroups, MergeOrderAndEagleFlags) {
  // SEMANTICS.md 2.3: [FA(64), SWA(16,w=32), SWA(16,w=32, eagle)].
  const Coordinator c(
      make_config(16, 64,
                  {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32),
                   GroupSpec::sliding_window_attention(16, 32, true)},
                  true));
  ASSERT_EQ(c.spec_groups().size(), 2U);
  EXPECT_EQ(c.spec_groups()[0].group_ids, (std::vector<int>{0}));
  EXPECT_FALSE(c.spec_groups()[0].use_eagle);
  EXPECT_EQ(c.spec_groups()[1].group_ids, (std::vector<int>{1, 2}));
  EXPECT_TRUE(c.spec_groups()[1].use_eagle);
  EXPECT_EQ(c.eagle_group_ids(), (std::vector<int>{1, 2}));
}

TEST(SpecGroups, FullAttentionSortsFirstAndKindsNeverMerge) {
  const Coordinator c(
      make_config(16, 64,
                  {GroupSpec::sliding_window_attention(16, 32), GroupSpec::mla_attention(16),
                   GroupSpec::full_attention(16), GroupSpec::sliding_window_mla(16, 32)}));
  ASSERT_EQ(c.spec_groups().size(), 4U);
  EXPECT_EQ(c.spec_groups()[0].group_ids, (std::vector<int>{1}));
  EXPECT_EQ(c.spec_groups()[1].group_ids, (std::vector<int>{2}));
  EXPECT_EQ(c.spec_groups()[2].group_ids, (std::vector<int>{0}));
  EXPECT_EQ(c.spec_groups()[3].group_ids, (std::vector<int>{3}));
}

TEST(SpecGroups, EagleFallbackFlagsEverySpecGroup) {
  const Coordinator c(make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)}, true));
  EXPECT_TRUE(c.spec_groups()[0].use_eagle);
  EXPECT_TRUE(c.spec_groups()[1].use_eagle);
  EXPECT_EQ(c.eagle_group_ids(), (std::vector<int>{0, 1}));
  // Member flags count even with use_eagle off.
  const Coordinator off(make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32, true)}));
  EXPECT_EQ(off.eagle_group_ids(), (std::vector<int>{1}));
}

TEST(SpecGroups, PartialHitsSetTheAlignment) {
  const Coordinator partial(make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::mamba(64, MambaCacheMode::align)}));
  EXPECT_TRUE(partial.enable_partial_hash_hits());
  EXPECT_EQ(partial.lookup_alignment(), 16);
  EXPECT_EQ(partial.align_lookup_length(100), 96);
  const Coordinator whole(make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::mamba(64, MambaCacheMode::all)}));
  EXPECT_FALSE(whole.enable_partial_hash_hits());
  EXPECT_EQ(whole.align_lookup_length(100), 64);
}

TEST(SlidingWindow, ExamplesOfSemantics42) {
  const Coordinator c(make_config(16, 16, {GroupSpec::sliding_window_attention(16, 32)}));
  const auto hashes = numbered_hashes(9);
  KeySet store;
  store_blocks(store, 0, hashes, 1, {0, 1, 2, 4, 5});
  LookupResult r = c.find_longest_cache_hit(hashes, 128, store);
  EXPECT_EQ(r.hit_length, 96);
  EXPECT_EQ(r.mask(0), bools("FFFFTT"));
  KeySet sparse;
  store_blocks(sparse, 0, hashes, 1, {0, 2, 4, 7});
  r = c.find_longest_cache_hit(hashes, 128, sparse);
  EXPECT_EQ(r.hit_length, 16);
  EXPECT_EQ(r.mask(0), bools("T"));
  KeySet lone;
  store_blocks(lone, 0, hashes, 1, {1});
  EXPECT_EQ(c.find_longest_cache_hit(hashes, 128, lone).hit_length, 0);
}

TEST(SlidingWindow, EaglePeekBlock) {
  // FA(64)+SWA(16,w=32), A=64, eagle on: SWA blocks {2,3,4} -> 64; {2,3} -> 0.
  const Coordinator c(make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)}, true));
  const auto hashes = numbered_hashes(16);
  KeySet store;
  store_blocks(store, 0, hashes, 4, {0, 1, 2});
  store_blocks(store, 1, hashes, 1, {2, 3, 4});
  LookupResult r = c.find_longest_cache_hit(hashes, 128, store);
  EXPECT_EQ(r.hit_length, 64);
  EXPECT_EQ(r.mask(1), bools("FFTT"));
  KeySet short_run;
  store_blocks(short_run, 0, hashes, 4, {0, 1, 2});
  store_blocks(short_run, 1, hashes, 1, {2, 3});
  EXPECT_EQ(c.find_longest_cache_hit(hashes, 128, short_run).hit_length, 0);
}

TEST(FullAttention, EagleDropWithAlignmentAboveBlockSize) {
  // FA block 16, A=S=64, 8 present blocks, M=128: 128 - 16 -> 112 -> 64.
  const Coordinator c(make_config(16, 64, {GroupSpec::full_attention(16, true)}));
  const auto hashes = numbered_hashes(9);
  KeySet store;
  store_blocks(store, 0, hashes, 1, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(c.find_longest_cache_hit(hashes, 128, store).hit_length, 64);
  EXPECT_EQ(c.find_longest_cache_hit(hashes, 128, store, false).hit_length, 128);
  const Coordinator plain(make_config(16, 64, {GroupSpec::full_attention(16)}));
  EXPECT_EQ(plain.find_longest_cache_hit(hashes, 127, store).hit_length, 64);
}

TEST(ChunkedLocal, PlaceholdersNeedNoStoreCheck) {
  const Coordinator c(make_config(16, 16, {GroupSpec::chunked_local(16, 64)}));
  const auto hashes = numbered_hashes(9);
  const KeySet empty;
  LookupResult r = c.find_longest_cache_hit(hashes, 128, empty);
  EXPECT_EQ(r.hit_length, 128);
  EXPECT_EQ(r.mask(0), bools("FFFFFFFF"));
  EXPECT_EQ(c.find_longest_cache_hit(hashes, 100, empty).hit_length, 64);
}

TEST(ChunkedLocal, RejectsEagleAndMisalignment) {
  const Coordinator eagle(make_config(16, 16, {GroupSpec::chunked_local(16, 64)}, true));
  const auto hashes = numbered_hashes(9);
  const KeySet empty;
  EXPECT_THROW(eagle.find_longest_cache_hit(hashes, 64, empty), UnsupportedEagleChunkedLocal);
  EXPECT_NO_THROW(eagle.find_longest_cache_hit(hashes, 64, empty, false));
  const Coordinator misaligned(
      make_config(16, 32, {GroupSpec::full_attention(32), GroupSpec::chunked_local(16, 64)}));
  EXPECT_THROW(misaligned.find_longest_cache_hit(hashes, 64, empty),
               UnsupportedAlignmentChunkedLocal);
}

TEST(Mamba, NeverDropsAndProbesFineHashesWithPartialHits) {
  const Coordinator c(
      make_config(16, 64, {GroupSpec::mamba(64, MambaCacheMode::align, true)}, true));
  const auto hashes = numbered_hashes(12);
  KeySet store;
  store.insert(0, hashes[6]);  // inside block 1
  const LookupResult r = c.find_longest_cache_hit(hashes, 180, store);
  EXPECT_EQ(r.hit_length, 112);
  EXPECT_EQ(r.mask(0), bools("FT"));
}

TEST(FixedPoint, DeepSeekV4FlashWorkedExample) {
  // SEMANTICS.md 5.3: save 768 tokens through the store mask, then look up 768 -> 512.
  const Coordinator c(make_config(
      4, 256,
      {GroupSpec::full_attention(256), GroupSpec::sliding_window_attention(64, 128),
       GroupSpec::sliding_window_attention(64, 128, true),
       GroupSpec::sliding_window_attention(4, 8), GroupSpec::sliding_window_attention(8, 128)},
      true));
  std::vector<std::int32_t> tokens(800);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<std::int32_t>(i * 7 + 3);
  }
  const auto hashes = hash_prompt(tokens, 4);
  KeySet store;
  const auto masks = c.store_mask(768, 0, std::nullopt);
  for (int g = 0; g < c.num_groups(); ++g) {
    const auto keys =
        c.chunk_keys(hashes, c.config().groups[static_cast<std::size_t>(g)].block_size);
    for (std::int64_t chunk = 0; chunk < masks[static_cast<std::size_t>(g)].end_chunk; ++chunk) {
      if (masks[static_cast<std::size_t>(g)].contains(chunk)) {
        store.insert(g, keys[static_cast<std::size_t>(chunk)]);
      }
    }
  }
  const LookupResult r = c.find_longest_cache_hit(hashes, 768, store);
  EXPECT_EQ(r.hit_length, 512);
  EXPECT_EQ(r.mask(0), bools("TT"));
}

TEST(FixedPoint, OnlyTheFirstFullAttentionSpecGroupIsTruncated) {
  const Coordinator c(make_config(16, 32,
                                  {GroupSpec::full_attention(16), GroupSpec::full_attention(32),
                                   GroupSpec::sliding_window_attention(16, 16)}));
  const auto hashes = numbered_hashes(8);
  KeySet store;
  store_blocks(store, 0, hashes, 1, {0, 1, 2, 3, 4, 5, 6, 7});
  store_blocks(store, 1, hashes, 2, {0, 1, 2, 3});
  store_blocks(store, 2, hashes, 1, {1});
  const LookupResult r = c.find_longest_cache_hit(hashes, 127, store);
  EXPECT_EQ(r.hit_length, 32);
  EXPECT_EQ(r.groups[0].num_blocks, 2);  // truncated to ceil(32/16)
  EXPECT_EQ(r.groups[1].num_blocks, 3);  // keeps its own list: floor(127/32) = 3 blocks
}

TEST(LookupErrors, MaxLengthOutsideTheHashesIsRejected) {
  const Coordinator c(make_config(16, 16, {GroupSpec::sliding_window_attention(16, 32)}));
  const auto hashes = numbered_hashes(4);
  const KeySet empty;
  EXPECT_THROW(c.find_longest_cache_hit(hashes, 80, empty), InvalidArgument);
  EXPECT_THROW(c.find_longest_cache_hit(hashes, -1, empty), InvalidArgument);
  EXPECT_NO_THROW(c.find_longest_cache_hit(hashes, 79, empty));
  EXPECT_THROW(c.load_mask(hashes, 80), InvalidArgument);
}

TEST(Masks, SlidingWindowExamplesOfSemantics73) {
  auto config = make_config(
      8, 32, {GroupSpec::full_attention(32), GroupSpec::sliding_window_attention(8, 8)});
  EXPECT_EQ(kept_chunks(Coordinator(config).store_mask(128)[1]),
            (std::vector<std::int64_t>{3, 7, 11, 15}));
  EXPECT_TRUE(Coordinator(config).store_mask(128)[0].is_all());
  config.retention_interval = 64;
  EXPECT_EQ(kept_chunks(Coordinator(config).store_mask(128)[1]),
            (std::vector<std::int64_t>{7, 15}));
  EXPECT_EQ(kept_chunks(Coordinator(config).store_mask(128, 0, 100)[1]),
            (std::vector<std::int64_t>{7, 11, 15}));
  config.retention_interval = 0;
  EXPECT_TRUE(kept_chunks(Coordinator(config).store_mask(128)[1]).empty());
  EXPECT_FALSE(Coordinator(config).store_mask(128)[1].is_all());
  EXPECT_EQ(kept_chunks(Coordinator(config).store_mask(128, 0, 100)[1]),
            (std::vector<std::int64_t>{11}));
  config.groups[1].eagle = true;
  const Coordinator eagle(config);
  EXPECT_EQ(kept_chunks(eagle.store_mask(128, 0, 33)[1]), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(kept_chunks(eagle.store_mask(128, 0, 1)[1]), (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(kept_chunks(eagle.store_mask(128, 0, 0)[1]).empty());
}

TEST(Masks, SlidingWindowWithEagleAndStartToken) {
  auto config = make_config(
      16, 64, {GroupSpec::full_attention(64), GroupSpec::sliding_window_attention(16, 32)});
  auto as_bools = [](const ChunkMask& m) {
    std::vector<bool> out;
    for (std::uint8_t k : *m.keep) {
      out.push_back(k != 0);
    }
    return out;
  };
  EXPECT_EQ(as_bools(Coordinator(config).store_mask(128)[1]), bools("FFTTFFTT"));
  EXPECT_EQ(as_bools(Coordinator(config).store_mask(128, 40)[1]), bools("TFFTT"));
  config.groups[1].eagle = true;
  EXPECT_EQ(as_bools(Coordinator(config).store_mask(128)[1]), bools("FFTTTFTT"));
  EXPECT_EQ(as_bools(Coordinator(config).lookup_mask(128)[1]), bools("FFTTTFTT"));
}

TEST(Masks, MambaExamplesOfSemantics74) {
  auto config = make_config(
      16, 16, {GroupSpec::full_attention(16), GroupSpec::mamba(16, MambaCacheMode::all)});
  EXPECT_TRUE(Coordinator(config).store_mask(128)[1].is_all());
  config.retention_interval = 32;
  const Coordinator c(config);
  EXPECT_EQ(kept_chunks(c.store_mask(128)[1]), (std::vector<std::int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(kept_chunks(c.store_mask(128, 0, 90)[1]), (std::vector<std::int64_t>{1, 3, 4, 5, 7}));
  const ChunkMask from40 = c.store_mask(128, 40, 90)[1];
  EXPECT_EQ(from40.first_chunk, 3);
  EXPECT_EQ(kept_chunks(from40), (std::vector<std::int64_t>{3, 4, 5, 7}));
}

TEST(Masks, UnalignedAndNegativeLengthsAreErrors) {
  const Coordinator c(make_config(16, 64, {GroupSpec::full_attention(64)}));
  EXPECT_THROW(c.store_mask(100), UnalignedLength);
  EXPECT_THROW(c.lookup_mask(32), UnalignedLength);
  EXPECT_THROW(c.store_mask(-64), InvalidArgument);
  EXPECT_THROW(c.store_mask(64, -1), InvalidArgument);
  EXPECT_THROW(c.store_mask(64, 0, -5), InvalidArgument);
  EXPECT_NO_THROW(c.store_mask(0, 0, 0));
}

TEST(ChunkKeys, LastHashOfEachWholeBlock) {
  const Coordinator c(make_config(16, 64, {GroupSpec::full_attention(64)}));
  const auto hashes = numbered_hashes(10);
  const auto keys = c.chunk_keys(hashes, 64);
  ASSERT_EQ(keys.size(), 2U);
  EXPECT_EQ(keys[0], hashes[3]);
  EXPECT_EQ(keys[1], hashes[7]);
  EXPECT_EQ(c.chunk_keys(hashes, 16).size(), 10U);
  EXPECT_THROW(c.chunk_keys(hashes, 24), InvalidArgument);
  EXPECT_THROW(c.chunk_keys(hashes, 0), InvalidArgument);
}

TEST(Digests, HexRoundTripAndErrors) {
  const std::string hex(64, 'a');
  EXPECT_EQ(BlockDigest::from_hex(hex).to_hex(), hex);
  EXPECT_THROW(BlockDigest::from_hex("abcd"), InvalidArgument);
  EXPECT_THROW(BlockDigest::from_hex(std::string(63, 'a') + "g"), InvalidArgument);
  const std::uint8_t bytes[31] = {};
  EXPECT_THROW(BlockDigest::from_bytes(bytes, sizeof(bytes)), InvalidArgument);
  EXPECT_THROW(parse_group_kind("cross_attention"), InvalidArgument);
}

TEST(Hashing, Sha256KnownAnswersAndPrefixSharing) {
  const std::string abc = "abc";
  EXPECT_EQ(sha256(reinterpret_cast<const std::uint8_t*>(abc.data()), abc.size()).to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256(nullptr, 0).to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string long_text(1000, 'x');
  const BlockDigest once =
      sha256(reinterpret_cast<const std::uint8_t*>(long_text.data()), long_text.size());
  EXPECT_NE(once, sha256(reinterpret_cast<const std::uint8_t*>(long_text.data()), 999));
  std::vector<std::int32_t> a(100, 1);
  std::vector<std::int32_t> b = a;
  b[70] = 2;
  const auto ha = hash_prompt(a, 16);
  const auto hb = hash_prompt(b, 16);
  ASSERT_EQ(ha.size(), 6U);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ha[i], hb[i]);
  }
  EXPECT_NE(ha[4], hb[4]);
  EXPECT_NE(ha[5], hb[5]);
  EXPECT_THROW(hash_prompt(a, 0), InvalidArgument);
}

}  // namespace
}  // namespace prefixhit
