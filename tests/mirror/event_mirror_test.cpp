// EventMirror and EventApplier: both vLLM encodings and hash forms, Mooncake keys and the
// all-namespaces rule, malformed input, gaps recovered by replay, late joins, resyncs, several
// endpoints, lookups during ingestion, and random event streams against a plain set.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cpu/test_support.hpp"
#include "mirror/publisher.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {
namespace {

using testing::TestPublisher;
using testing::vllm_payload;
using testing::VllmEvent;

EventKey int_key(std::uint64_t h, int group = 0) {
  EventKey k;
  k.bytes = {};
  for (int b = 0; b < 8; ++b) {
    k.bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(h >> (56 - 8 * b));
  }
  k.digest_size = 8;
  k.group_id = group;
  return k;
}

bool has(const BlockIndex& index, const EventKey& k, Namespace ns = 0) {
  return index.contains(ns, k.group_id, to_index_digest(k), k.digest_size);
}

void feed(EventApplier& a, const std::string& payload) {
  a.apply_payload(reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size());
}

std::string bytes32(std::uint8_t fill) {
  return std::string(32, static_cast<char>(fill));
}

TEST(EventApplier, BothEncodingsAndHashForms) {
  for (const bool positional : {false, true}) {
    BlockIndex index;
    BlockIndexSink sink(index);
    EventApplier a(sink, EventMirrorOptions{});
    VllmEvent stored;
    stored.int_hashes = {1, 2, 0xFFFFFFFFFFFFFFFFULL};
    stored.group = 3;
    VllmEvent stored_bytes;
    stored_bytes.byte_hashes = {bytes32(7), bytes32(9)};
    feed(a, vllm_payload({stored, stored_bytes}, positional));
    EXPECT_EQ(a.stats().events_stored, 2U);
    EXPECT_EQ(a.stats().hashes_stored, 5U);
    EXPECT_EQ(a.stats().malformed_events, 0U) << a.stats().last_error;
    EXPECT_EQ(index.size(), 5U);
    EXPECT_TRUE(has(index, int_key(1, 3)));
    EXPECT_TRUE(has(index, int_key(0xFFFFFFFFFFFFFFFFULL, 3)));
    EXPECT_FALSE(has(index, int_key(1, 0)));  // another group
    BlockDigest d7;
    d7.bytes.fill(7);
    EXPECT_TRUE(index.contains(0, 0, d7));

    VllmEvent removed;
    removed.kind = VllmEvent::removed;
    removed.int_hashes = {2};
    removed.group = 3;
    feed(a, vllm_payload({removed}, positional));
    EXPECT_FALSE(has(index, int_key(2, 3)));
    EXPECT_EQ(index.size(), 4U);
    VllmEvent cleared;
    cleared.kind = VllmEvent::cleared;
    feed(a, vllm_payload({cleared}, positional));
    EXPECT_EQ(index.size(), 0U);
    EXPECT_EQ(a.stats().events_cleared, 1U);
    EXPECT_EQ(a.stats().keys, 0U);
  }
}

TEST(EventApplier, KeyStaysWhileAnyMediumHoldsIt) {
  BlockIndex index;
  BlockIndexSink sink(index);
  EventApplier a(sink, EventMirrorOptions{});
  VllmEvent gpu;
  gpu.int_hashes = {42};
  VllmEvent cpu = gpu;
  cpu.medium = "CPU";
  feed(a, vllm_payload({gpu, cpu, gpu}, false));  // GPU twice (two blocks), CPU once
  gpu.kind = cpu.kind = VllmEvent::removed;
  feed(a, vllm_payload({gpu}, false));
  EXPECT_TRUE(has(index, int_key(42)));
  feed(a, vllm_payload({cpu}, false));
  EXPECT_TRUE(has(index, int_key(42)));  // one GPU copy is left
  feed(a, vllm_payload({gpu}, false));
  EXPECT_FALSE(has(index, int_key(42)));
  feed(a, vllm_payload({gpu}, false));  // removing an absent key is harmless
  EXPECT_EQ(a.stats().keys, 0U);
}

TEST(EventApplier, MalformedInputIsCountedAndLosesNothing) {
  BlockIndex index;
  BlockIndexSink sink(index);
  EventApplier a(sink, EventMirrorOptions{});
  VllmEvent good;
  good.int_hashes = {5, 6};
  feed(a, vllm_payload({good}, false));
  ASSERT_EQ(index.size(), 2U);

  feed(a, "not msgpack at all \xc1");
  feed(a, std::string("\x93\x01", 2));  // truncated array
  EXPECT_EQ(a.stats().malformed_messages, 2U);

  // A good message with bad events: the bad ones are skipped, the good one applied.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(1.0);
  pk.pack_array(5);
  pk.pack(std::string("BlockStored"));  // not a map or array
  pk.pack_map(1);                       // no type
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<int>{1});
  pk.pack_array(2);  // unknown tag
  pk.pack(std::string("BlockMigrated"));
  pk.pack(std::vector<int>{1});
  pk.pack_map(3);  // bad hash width
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockRemoved"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::vector<std::string>{"abc"});
  pk.pack(std::string("group_idx"));
  pk.pack(0);
  pk.pack_array(3);  // good: remove 5
  pk.pack(std::string("BlockRemoved"));
  pk.pack(std::vector<int>{5});
  pk.pack(std::string("GPU"));
  pk.pack(0);
  feed(a, std::string(buf.data(), buf.size()));
  EXPECT_EQ(a.stats().malformed_events, 4U);
  EXPECT_EQ(a.stats().events_removed, 1U);
  EXPECT_FALSE(has(index, int_key(5)));
  EXPECT_TRUE(has(index, int_key(6)));

  // group_idx out of range.
  VllmEvent bad_group;
  bad_group.int_hashes = {9};
  bad_group.group = kMaxGroups;
  feed(a, vllm_payload({bad_group}, true));
  EXPECT_EQ(a.stats().malformed_events, 5U);
  EXPECT_NE(a.stats().last_error.find("group_idx"), std::string::npos) << a.stats().last_error;
  EXPECT_EQ(index.size(), 1U);
}

TEST(EventApplier, IndexRefusalUndoesTheEvent) {
  BlockIndexOptions o;
  o.initial_capacity = 32;
  o.max_capacity = 32;  // one bucket: 25 keys at most
  BlockIndex index(o);
  BlockIndexSink sink(index);
  EventApplier a(sink, EventMirrorOptions{});
  VllmEvent big;
  for (std::uint64_t h = 0; h < 100; ++h) {
    big.int_hashes.push_back(h + 1);
  }
  feed(a, vllm_payload({big}, false));
  EXPECT_EQ(a.stats().failed_events, 1U);
  EXPECT_EQ(index.size(), 0U);
  EXPECT_EQ(a.stats().keys, 0U);
  VllmEvent small;
  small.int_hashes = {1, 2};
  feed(a, vllm_payload({small}, false));
  EXPECT_EQ(index.size(), 2U);
  EXPECT_EQ(a.stats().keys, 2U);
}

TEST(StoreKey, ParsesVllmKeys) {
  StoreKeyParts p;
  const std::string hex64(64, 'a');
  ASSERT_TRUE(parse_store_key_parts("model@tp_rank:1@pcp0@dcp2@pp_rank:3@group:4@" + hex64, p));
  EXPECT_EQ(p.model, "model");
  EXPECT_EQ(p.cache_prefix, "");
  EXPECT_EQ(p.rank, (RankNamespace{1, 0, 2, 3}));
  EXPECT_EQ(p.key.group_id, 4);
  EXPECT_EQ(p.key.digest_size, 32);
  EXPECT_EQ(p.key.bytes[0], 0xAA);
  ASSERT_TRUE(
      parse_store_key_parts("pre@fix@org/m-1@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@"
                            "00112233445566778899aabbccddeeff",
                            p));
  EXPECT_EQ(p.cache_prefix, "pre@fix");
  EXPECT_EQ(p.model, "org/m-1");
  EXPECT_EQ(p.key.digest_size, 16);
  EXPECT_EQ(p.key.bytes[15], 0xFF);
  EXPECT_EQ(p.key.bytes[16], 0);
  for (const std::string bad : {"12345", "0x1f", "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@abc",
                                "@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@0011223344556677",
                                "m@tp_rank:x@pcp0@dcp0@pp_rank:0@group:0@0011223344556677",
                                "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:32@0011223344556677",
                                "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@00112233445566zz"}) {
    EXPECT_FALSE(parse_store_key_parts(bad, p)) << bad;
  }
}

struct MooncakeEvent {
  std::string kind;
  std::string key;
};

std::string mooncake_payload(const std::vector<MooncakeEvent>& events,
                             const std::string& medium = "cpu") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack(std::uint64_t{1796102885319});
  pk.pack_array(static_cast<std::uint32_t>(events.size()));
  for (const MooncakeEvent& e : events) {
    pk.pack_map(4);
    pk.pack(std::string("event_type"));
    pk.pack(e.kind);
    pk.pack(std::string("object_key"));
    pk.pack(e.key);
    pk.pack(std::string("medium"));
    pk.pack(medium);
    pk.pack(std::string("seq_hashes"));
    pk.pack_array(0);
  }
  pk.pack(0);
  return std::string(buf.data(), buf.size());
}

TEST(EventApplier, MooncakeKeysNeedEveryRankNamespace) {
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirrorOptions o;
  o.format = EventFormat::mooncake;
  o.ranks = rank_namespaces(2);
  o.model = "m";
  o.ns = 7;
  EventApplier a(sink, o);
  const std::string hex(64, 'b');
  const std::string k0 = "m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:1@" + hex;
  const std::string k1 = "m@tp_rank:1@pcp0@dcp0@pp_rank:0@group:1@" + hex;
  feed(a, mooncake_payload({MooncakeEvent{"stored", k0}}));
  EXPECT_EQ(index.size(), 0U);  // rank 1 does not have it yet
  feed(a, mooncake_payload(
              {MooncakeEvent{"stored", k1},
               MooncakeEvent{"stored", "other@tp_rank:0@pcp0@dcp0@pp_rank:0@group:1@" + hex},
               MooncakeEvent{"stored", "12345"}}));
  EXPECT_EQ(a.stats().foreign_keys, 2U);
  EventKey key;
  key.bytes.fill(0xBB);
  key.group_id = 1;
  EXPECT_TRUE(has(index, key, 7));
  feed(a, mooncake_payload({MooncakeEvent{"removed", k0}}));
  EXPECT_FALSE(has(index, key, 7));
  feed(a, mooncake_payload({MooncakeEvent{"stored", k0}, MooncakeEvent{"RemoveAllEvent", ""}}));
  EXPECT_EQ(index.size(), 0U);
  EXPECT_EQ(a.stats().events_cleared, 1U);
}

/// Random streams: the index equals a plain model of (key, medium) counts after every message.
TEST(EventApplier, RandomStreamsAgreeWithAPlainSet) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::cout << "[ seed ] " << seed << "\n";
  std::mt19937_64 rng(seed);
  BlockIndex index;
  BlockIndexSink sink(index);
  EventApplier a(sink, EventMirrorOptions{});
  std::map<std::tuple<std::uint64_t, int, std::string>, int> counts;
  const std::vector<std::string> media = {"GPU", "CPU", "STORAGE"};
  for (int msg = 0; msg < 400; ++msg) {
    std::vector<VllmEvent> events(1 + rng() % 4);
    for (VllmEvent& e : events) {
      const auto r = rng() % 20;
      e.kind = r == 0 ? VllmEvent::cleared : (r < 12 ? VllmEvent::stored : VllmEvent::removed);
      e.medium = media[rng() % media.size()];
      e.group = static_cast<int>(rng() % 3);
      for (std::size_t i = 0, n = rng() % 8; i < n; ++i) {
        e.int_hashes.push_back(rng() % 64);
      }
      if (e.kind == VllmEvent::cleared) {
        counts.clear();
      }
      for (const std::uint64_t h : e.int_hashes) {
        int& c = counts[{h, e.group, e.medium}];
        c = e.kind == VllmEvent::stored ? c + 1 : std::max(0, c - 1);
      }
    }
    feed(a, vllm_payload(events, rng() % 2 == 0));
    std::set<std::pair<std::uint64_t, int>> expected;
    for (const auto& [k, c] : counts) {
      if (c > 0) {
        expected.insert({std::get<0>(k), std::get<1>(k)});
      }
    }
    ASSERT_EQ(index.size(), expected.size()) << "after message " << msg;
    for (const auto& [h, g] : expected) {
      ASSERT_TRUE(has(index, int_key(h, g))) << "message " << msg;
    }
  }
}

/// Hostile payloads: random bytes and mutated valid payloads never crash, and never change
/// keys that no well-formed event touched.
TEST(EventApplier, MutatedPayloadsNeverCrash) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  for (const EventFormat format : {EventFormat::vllm, EventFormat::mooncake}) {
    BlockIndex index;
    BlockIndexSink sink(index);
    EventMirrorOptions o;
    o.format = format;
    EventApplier a(sink, o);
    VllmEvent keep;
    keep.int_hashes = {0xABCDEF};
    keep.group = 31;
    feed(a, vllm_payload({keep}, false));
    VllmEvent e;
    e.int_hashes = {1, 2, 3};
    VllmEvent r = e;
    r.kind = VllmEvent::removed;
    const std::string valid = vllm_payload({e, r, e}, rng() % 2 == 0);
    for (int i = 0; i < 3000; ++i) {
      std::string p = valid;
      if (i % 3 == 0) {
        p.resize(rng() % 64);
        for (char& c : p) {
          c = static_cast<char>(rng());
        }
      } else {
        for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
          p[rng() % p.size()] = static_cast<char>(rng());
        }
        if (rng() % 4 == 0) {
          p.resize(rng() % p.size());
        }
      }
      feed(a, p);
    }
    // The only key no mutation could reach is still there, unless a mutated message happened
    // to be a well-formed clear (counted).
    if (format == EventFormat::vllm && a.stats().events_cleared == 0) {
      EXPECT_TRUE(has(index, int_key(0xABCDEF, 31)));
    }
    EXPECT_GT(a.stats().malformed_messages + a.stats().malformed_events, 0U);
  }
}

// ---- live: real sockets -------------------------------------------------------------------

EventMirrorOptions live_options(const TestPublisher& pub, bool replay = true) {
  EventMirrorOptions o;
  o.endpoints = {pub.endpoint()};
  if (replay) {
    o.replay_endpoints = {pub.replay_endpoint()};
  }
  o.replay_timeout_ms = 2000;
  return o;
}

VllmEvent stored_event(std::uint64_t h) {
  VllmEvent e;
  e.int_hashes = {h};
  return e;
}

/// Publishes stored events of hash h, h+1, ... until the mirror applies one (a SUB socket
/// connects asynchronously, so the first messages may go nowhere). Returns how many were sent.
std::uint64_t publish_until_seen(TestPublisher& pub, const EventMirror& mirror, std::uint64_t h) {
  for (std::uint64_t tries = 1; tries <= 50; ++tries) {
    const std::uint64_t seq = pub.publish(vllm_payload({stored_event(h++)}, false));
    if (mirror.wait_for_seq(seq, 0.2)) {
      return tries;
    }
  }
  ADD_FAILURE() << "the mirror never received a message";
  return 0;
}

TEST(EventMirror, GapsAreFilledByReplay) {
  TestPublisher pub;
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirror mirror(sink, live_options(pub));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let SUB connect
  for (std::uint64_t i = 0; i < 50; ++i) {
    pub.publish(vllm_payload({stored_event(i + 1)}, i % 2 == 0), /*drop=*/i % 7 == 3);
  }
  ASSERT_TRUE(mirror.wait_for_seq(49, 10.0));
  const EventMirrorStats st = mirror.stats();
  EXPECT_EQ(index.size(), 50U);
  // One replay returns everything the publisher holds from the gap on, so later drops may
  // already be covered (their live twins then count as duplicates).
  EXPECT_GE(st.gaps, 1U);
  EXPECT_EQ(st.gaps, st.replays);
  EXPECT_GE(st.replayed_messages, 7U);
  EXPECT_EQ(st.missed_messages, 0U);
  EXPECT_EQ(st.resyncs, 0U);
  EXPECT_EQ(st.last_seq, 49U);
  EXPECT_EQ(st.keys, 50U);
  EXPECT_EQ(st.index_keys, 50U);
}

TEST(EventMirror, LateJoinReplaysWhatThePublisherHolds) {
  TestPublisher pub(100000, /*topic_frame=*/false);  // an older publisher: no topic in replays
  for (std::uint64_t i = 0; i < 20; ++i) {
    pub.publish(vllm_payload({stored_event(i + 100)}, false));  // nobody listens yet
  }
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirror mirror(sink, live_options(pub));
  const std::uint64_t sent = publish_until_seen(pub, mirror, 1000);
  EXPECT_EQ(index.size(), 20U + sent);
  EXPECT_EQ(mirror.stats().gaps, 1U);
  EXPECT_EQ(mirror.stats().resyncs, 0U);
}

TEST(EventMirror, ImpossibleReplayResyncs) {
  TestPublisher pub(/*keep=*/5);
  for (std::uint64_t i = 0; i < 20; ++i) {
    pub.publish(vllm_payload({stored_event(i + 1)}, false));
  }
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirror mirror(sink, live_options(pub));
  const std::uint64_t sent = publish_until_seen(pub, mirror, 999);
  const EventMirrorStats st = mirror.stats();
  EXPECT_EQ(st.resyncs, 1U);
  // The publisher holds the last 5 of 20 + sent messages; everything before is gone.
  EXPECT_EQ(st.missed_messages, 15U + sent);
  EXPECT_EQ(index.size(), 5U);

  // Without any replay endpoint a gap resyncs at once.
  TestPublisher pub2;
  BlockIndex index2;
  BlockIndexSink sink2(index2);
  EventMirror mirror2(sink2, live_options(pub2, /*replay=*/false));
  publish_until_seen(pub2, mirror2, 1);
  const EventMirrorStats before = mirror2.stats();
  pub2.publish(vllm_payload({stored_event(100)}, false), /*drop=*/true);
  const std::uint64_t last = pub2.publish(vllm_payload({stored_event(101)}, false));
  ASSERT_TRUE(mirror2.wait_for_seq(last, 10.0));
  EXPECT_EQ(mirror2.stats().resyncs, before.resyncs + 1);
  EXPECT_EQ(mirror2.stats().missed_messages, before.missed_messages + 1);
  EXPECT_EQ(index2.size(), 1U);  // cleared at the gap, then key 101
}

TEST(EventMirror, MalformedFramesAreCounted) {
  TestPublisher pub;
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirror mirror(sink, live_options(pub));
  const std::uint64_t sent = publish_until_seen(pub, mirror, 1);
  pub.send_raw({"kv", "1234567", "x"});      // 7-byte sequence
  pub.send_raw({"kv"});                      // one frame
  pub.send_raw({"kv", "a", "b", "c", "d"});  // five frames
  pub.publish("\xc1 garbage");
  const std::uint64_t last = pub.publish(vllm_payload({stored_event(1000)}, false));
  ASSERT_TRUE(mirror.wait_for_seq(last, 10.0));
  const EventMirrorStats st = mirror.stats();
  EXPECT_EQ(st.malformed_messages, 4U);
  EXPECT_EQ(index.size(), sent + 1);
}

TEST(EventMirror, SeveralEndpointsAndConcurrentLookups) {
  TestPublisher a;
  TestPublisher b;
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirrorOptions o;
  o.endpoints = {a.endpoint(), b.endpoint()};
  o.replay_endpoints = {a.replay_endpoint(), b.replay_endpoint()};
  EventMirror mirror(sink, o);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> probes{0};
  std::thread reader([&] {
    while (!done.load()) {
      (void)has(index, int_key(1));
      (void)mirror.stats();
      probes.fetch_add(1);
    }
  });
  while (probes.load() == 0) {  // the reader is running before ingestion starts
    std::this_thread::yield();
  }
  for (std::uint64_t i = 0; i < 200; ++i) {
    a.publish(vllm_payload({stored_event(i + 1)}, false));
    b.publish(vllm_payload({stored_event(i + 100001)}, true));
  }
  EXPECT_TRUE(mirror.wait_for_seq(199, 10.0));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (index.size() < 400 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  done = true;
  reader.join();
  EXPECT_EQ(index.size(), 400U);
  EXPECT_GT(probes.load(), 0U);
  mirror.stop();
  EXPECT_FALSE(mirror.running());
}

TEST(EventMirror, BadOptionsAreErrors) {
  BlockIndex index;
  BlockIndexSink sink(index);
  EXPECT_THROW(EventMirror(sink, EventMirrorOptions{}), InvalidArgument);
  EventMirrorOptions o;
  o.endpoints = {"nonsense://x"};
  EXPECT_THROW(EventMirror(sink, o), InvalidArgument);
  o.endpoints = {"tcp://127.0.0.1:1"};
  o.replay_endpoints = {"a", "b"};
  EXPECT_THROW(EventMirror(sink, o), InvalidArgument);
  EXPECT_THROW(parse_event_format("sglang"), InvalidArgument);
  EXPECT_THROW(rank_namespaces(0), InvalidArgument);
  EXPECT_THROW(rank_namespaces(8, 1, 1, 16), InvalidArgument);
}

}  // namespace
}  // namespace prefixhit
