// EventApplier's batching: a message's run of events reaches an unbounded sink as one erase and
// one insert, with the same result as applying the events one by one, including the edges
// (a key stored and removed in one message, a bad event inside a run, a sink that refuses a
// batched call and the per-event replay that follows).
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <msgpack.hpp>

#include "cpu/test_support.hpp"
#include "host/mirror/key_counts.hpp"
#include "mirror/publisher.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {
namespace {

using testing::vllm_payload;
using testing::VllmEvent;

/// The first 8 bytes of a key, big-endian (the int hash of a width-8 key).
std::uint64_t hash_of(const EventKey& k) {
  std::uint64_t h = 0;
  for (int b = 0; b < 8; ++b) {
    h = (h << 8) | k.bytes[static_cast<std::size_t>(b)];
  }
  return h;
}

/// A sink over a BlockIndex that records its calls and refuses any call naming a poisoned
/// hash; `batched` says whether it admits batched runs (may_refuse() false).
class RecordingSink final : public MirrorSink {
 public:
  RecordingSink(BlockIndex& index, bool batched) : inner_(index), batched_(batched) {}
  void insert(Namespace ns, span<const EventKey> keys) override {
    check(keys);
    ++inserts;
    inner_.insert(ns, keys);
  }
  void erase(Namespace ns, span<const EventKey> keys) override {
    check(keys);
    ++erases;
    for (const EventKey& k : keys) {
      erased.insert(hash_of(k));
    }
    inner_.erase(ns, keys);
  }
  std::size_t size() const override { return inner_.size(); }
  bool may_refuse() const override { return !batched_; }

  std::set<std::uint64_t> poison;
  std::set<std::uint64_t> erased;
  int inserts = 0;
  int erases = 0;

 private:
  void check(span<const EventKey> keys) const {
    for (const EventKey& k : keys) {
      if (poison.count(hash_of(k)) != 0) {
        throw std::runtime_error("poisoned key " + std::to_string(hash_of(k)));
      }
    }
  }
  BlockIndexSink inner_;
  bool batched_;
};

void feed(EventApplier& a, const std::string& payload) {
  a.apply_payload(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
}

VllmEvent event(VllmEvent::Kind kind, std::vector<std::uint64_t> hashes,
                const std::string& medium = "GPU") {
  VllmEvent e;
  e.kind = kind;
  e.int_hashes = std::move(hashes);
  e.medium = medium;
  return e;
}

std::set<std::tuple<int, std::uint64_t>> contents(const BlockIndex& index) {
  std::set<std::tuple<int, std::uint64_t>> out;
  index.for_each_key([&](Namespace, int group, std::size_t, const BlockDigest& d) {
    std::uint64_t h = 0;
    for (int b = 0; b < 8; ++b) {
      h = (h << 8) | d.bytes[static_cast<std::size_t>(b)];
    }
    out.insert({group, h});
  });
  return out;
}

TEST(EventApplierBatching, OneEraseAndOneInsertPerMessage) {
  BlockIndex index;
  RecordingSink sink(index, /*batched=*/true);
  EventApplier a(sink, EventMirrorOptions{});
  feed(a, vllm_payload({event(VllmEvent::stored, {1, 2, 3}), event(VllmEvent::stored, {4, 5})},
                       false));
  EXPECT_EQ(sink.inserts, 1);
  EXPECT_EQ(sink.erases, 0);
  EXPECT_EQ(index.size(), 5U);
  // Store and remove of the same key in one message: it never reaches the index. A key removed
  // then stored again stays. A key stored twice and removed once stays (counted holders).
  feed(a, vllm_payload({event(VllmEvent::stored, {10}), event(VllmEvent::removed, {10, 1}),
                        event(VllmEvent::stored, {1}), event(VllmEvent::stored, {11, 11}),
                        event(VllmEvent::removed, {11, 2})},
                       true));
  EXPECT_EQ(sink.inserts, 2);  // {11}
  EXPECT_EQ(sink.erases, 1);   // {2}
  EXPECT_EQ(sink.erased, (std::set<std::uint64_t>{2}));
  EXPECT_EQ(contents(index),
            (std::set<std::tuple<int, std::uint64_t>>{{0, 1}, {0, 3}, {0, 4}, {0, 5}, {0, 11}}));
  EXPECT_EQ(a.stats().keys, 5U);
  EXPECT_EQ(a.stats().events_stored, 5U);
  EXPECT_EQ(a.stats().events_removed, 2U);
  EXPECT_EQ(a.stats().hashes_stored, 9U);
  EXPECT_EQ(a.stats().hashes_removed, 4U);
  // A clear splits a message into runs; what follows it is applied after it.
  feed(a, vllm_payload({event(VllmEvent::stored, {20}), event(VllmEvent::cleared, {}),
                        event(VllmEvent::stored, {21})},
                       false));
  EXPECT_EQ(contents(index), (std::set<std::tuple<int, std::uint64_t>>{{0, 21}}));
  EXPECT_EQ(a.stats().keys, 1U);
}

TEST(EventApplierBatching, BadEventInsideARunIsSkippedAlone) {
  BlockIndex index;
  RecordingSink sink(index, /*batched=*/true);
  EventApplier a(sink, EventMirrorOptions{});
  VllmEvent bad = event(VllmEvent::stored, {7});
  bad.group = kMaxGroups;  // out of range: malformed
  feed(a, vllm_payload({event(VllmEvent::stored, {5, 6}), bad, event(VllmEvent::removed, {5}),
                        event(VllmEvent::stored, {8})},
                       false));
  EXPECT_EQ(a.stats().malformed_events, 1U);
  EXPECT_EQ(contents(index), (std::set<std::tuple<int, std::uint64_t>>{{0, 6}, {0, 8}}));
  EXPECT_EQ(sink.inserts, 1);
}

TEST(EventApplierBatching, RefusedRunIsReplayedEventByEvent) {
  BlockIndex index;
  RecordingSink sink(index, /*batched=*/true);
  EventApplier a(sink, EventMirrorOptions{});
  feed(a, vllm_payload({event(VllmEvent::stored, {1, 2})}, false));
  sink.poison = {99};
  // The batched insert names 99 and is refused; replayed one by one, only the event with 99
  // fails, and the removal of 1 before it still applies.
  feed(a, vllm_payload({event(VllmEvent::removed, {1}), event(VllmEvent::stored, {3}),
                        event(VllmEvent::stored, {99, 4}), event(VllmEvent::stored, {5})},
                       false));
  EXPECT_EQ(a.stats().failed_events, 1U);
  EXPECT_NE(a.stats().last_error.find("poisoned"), std::string::npos) << a.stats().last_error;
  EXPECT_EQ(contents(index), (std::set<std::tuple<int, std::uint64_t>>{{0, 2}, {0, 3}, {0, 5}}));
  EXPECT_EQ(a.stats().keys, 3U);
  sink.poison.clear();
  feed(a, vllm_payload({event(VllmEvent::stored, {4})}, false));
  EXPECT_EQ(contents(index),
            (std::set<std::tuple<int, std::uint64_t>>{{0, 2}, {0, 3}, {0, 4}, {0, 5}}));
}

/// Random streams through a batching sink and an event-by-event sink, both refusing calls that
/// name a poisoned hash: the index contents and every counter agree after every message.
TEST(EventApplierBatching, BatchedEqualsEventByEvent) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::cout << "[ seed ] " << seed << "\n";
  std::mt19937_64 rng(seed);
  BlockIndex index_b;
  BlockIndex index_e;
  RecordingSink batched(index_b, true);
  RecordingSink one_by_one(index_e, false);
  batched.poison = one_by_one.poison = {13, 31};
  EventApplier a(batched, EventMirrorOptions{});
  EventApplier b(one_by_one, EventMirrorOptions{});
  const std::vector<std::string> media = {"GPU", "CPU"};
  for (int msg = 0; msg < 500; ++msg) {
    std::vector<VllmEvent> events(1 + rng() % 6);
    for (VllmEvent& e : events) {
      const auto r = rng() % 40;
      e.kind = r == 0 ? VllmEvent::cleared : (r < 22 ? VllmEvent::stored : VllmEvent::removed);
      e.medium = media[rng() % media.size()];
      e.group = static_cast<int>(rng() % 2);
      for (std::size_t i = 0, n = rng() % 6; i < n; ++i) {
        const std::uint64_t h = rng() % 48;
        // A poisoned hash is never removed: a run that stores it then always names it in its
        // insert (a sink whose refusals a net-zero run could hide would have to say
        // may_refuse()).
        if (e.kind != VllmEvent::removed || batched.poison.count(h) == 0) {
          e.int_hashes.push_back(h);
        }
      }
    }
    const std::string payload = vllm_payload(events, rng() % 2 == 0);
    feed(a, payload);
    feed(b, payload);
    ASSERT_EQ(contents(index_b), contents(index_e)) << "after message " << msg;
    const EventMirrorStats& sa = a.stats();
    const EventMirrorStats& sb = b.stats();
    ASSERT_EQ(sa.keys, sb.keys) << "after message " << msg;
    ASSERT_EQ(sa.failed_events, sb.failed_events) << "after message " << msg;
    ASSERT_EQ(sa.events_stored, sb.events_stored);
    ASSERT_EQ(sa.events_removed, sb.events_removed);
    ASSERT_EQ(sa.events_cleared, sb.events_cleared);
    ASSERT_EQ(sa.hashes_stored, sb.hashes_stored);
    ASSERT_EQ(sa.hashes_removed, sb.hashes_removed);
  }
  EXPECT_GT(a.stats().failed_events, 0U);  // the refusal path did run
}

/// An event whose hashes mix widths (bytes and ints) is one index call per width; a refusal of
/// a later width takes back the earlier ones, so the event applies all or nothing.
TEST(EventApplierBatching, MixedWidthEventIsAllOrNothing) {
  BlockIndexOptions o;
  o.initial_capacity = 32;
  o.max_capacity = 32;  // one bucket: 25 keys at most
  BlockIndex index(o);
  BlockIndexSink sink(index);
  EventApplier a(sink, EventMirrorOptions{});
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(1.0);
  pk.pack_array(1);
  pk.pack_array(5);  // positional: [tag, block_hashes, parent, token_ids, block_size]
  pk.pack(std::string("BlockStored"));
  pk.pack_array(30);
  for (int i = 0; i < 20; ++i) {
    pk.pack_bin(32);
    const std::string digest(32, static_cast<char>(i + 1));
    pk.pack_bin_body(digest.data(), 32);
  }
  for (std::uint64_t i = 0; i < 10; ++i) {
    pk.pack(i + 1);
  }
  pk.pack_nil();
  pk.pack_array(0);
  pk.pack(16);
  pk.pack(0);
  feed(a, std::string(buf.data(), buf.size()));
  EXPECT_EQ(a.stats().malformed_events, 0U) << a.stats().last_error;
  EXPECT_EQ(a.stats().failed_events, 1U);
  EXPECT_EQ(index.size(), 0U);
  EXPECT_EQ(a.stats().keys, 0U);
}

/// The holder-count table under churn: clusters form and shrink (backward-shift deletion), and
/// every key stays findable exactly while it has a holder.
TEST(KeyCounts, ChurnKeepsEveryKeyFindable) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::cout << "[ seed ] " << seed << "\n";
  std::mt19937_64 rng(seed);
  mirror::KeyCounts counts(rng());
  std::set<std::uint64_t> live;
  auto key = [](std::uint64_t h) {
    EventKey k;
    for (int b = 0; b < 8; ++b) {
      k.bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(h >> (56 - 8 * b));
    }
    k.digest_size = 8;
    k.group_id = static_cast<std::int32_t>(h % 3);
    return k;
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<std::size_t> touched;
    const std::size_t n = 1 + rng() % 64;
    counts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t h = rng() % 3000;
      if (rng() % 2 == 0) {
        const std::size_t e = counts.find_or_add(key(h));
        if (live.insert(h).second) {
          counts.add(e, mirror::Holder{}, +1);
        }
      } else if (live.erase(h) != 0) {
        const std::size_t e = counts.find(key(h));
        ASSERT_NE(e, SIZE_MAX);
        ASSERT_TRUE(counts.add(e, mirror::Holder{}, -1));
        touched.push_back(e);
      }
    }
    counts.drop_empty(touched);
    for (std::uint64_t h = 0; h < 3000; ++h) {
      ASSERT_EQ(counts.find(key(h)) != SIZE_MAX, live.count(h) != 0) << "round " << round;
    }
  }
}

/// Several holders per key (extra holders in the side pool, which entries release on deletion
/// and reuse): under churn with deletions moving entries, every key's holder counts and rank
/// count match a model, and a key is findable exactly while it has a holder.
TEST(KeyCounts, ManyHoldersMatchAModel) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::cout << "[ seed ] " << seed << "\n";
  std::mt19937_64 rng(seed);
  mirror::KeyCounts counts(rng());
  auto key = [](std::uint64_t h) {
    EventKey k;
    for (int b = 0; b < 8; ++b) {
      k.bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(h >> (56 - 8 * b));
    }
    k.digest_size = 8;
    k.group_id = static_cast<std::int32_t>(h % 2);
    return k;
  };
  constexpr std::uint64_t kKeys = 1500;
  // model[h][(rank, medium)] = count
  std::map<std::uint64_t, std::map<std::pair<int, int>, int>> model;
  for (int round = 0; round < 300; ++round) {
    if (round % 97 == 96) {
      counts.clear();
      model.clear();
    }
    std::vector<std::size_t> touched;
    const std::size_t n = 1 + rng() % 48;
    counts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t h = rng() % kKeys;
      const mirror::Holder holder{static_cast<std::uint16_t>(rng() % 3),
                                  static_cast<std::uint16_t>(rng() % 3)};
      const std::pair<int, int> mh{holder.rank, holder.medium};
      if (rng() % 2 == 0) {
        counts.add(counts.find_or_add(key(h)), holder, +1);
        ++model[h][mh];
      } else {
        const std::size_t e = counts.find(key(h));
        auto it = model.find(h);
        const bool held = it != model.end() && it->second.count(mh) != 0;
        if (e == SIZE_MAX) {
          ASSERT_FALSE(held) << "round " << round;
          continue;
        }
        ASSERT_EQ(counts.add(e, holder, -1), held) << "round " << round;
        touched.push_back(e);
        if (held && --it->second[mh] == 0) {
          it->second.erase(mh);
          if (it->second.empty()) {
            model.erase(it);
          }
        }
      }
    }
    counts.drop_empty(touched);
    for (std::uint64_t h = 0; h < kKeys; ++h) {
      const std::size_t e = counts.find(key(h));
      const auto it = model.find(h);
      ASSERT_EQ(e != SIZE_MAX, it != model.end()) << "round " << round << " key " << h;
      if (e == SIZE_MAX) {
        continue;
      }
      std::set<int> ranks;
      for (const auto& [mh, c] : it->second) {
        ranks.insert(mh.first);
      }
      ASSERT_EQ(counts.at(e).ranks_present, ranks.size()) << "round " << round << " key " << h;
      // Each holder's count: removing it count times succeeds, once more fails; then put back.
      for (const auto& [mh, c] : it->second) {
        const mirror::Holder holder{static_cast<std::uint16_t>(mh.first),
                                    static_cast<std::uint16_t>(mh.second)};
        for (int k = 0; k < c; ++k) {
          ASSERT_TRUE(counts.add(e, holder, -1));
        }
        ASSERT_FALSE(counts.add(e, holder, -1)) << "round " << round << " key " << h;
        for (int k = 0; k < c; ++k) {
          counts.add(e, holder, +1);
        }
      }
      ASSERT_EQ(counts.at(e).ranks_present, ranks.size());
    }
  }
}

}  // namespace
}  // namespace prefixhit
