// End to end: one vLLM-style publisher per worker, one EventMirror per worker feeding a shared
// ResidencyIndex through WorkerResidencySink, then per-worker scores from score_workers.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "mirror/publisher.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {
namespace {

using testing::TestPublisher;
using testing::vllm_payload;
using testing::VllmEvent;

VllmEvent stored(std::uint64_t first, std::uint64_t count) {
  VllmEvent e;
  for (std::uint64_t h = first; h < first + count; ++h) {
    e.int_hashes.push_back(h);
  }
  return e;
}

TEST(RouterMirror, PublishersPerWorkerFeedResidencyAndScores) {
  constexpr int kWorkers = 3;
  ResidencyIndex index(ResidencyOptions{kWorkers, 1, 64, 0});
  std::vector<std::unique_ptr<TestPublisher>> pubs;
  std::vector<std::unique_ptr<WorkerResidencySink>> sinks;
  std::vector<std::unique_ptr<EventMirror>> mirrors;
  for (int w = 0; w < kWorkers; ++w) {
    pubs.push_back(std::make_unique<TestPublisher>());
    sinks.push_back(std::make_unique<WorkerResidencySink>(index, static_cast<WorkerId>(w)));
    EventMirrorOptions o;
    o.endpoints = {pubs.back()->endpoint()};
    o.replay_endpoints = {pubs.back()->replay_endpoint()};
    o.replay_timeout_ms = 2000;
    mirrors.push_back(std::make_unique<EventMirror>(*sinks.back(), o));
  }
  // Worker w holds hashes 1 .. 4*(w+1) (group 0, 8-byte integer digests). The first message
  // repeats until seen (a SUB socket connects asynchronously; replays fill any gap).
  for (int w = 0; w < kWorkers; ++w) {
    bool seen = false;
    for (int tries = 0; tries < 50 && !seen; ++tries) {
      const std::uint64_t seq =
          pubs[static_cast<std::size_t>(w)]->publish(vllm_payload({stored(1, 4 * (w + 1))}, false));
      seen = mirrors[static_cast<std::size_t>(w)]->wait_for_seq(seq, 0.2);
    }
    ASSERT_TRUE(seen) << "worker " << w << "'s mirror never received a message";
  }
  EXPECT_EQ(sinks[0]->size(), 4U);
  EXPECT_EQ(sinks[2]->size(), 12U);
  EXPECT_EQ(index.size(), 12U);

  Config config;
  config.hash_block_size = 16;
  config.digest_size = 8;
  config.groups = {GroupSpec::full_attention(16)};
  const Coordinator c(config);
  std::vector<BlockDigest> hashes;
  for (std::uint64_t h = 1; h <= 16; ++h) {
    hashes.push_back(BlockDigest::from_int_hash(h));
  }
  const std::vector<std::int64_t> offsets{0, 16};
  const std::vector<std::int64_t> max_lengths{16 * 16};
  const LookupBatch batch{hashes, offsets, max_lengths, {}};
  RouterScores s = score_workers(c, batch, index);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(s.result(0, w).hit_length, 16 * 4 * (w + 1)) << "worker " << w;
  }

  // AllBlocksCleared on worker 1 drops only its pairs.
  VllmEvent cleared;
  cleared.kind = VllmEvent::cleared;
  const std::uint64_t seq = pubs[1]->publish(vllm_payload({cleared}, false));
  ASSERT_TRUE(mirrors[1]->wait_for_seq(seq, 10.0));
  EXPECT_EQ(sinks[1]->size(), 0U);
  s = score_workers(c, batch, index);
  EXPECT_EQ(s.result(0, 0).hit_length, 16 * 4);
  EXPECT_EQ(s.result(0, 1).hit_length, 0);
  EXPECT_EQ(s.result(0, 2).hit_length, 16 * 12);
  const std::vector<std::int32_t> top = top_k_workers(s, 2);
  EXPECT_EQ(top, (std::vector<std::int32_t>{2, 0}));
}

}  // namespace
}  // namespace prefixhit
