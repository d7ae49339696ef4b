// DeviceBlockIndexSink: the event mirror's sink over a GPU DeviceBlockIndex, checked against the
// CPU BlockIndexSink fed the same calls (random batches of keys of every digest width, one or
// several groups, duplicates), its all-or-nothing refusal when a max_capacity index is full, and
// (where the build has the mirror) an EventApplier over vLLM event payloads into both sinks.
// Every test skips without a usable GPU; a fresh seed is drawn per run (PREFIXHIT_TEST_SEED
// replays it).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(PREFIXHIT_TEST_MIRROR_PAYLOADS)
#include <msgpack.hpp>
#endif

#include "gpu/gpu_test_util.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {
namespace {

std::uint64_t seed_of_run() {
  if (const char* env = std::getenv("PREFIXHIT_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

EventKey random_key(std::mt19937_64& rng) {
  EventKey k;
  k.digest_size = static_cast<std::uint8_t>(8U << (rng() % 3));
  for (std::size_t b = 0; b < k.digest_size; ++b) {
    k.bytes[b] = static_cast<std::uint8_t>(rng());
  }
  k.group_id = static_cast<std::int32_t>(rng() % 3);
  return k;
}

/// Whether each key is in the device index (namespace ns), one contains() per (group, width).
std::vector<std::uint8_t> device_has(const DeviceBlockIndex& index, Namespace ns,
                                     const std::vector<EventKey>& keys) {
  std::vector<std::uint8_t> out(keys.size(), 2);
  BlockDigest* d_keys = nullptr;
  std::uint8_t* d_out = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_keys), sizeof(BlockDigest)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), 1), cudaSuccess);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const BlockDigest d = to_index_digest(keys[i]);
    EXPECT_EQ(cudaMemcpy(d_keys, &d, sizeof d, cudaMemcpyHostToDevice), cudaSuccess);
    index.contains(ns, keys[i].group_id, d_keys, 1, d_out, nullptr, keys[i].digest_size);
    EXPECT_EQ(cudaMemcpy(&out[i], d_out, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  cudaFree(d_keys);
  cudaFree(d_out);
  return out;
}

void expect_same(const DeviceBlockIndex& device, const BlockIndex& cpu, Namespace ns,
                 const std::vector<EventKey>& pool) {
  ASSERT_EQ(device.size(), cpu.size());
  const std::vector<std::uint8_t> has = device_has(device, ns, pool);
  for (std::size_t i = 0; i < pool.size(); ++i) {
    const bool want =
        cpu.contains(ns, pool[i].group_id, to_index_digest(pool[i]), pool[i].digest_size);
    ASSERT_EQ(has[i], want ? 1 : 0) << "key " << i << " (width " << int{pool[i].digest_size}
                                    << ", group " << pool[i].group_id << ")";
  }
}

TEST(MirrorDeviceSink, RandomBatchesMatchTheCpuSink) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = seed_of_run();
  SCOPED_TRACE("replay with PREFIXHIT_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DeviceBlockIndexOptions options;
  options.initial_capacity = 64;  // grows on the device during the run
  DeviceBlockIndex device(options);
  DeviceBlockIndexSink device_sink(device);
  BlockIndex cpu;
  BlockIndexSink cpu_sink(cpu);
  EXPECT_FALSE(device_sink.may_refuse());
  std::vector<EventKey> pool;
  for (int i = 0; i < 1500; ++i) {
    pool.push_back(random_key(rng));
  }
  const Namespace ns = 5;
  for (int round = 0; round < 24; ++round) {
    std::vector<EventKey> batch;
    const bool one_group = rng() % 3 == 0;
    const std::size_t n = rng() % 400;
    for (std::size_t i = 0; i < n; ++i) {
      EventKey k = pool[rng() % pool.size()];
      if (one_group && k.group_id != 1) {
        continue;
      }
      batch.push_back(k);
    }
    if (rng() % 3 != 0) {
      device_sink.insert(ns, span<const EventKey>(batch));
      cpu_sink.insert(ns, span<const EventKey>(batch));
    } else {
      device_sink.erase(ns, span<const EventKey>(batch));
      cpu_sink.erase(ns, span<const EventKey>(batch));
    }
    ASSERT_EQ(device_sink.size(), cpu_sink.size()) << "round " << round;
  }
  expect_same(device, cpu, ns, pool);
  {
    const auto held = device_sink.lock();  // a reader holding the writers off
    EXPECT_EQ(device.size(), cpu.size());
  }
}

TEST(MirrorDeviceSink, AFullIndexRefusesAllWidthsOrNone) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  const std::uint64_t seed = seed_of_run();
  SCOPED_TRACE("replay with PREFIXHIT_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DeviceBlockIndexOptions options;
  options.initial_capacity = 64;
  options.max_capacity = 64;
  options.max_load_factor = 0.5;  // 32 keys at most
  DeviceBlockIndex device(options);
  DeviceBlockIndexSink sink(device);
  EXPECT_TRUE(sink.may_refuse());
  std::vector<EventKey> first;
  for (int i = 0; i < 10; ++i) {
    EventKey k = random_key(rng);
    k.digest_size = 32;
    first.push_back(k);
  }
  sink.insert(0, span<const EventKey>(first));
  ASSERT_EQ(sink.size(), 10U);
  // Width 32 goes in first and fits; width 8 then cannot: the 32-byte keys must come out again.
  std::vector<EventKey> mixed;
  for (int i = 0; i < 10; ++i) {
    EventKey k = random_key(rng);
    k.digest_size = 32;
    mixed.push_back(k);
  }
  for (int i = 0; i < 40; ++i) {
    EventKey k;
    k.digest_size = 8;
    const std::uint64_t h = rng();
    std::memcpy(k.bytes.data(), &h, 8);
    mixed.push_back(k);
  }
  EXPECT_THROW(sink.insert(0, span<const EventKey>(mixed)), CapacityExceeded);
  EXPECT_EQ(sink.size(), 10U);
  const std::vector<std::uint8_t> had = device_has(device, 0, first);
  const std::vector<std::uint8_t> refused = device_has(device, 0, mixed);
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(had[i], 1) << "a key present before the refused call was lost";
  }
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    EXPECT_EQ(refused[i], 0) << "key " << i << " of the refused call stayed";
  }
}

#if defined(PREFIXHIT_TEST_MIRROR_PAYLOADS)
/// A vLLM KV-event payload [ts, events, dp_rank]: tagged BlockStored / positional BlockRemoved
/// of 64-bit integer hashes, and AllBlocksCleared.
struct Event {
  int kind;  // 0 stored, 1 removed, 2 cleared
  std::vector<std::uint64_t> hashes;
  int group;
};

std::string payload(const std::vector<Event>& events) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(1.0e9);
  pk.pack_array(static_cast<std::uint32_t>(events.size()));
  for (const Event& e : events) {
    if (e.kind == 0) {
      pk.pack_map(7);
      pk.pack(std::string("type"));
      pk.pack(std::string("BlockStored"));
      pk.pack(std::string("block_hashes"));
      pk.pack(e.hashes);
      pk.pack(std::string("parent_block_hash"));
      pk.pack_nil();
      pk.pack(std::string("token_ids"));
      pk.pack_array(0);
      pk.pack(std::string("block_size"));
      pk.pack(16);
      pk.pack(std::string("medium"));
      pk.pack(std::string("GPU"));
      pk.pack(std::string("group_idx"));
      pk.pack(e.group);
    } else if (e.kind == 1) {
      pk.pack_array(4);
      pk.pack(std::string("BlockRemoved"));
      pk.pack(e.hashes);
      pk.pack(std::string("GPU"));
      pk.pack(e.group);
    } else {
      pk.pack_array(1);
      pk.pack(std::string("AllBlocksCleared"));
    }
  }
  pk.pack(0);
  return std::string(buf.data(), buf.size());
}

TEST(MirrorDeviceSink, EventApplierOverVllmPayloadsMatchesTheCpuIndex) {
  PREFIXHIT_SKIP_WITHOUT_GPU();
  if (!mirror_available()) {
    GTEST_SKIP() << "built without the event mirror";
  }
  const std::uint64_t seed = seed_of_run();
  SCOPED_TRACE("replay with PREFIXHIT_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DeviceBlockIndex device;
  DeviceBlockIndexSink device_sink(device);
  BlockIndex cpu;
  BlockIndexSink cpu_sink(cpu);
  EventMirrorOptions options;
  EventApplier on_device(device_sink, options);
  EventApplier on_cpu(cpu_sink, options);
  std::vector<std::uint64_t> hashes(600);
  for (std::uint64_t& h : hashes) {
    h = rng();
  }
  for (int m = 0; m < 40; ++m) {
    std::vector<Event> events;
    const int count = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < count; ++e) {
      Event ev{static_cast<int>(rng() % 40 == 0 ? 2 : rng() % 2), {}, static_cast<int>(rng() % 2)};
      const std::size_t n = rng() % 40;
      for (std::size_t i = 0; i < n; ++i) {
        ev.hashes.push_back(hashes[rng() % hashes.size()]);
      }
      events.push_back(ev);
    }
    const std::string p = payload(events);
    on_device.apply_payload(reinterpret_cast<const std::uint8_t*>(p.data()), p.size());
    on_cpu.apply_payload(reinterpret_cast<const std::uint8_t*>(p.data()), p.size());
  }
  EXPECT_EQ(on_device.stats().keys, on_cpu.stats().keys);
  EXPECT_EQ(on_device.stats().failed_events, 0U);
  std::vector<EventKey> probe;
  for (const std::uint64_t h : hashes) {
    for (int g = 0; g < 2; ++g) {
      EventKey k;
      k.digest_size = 8;
      const BlockDigest d = BlockDigest::from_int_hash(h);
      std::memcpy(k.bytes.data(), d.bytes.data(), 8);
      k.group_id = g;
      probe.push_back(k);
    }
  }
  expect_same(device, cpu, 0, probe);
}
#endif

}  // namespace
}  // namespace prefixhit
