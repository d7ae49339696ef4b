// Digest widths (issue 10): 8-, 16- and 32-byte digests end to end on the CPU. A lookup at width
// w over a store of width-w keys answers exactly as a 32-byte run over the same logical store;
// keys of different widths never meet; a wrong width is a clear error everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/index_slots.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/index_file.hpp"
#include "test_support.hpp"

namespace prefixhit {
namespace {

using testing::expect_same;
using testing::narrow;
using testing::random_config;
using testing::random_hashes;
using testing::random_max_length;
using testing::random_store;
using testing::seed_note;
using testing::test_seed;

template <class Fn>
auto outcome(Fn&& fn) -> std::pair<std::optional<decltype(fn())>, ErrorKind> {
  try {
    return {fn(), ErrorKind::ok};
  } catch (const Error& e) {
    return {std::nullopt, e.kind()};
  }
}

TEST(DigestWidth, DigestParsingAcceptsEveryWidthAndZeroPads) {
  std::uint8_t raw[32];
  for (int i = 0; i < 32; ++i) {
    raw[i] = static_cast<std::uint8_t>(i + 1);
  }
  for (std::size_t w : {8, 16, 32}) {
    const BlockDigest d = BlockDigest::from_bytes(raw, w);
    for (std::size_t i = 0; i < 32; ++i) {
      EXPECT_EQ(d.bytes[i], i < w ? raw[i] : 0) << "width " << w << " byte " << i;
    }
    EXPECT_TRUE(d.fits(w));
    EXPECT_EQ(d.fits(8), w == 8);
    EXPECT_EQ(BlockDigest::from_hex(d.to_hex(w)), d);
    EXPECT_EQ(d.to_hex(w).size(), 2 * w);
    EXPECT_EQ(BlockDigest::from_bytes(raw, w, w), d);
  }
  for (std::size_t bad : {0, 1, 7, 9, 20, 31, 33, 64}) {
    EXPECT_THROW(BlockDigest::from_bytes(raw, bad), InvalidArgument) << bad;
  }
  try {
    BlockDigest::from_bytes(raw, 32, 16);
    FAIL() << "a 32-byte digest for width 16 must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("must be 16 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BlockDigest::from_bytes(raw, 12, 12), InvalidArgument);
  EXPECT_THROW(BlockDigest::from_hex("abcd"), InvalidArgument);
  EXPECT_THROW(BlockDigest::from_hex(std::string(48, 'a')), InvalidArgument);
  // vLLM KV events: an integer hash is an 8-byte digest, its big-endian bytes.
  const BlockDigest i = BlockDigest::from_int_hash(0x0102030405060708ULL);
  EXPECT_EQ(i.to_hex(8), "0102030405060708");
  EXPECT_TRUE(i.fits(8));
}

TEST(DigestWidth, MetaWordKeepsNamespaceGroupAndWidthApart) {
  std::vector<std::uint32_t> seen;
  for (std::uint32_t ns : {0U, 1U, 77U, detail::kIndexMaxNamespace}) {
    for (int g = 0; g < kMaxGroups; ++g) {
      for (std::size_t w : {8, 16, 32}) {
        const std::uint32_t meta = detail::pack_meta(ns, g, detail::digest_width_code(w));
        EXPECT_EQ(detail::meta_namespace(meta), ns);
        EXPECT_EQ(detail::meta_group(meta), g);
        EXPECT_EQ(detail::meta_digest_size(meta), w);
        seen.push_back(meta);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  // Width 32 is code 0: the words of indexes and files from before widths are unchanged.
  EXPECT_EQ(detail::pack_meta(5, 3, detail::digest_width_code(32)), detail::pack_meta(5, 3));
  EXPECT_EQ(detail::pack_meta(5, 3), (5U << 8) | 3U);
}

TEST(DigestWidth, ConfigRejectsUnsupportedWidths) {
  for (std::size_t bad : {0, 4, 12, 24, 33, 64}) {
    Config c;
    c.groups = {GroupSpec::full_attention(16)};
    c.digest_size = bad;
    try {
      Coordinator coordinator(c);
      FAIL() << "digest_size " << bad << " accepted";
    } catch (const InvalidConfig& e) {
      EXPECT_NE(std::string(e.what()).find("digest_size"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(KeySet(12), InvalidArgument);
}

// Random configurations and stores: every width answers exactly as the 32-byte run of the same
// logical store, through a KeySet, the resident BlockIndex, batches and key plans.
TEST(DigestWidth, EveryWidthAnswersAsTheThirtyTwoByteRun) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 150; ++iter) {
    Config config32 = random_config(rng);
    const Coordinator c32(config32);
    const auto n = static_cast<std::size_t>(rng() % 64);
    const std::vector<BlockDigest> hashes32 = random_hashes(rng, n);
    const KeySet store32 = random_store(rng, config32, hashes32);
    const std::int64_t max_length =
        random_max_length(rng, static_cast<std::int64_t>(n), config32.hash_block_size);
    // The logical store as (group, hash index) pairs.
    std::vector<std::pair<int, std::size_t>> pairs;
    for (int g = 0; g < kMaxGroups; ++g) {
      for (std::size_t i = 0; i < n; ++i) {
        if (store32.contains(g, hashes32[i])) {
          pairs.emplace_back(g, i);
        }
      }
    }
    const auto want =
        outcome([&] { return c32.find_longest_cache_hit(hashes32, max_length, store32); });
    // A key plan's lookup sees only the planned keys (the lookup mask), so it has its own answer.
    const KeyPlan plan32 = c32.key_plan(hashes32, max_length);
    std::vector<std::uint8_t> present32(plan32.size());
    for (std::size_t i = 0; i < plan32.size(); ++i) {
      present32[i] = store32.contains(plan32.group_ids[i], plan32.keys[i]) ? 1 : 0;
    }
    const PlanAnswers answers32(plan32, present32, c32.num_groups());
    const auto want_plan =
        outcome([&] { return c32.find_longest_cache_hit(hashes32, max_length, answers32); });
    for (std::size_t w : {8, 16, 32}) {
      const std::string where = "iteration " + std::to_string(iter) + " width " + std::to_string(w);
      Config config = config32;
      config.digest_size = w;
      const Coordinator c(config);
      const std::vector<BlockDigest> hashes = narrow(hashes32, w);
      KeySet set(w);
      BlockIndex index;
      for (const auto& [g, i] : pairs) {
        set.insert(g, hashes[i]);
        index.insert(3, g, span<const BlockDigest>(&hashes[i], 1), w);
      }
      // The same bytes under every wider width, in every group: a lookup that ignored the
      // width would find all of them.
      for (std::size_t other : {16, 32}) {
        if (other > w) {
          for (int g = 0; g < c.num_groups(); ++g) {
            index.insert(3, g, hashes, other);
          }
        }
      }
      const auto got_set =
          outcome([&] { return c.find_longest_cache_hit(hashes, max_length, set); });
      const auto got_index =
          outcome([&] { return c.find_longest_cache_hit(hashes, max_length, index.view(3, w)); });
      ASSERT_EQ(got_set.second, want.second) << where;
      ASSERT_EQ(got_index.second, want.second) << where;
      if (want.first) {
        expect_same(*got_set.first, *want.first, where + " key set");
        expect_same(*got_index.first, *want.first, where + " block index");
      }
      // Batch: the request twice.
      std::vector<BlockDigest> digests = hashes;
      digests.insert(digests.end(), hashes.begin(), hashes.end());
      const std::int64_t offsets[3] = {0, static_cast<std::int64_t>(n),
                                       static_cast<std::int64_t>(2 * n)};
      const std::int64_t lengths[2] = {max_length, max_length};
      LookupBatch batch;
      batch.digests = digests;
      batch.offsets = span<const std::int64_t>(offsets, 3);
      batch.max_lengths = span<const std::int64_t>(lengths, 2);
      const auto batch_out =
          outcome([&] { return c.find_longest_cache_hits(batch, index.view(3, w)); });
      ASSERT_EQ(batch_out.second, want.second) << where;
      if (want.first) {
        expect_same(batch_out.first->request(1), *want.first, where + " batch");
      }
      // Key plan and answers.
      const KeyPlan plan = c.key_plan(hashes, max_length);
      EXPECT_EQ(plan.digest_size, w);
      std::vector<std::uint8_t> present(plan.size());
      index.contains(3, plan.group_ids, plan.keys, present.data(), w);
      const PlanAnswers answers(plan, present, c.num_groups());
      const auto got_plan =
          outcome([&] { return c.find_longest_cache_hit(hashes, max_length, answers); });
      EXPECT_EQ(plan.group_ids, plan32.group_ids) << where;
      EXPECT_EQ(plan.keys, narrow(plan32.keys, w)) << where;
      EXPECT_EQ(present, present32) << where;
      ASSERT_EQ(got_plan.second, want_plan.second) << where;
      if (want_plan.first) {
        expect_same(*got_plan.first, *want_plan.first, where + " key plan");
      }
      // Chunk keys are the narrow keys of the 32-byte run.
      const std::int64_t b = config.groups[0].block_size;
      EXPECT_EQ(c.chunk_keys(hashes, b), narrow(c32.chunk_keys(hashes32, b), w)) << where;
    }
  }
}

TEST(DigestWidth, SameBytesAtDifferentWidthsAreDifferentKeys) {
  std::uint8_t raw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const BlockDigest d = BlockDigest::from_bytes(raw, 8);  // fits 8, 16 and 32 alike
  BlockIndex index;
  EXPECT_EQ(index.insert(0, 1, span<const BlockDigest>(&d, 1), 8), 1U);
  EXPECT_TRUE(index.contains(0, 1, d, 8));
  EXPECT_FALSE(index.contains(0, 1, d, 16));
  EXPECT_FALSE(index.contains(0, 1, d));
  EXPECT_EQ(index.insert(0, 1, span<const BlockDigest>(&d, 1), 16), 1U);
  EXPECT_EQ(index.insert(0, 1, span<const BlockDigest>(&d, 1), 32), 1U);
  EXPECT_EQ(index.insert(0, 1, span<const BlockDigest>(&d, 1), 8), 0U);
  EXPECT_EQ(index.size(), 3U);
  EXPECT_EQ(index.erase(0, 1, span<const BlockDigest>(&d, 1), 16), 1U);
  EXPECT_TRUE(index.contains(0, 1, d, 8));
  EXPECT_FALSE(index.contains(0, 1, d, 16));
  EXPECT_TRUE(index.contains(0, 1, d, 32));
  // for_each_key reports each key's width.
  std::vector<std::size_t> widths;
  index.for_each_key([&](Namespace ns, int g, std::size_t w, const BlockDigest& key) {
    EXPECT_EQ(ns, 0U);
    EXPECT_EQ(g, 1);
    EXPECT_EQ(key, d);
    widths.push_back(w);
  });
  std::sort(widths.begin(), widths.end());
  EXPECT_EQ(widths, (std::vector<std::size_t>{8, 32}));

  // A lookup at width 8 sees only the 8-byte key, even through a store of the same bytes.
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 16;
  config.groups = {GroupSpec::full_attention(16)};
  config.digest_size = 16;
  const Coordinator c16(config);
  const std::vector<BlockDigest> hashes = {d};
  EXPECT_EQ(c16.find_longest_cache_hit(hashes, 16, index.view(0, 16)).hit_length, 0);
  config.digest_size = 8;
  const Coordinator c8(config);
  EXPECT_EQ(c8.find_longest_cache_hit(hashes, 16, index.view(0, 8)).hit_length, 0);  // group 0
  index.insert(0, 0, hashes, 8);
  EXPECT_EQ(c8.find_longest_cache_hit(hashes, 16, index.view(0, 8)).hit_length, 16);
  EXPECT_EQ(c16.find_longest_cache_hit(hashes, 16, index.view(0, 16)).hit_length, 0);
}

TEST(DigestWidth, WrongWidthsAreClearErrors) {
  Config config;
  config.hash_block_size = 16;
  config.scheduler_block_size = 32;
  config.groups = {GroupSpec::full_attention(16), GroupSpec::sliding_window_attention(16, 16)};
  config.digest_size = 8;
  const Coordinator c(config);
  std::mt19937_64 rng(test_seed());
  const std::vector<BlockDigest> wide = random_hashes(rng, 8);
  const std::vector<BlockDigest> hashes = narrow(wide, 8);

  // A store of another width.
  const KeySet set32;
  BlockIndex index;
  auto expect_message = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      FAIL() << "expected InvalidArgument containing '" << needle << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_message([&] { c.find_longest_cache_hit(hashes, 64, set32); },
                 "store holds 32-byte digests but the coordinator's digest_size is 8");
  expect_message([&] { c.find_longest_cache_hit(hashes, 64, index.view(0, 16)); },
                 "store holds 16-byte digests");
  const std::int64_t offsets[2] = {0, 8};
  const std::int64_t lengths[1] = {64};
  LookupBatch batch;
  batch.digests = hashes;
  batch.offsets = span<const std::int64_t>(offsets, 2);
  batch.max_lengths = span<const std::int64_t>(lengths, 1);
  expect_message([&] { c.find_longest_cache_hits(batch, set32); }, "store holds 32-byte");

  // Hashes wider than the coordinator's width: the lookup names the first one it reads.
  KeySet set8(8);
  set8.insert(0, hashes[0]);
  set8.insert(0, hashes[1]);
  expect_message([&] { c.find_longest_cache_hit(wide, 64, set8); }, "hashes[0] is not a 8-byte");
  std::vector<BlockDigest> one_bad = hashes;
  one_bad[1] = wide[1];
  expect_message([&] { c.find_longest_cache_hit(one_bad, 64, set8); }, "hashes[1]");
  batch.digests = one_bad;
  expect_message([&] { c.find_longest_cache_hits(batch, set8); }, "request 0: hashes[1]");
  expect_message([&] { c.chunk_keys(one_bad, 16); }, "chunk_keys: keys[1]");
  expect_message([&] { c.key_plan(one_bad, 64); }, "key_plan: hashes[");

  // Stores refuse keys that are not of their width, and apply nothing.
  expect_message([&] { set8.insert(0, wide[2]); }, "is not a 8-byte digest");
  EXPECT_EQ(set8.size(), 2U);
  EXPECT_FALSE(set8.contains(0, wide[0]));
  expect_message([&] { index.insert(0, 0, one_bad, 8); }, "keys[1] is not a 8-byte digest");
  EXPECT_EQ(index.size(), 0U);
  expect_message([&] { index.insert(0, 0, hashes, 12); }, "digest_size must be 8, 16 or 32");
  std::uint8_t out[8];
  expect_message([&] { index.contains(0, 0, one_bad, out, 8); }, "keys[1]");
  expect_message([&] { index.erase(0, 0, one_bad, 16); }, "keys[1] is not a 16-byte digest");
  // A view of an unsupported width simply never matches (probe does not throw); the
  // coordinator refuses it first.
  expect_message([&] { c.find_longest_cache_hit(hashes, 64, index.view(0, 12)); },
                 "store holds 12-byte digests");
}

TEST(DigestWidth, IndexFilesRoundTripWithWidths) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const std::vector<BlockDigest> wide = random_hashes(rng, 200);
  BlockIndex index;
  index.insert(1, 0, wide);
  index.insert(1, 0, narrow(wide, 16), 16);
  index.insert(2, 5, narrow(wide, 8), 8);
  const std::vector<std::uint8_t> image = serialize_index(index);
  const IndexFileStats written = read_index_stats_from_memory(image.data(), image.size());
  EXPECT_EQ(written.format_version, kIndexFileVersionWithWidths);
  EXPECT_EQ(written.key_count, 600U);
  EXPECT_EQ(written.keys_per_digest_size.at(8), 200U);
  EXPECT_EQ(written.keys_per_digest_size.at(16), 200U);
  EXPECT_EQ(written.keys_per_digest_size.at(32), 200U);
  BlockIndex loaded;
  load_index_from_memory(image.data(), image.size(), loaded);
  EXPECT_EQ(loaded.size(), 600U);
  for (std::size_t i = 0; i < wide.size(); ++i) {
    EXPECT_TRUE(loaded.contains(1, 0, wide[i]));
    EXPECT_TRUE(loaded.contains(1, 0, narrow(wide[i], 16), 16));
    EXPECT_FALSE(loaded.contains(1, 0, narrow(wide[i], 16), 32));
    EXPECT_TRUE(loaded.contains(2, 5, narrow(wide[i], 8), 8));
    EXPECT_FALSE(loaded.contains(2, 5, narrow(wide[i], 8), 16));
  }
  EXPECT_EQ(serialize_index(loaded), image);  // canonical

  // Only 32-byte keys: still version 1, byte for byte what builds without widths wrote.
  BlockIndex plain;
  plain.insert(1, 0, wide);
  const std::vector<std::uint8_t> v1 = serialize_index(plain);
  EXPECT_EQ(read_index_stats_from_memory(v1.data(), v1.size()).format_version, kIndexFileVersion);
  std::uint32_t group_word = 0;
  std::memcpy(&group_word, v1.data() + kIndexFileHeaderBytes + 4, 4);
  EXPECT_EQ(group_word, 0U);  // the i32 group id of version 1, no width bits

  // A corrupt width (checksums fixed, so the record check itself reports it).
  auto with_width_byte = [&](int width) {
    std::vector<std::uint8_t> bad = image;
    bad[kIndexFileHeaderBytes + 5] = static_cast<std::uint8_t>(width);
    const std::size_t body = bad.size() - kIndexFileTrailerBytes;
    const std::uint32_t crc = crc32c(bad.data(), body);
    std::memcpy(bad.data() + body, &crc, 4);
    return bad;
  };
  for (int width : {0, 12, 64}) {
    const std::vector<std::uint8_t> bad = with_width_byte(width);
    BlockIndex into;
    into.insert(9, 0, wide);
    EXPECT_THROW(load_index_from_memory(bad.data(), bad.size(), into), FormatError);
    EXPECT_EQ(into.size(), 200U);  // untouched
  }
}

}  // namespace
}  // namespace prefixhit
