// EventMirror's pipeline (the receiving thread decodes, the applying thread applies): order and
// exact results through a queue bounded in messages and in decoded hashes, with backpressure
// forced by a slow index; and medium names that mean the same to live and replayed messages.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/test_support.hpp"
#include "mirror/publisher.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {
namespace {

using testing::TestPublisher;
using testing::vllm_payload;
using testing::VllmEvent;

EventKey int_key(std::uint64_t h) {
  EventKey k;
  for (int b = 0; b < 8; ++b) {
    k.bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(h >> (56 - 8 * b));
  }
  k.digest_size = 8;
  return k;
}

bool has(const BlockIndex& index, std::uint64_t h) {
  const EventKey k = int_key(h);
  return index.contains(0, 0, to_index_digest(k), k.digest_size);
}

/// A BlockIndexSink that takes its time, so that the receiver outruns the applier.
class SlowSink final : public MirrorSink {
 public:
  explicit SlowSink(BlockIndex& index) : inner_(index) {}
  void insert(Namespace ns, span<const EventKey> keys) override {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    inner_.insert(ns, keys);
  }
  void erase(Namespace ns, span<const EventKey> keys) override { inner_.erase(ns, keys); }
  std::size_t size() const override { return inner_.size(); }
  bool may_refuse() const override { return false; }

 private:
  BlockIndexSink inner_;
};

TEST(EventMirrorPipeline, BoundedQueueKeepsOrderAndCountsBackpressure) {
  const std::uint64_t seed = testing::test_seed();
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937_64 rng(seed);
  TestPublisher pub;
  BlockIndex index;
  SlowSink sink(index);
  EventMirrorOptions o;
  o.endpoints = {pub.endpoint()};
  o.replay_endpoints = {pub.replay_endpoint()};
  o.replay_timeout_ms = 2000;
  o.queue_capacity = 3;
  o.queue_max_keys = 5;  // below some messages' size: those go through alone
  EventMirror mirror(sink, o);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let SUB connect

  // Random stores and removals over a small key space on two media: the result depends on
  // every event being applied once, in order.
  std::map<std::pair<std::uint64_t, std::string>, int> held;  // (key, medium) -> stores
  const std::vector<std::string> media = {"GPU", "CPU"};
  std::uint64_t last = 0;
  for (int m = 0; m < 300; ++m) {
    std::vector<VllmEvent> events;
    const int n_events = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < n_events; ++e) {
      VllmEvent ev;
      ev.kind = rng() % 3 == 0 ? VllmEvent::removed : VllmEvent::stored;
      ev.medium = media[rng() % 2];
      const int n_keys = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < n_keys; ++k) {
        const std::uint64_t h = 1 + rng() % 40;
        ev.int_hashes.push_back(h);
        int& count = held[{h, ev.medium}];
        count = ev.kind == VllmEvent::stored ? count + 1 : (count > 0 ? count - 1 : 0);
      }
      events.push_back(std::move(ev));
    }
    last = pub.publish(vllm_payload(events, m % 2 == 0));
  }
  ASSERT_TRUE(mirror.wait_for_seq(last, 30.0));
  // The applier releases its drained messages from the bound after the last one is applied.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (mirror.stats().queue_depth != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const EventMirrorStats st = mirror.stats();
  EXPECT_EQ(st.messages, 300U);
  EXPECT_GE(st.backpressure, 1U);  // 300 messages against a queue of 3 and a slow index
  EXPECT_EQ(st.resyncs, 0U);       // a late connection is a gap that the replay fills
  EXPECT_EQ(st.queue_depth, 0U);
  std::set<std::uint64_t> expected;
  for (const auto& [key, count] : held) {
    if (count > 0) {
      expected.insert(key.first);
    }
  }
  for (std::uint64_t h = 1; h <= 40; ++h) {
    EXPECT_EQ(has(index, h), expected.count(h) == 1) << "key " << h;
  }
  EXPECT_EQ(index.size(), expected.size());
  EXPECT_EQ(st.keys, expected.size());
}

TEST(EventMirrorPipeline, ReplayedEventsNameTheSameMediaAsLiveOnes) {
  // Live messages are decoded on the receiving thread, replayed ones on the applying thread:
  // a medium must get one id in both, or a replayed removal could undo another medium's store.
  TestPublisher pub;
  BlockIndex index;
  BlockIndexSink sink(index);
  EventMirrorOptions o;
  o.endpoints = {pub.endpoint()};
  o.replay_endpoints = {pub.replay_endpoint()};
  o.replay_timeout_ms = 2000;
  EventMirror mirror(sink, o);
  // Until the mirror is in step (SUB connects asynchronously; what it misses is replayed),
  // with no medium named ("" is id 0 in every table).
  VllmEvent warm;
  warm.medium = "";
  warm.int_hashes = {100};
  bool seen = false;
  for (int tries = 0; tries < 50 && !seen; ++tries) {
    seen = mirror.wait_for_seq(pub.publish(vllm_payload({warm}, false)), 0.2);
  }
  ASSERT_TRUE(seen);
  VllmEvent on_cpu;  // live: "CPU" is first named to the receiving thread's decoder
  on_cpu.medium = "CPU";
  on_cpu.int_hashes = {7};
  ASSERT_TRUE(mirror.wait_for_seq(pub.publish(vllm_payload({on_cpu}, false)), 10.0));
  VllmEvent off_gpu;  // replayed: "GPU" is first named to the applying thread's decoder
  off_gpu.kind = VllmEvent::removed;
  off_gpu.medium = "GPU";
  off_gpu.int_hashes = {7};
  pub.publish(vllm_payload({off_gpu}, false), /*drop=*/true);  // only in the replay buffer
  VllmEvent other;
  other.int_hashes = {8};
  const std::uint64_t last = pub.publish(vllm_payload({other}, false));  // reveals the gap
  ASSERT_TRUE(mirror.wait_for_seq(last, 10.0));
  const EventMirrorStats st = mirror.stats();
  EXPECT_GE(st.replayed_messages, 1U);
  EXPECT_EQ(st.resyncs, 0U);
  EXPECT_TRUE(has(index, 7)) << "a GPU removal undid a CPU store";
  EXPECT_TRUE(has(index, 8));
}

}  // namespace
}  // namespace prefixhit
