// Mirror ingestion rate: vLLM KV-event payloads (BlockStored of 64 int hashes, and the
// BlockRemoved of blocks stored 8 messages earlier, so the index stays at a steady size)
// decoded and applied to a BlockIndex. Items are block hashes (stored + removed).
//   BM_MirrorApply:      EventApplier on prebuilt payloads (no sockets): decode + counts + index.
//   BM_MirrorApplyNoIndex: the same into a sink that only counts keys: the mirror's own cost
//                        (decode + holder counts + batching), without the index's.
//   BM_MirrorZmqIngest:  the same payloads from a local PUB socket (tcp loopback) through an
//                        EventMirror (its two threads), timed from the first send until the
//                        last sequence is applied. Counters from the threads' own run times
//                        (/proc/self/task/*/schedstat), which a loaded machine does not inflate:
//                        busiest_M/s = hashes per second of the busiest mirror thread's CPU time
//                        (the rate if each thread had a core of its own); busiest_wait = the time
//                        that thread sat runnable without a core, over its run time; cpu_per_wall
//                        = the whole process's CPU time over wall time.
//   BM_IndexEraseBatch:  what the mirror's erase costs in the index alone: BlockIndex::erase of
//                        1024 present keys (random digests) from an index of N keys, which are
//                        put back untimed; N = 8K (the default table, in L3, as above) and 1M (out
//                        of cache).
// docs/perf/mirror.md records the figures.
#if defined(PREFIXHIT_BENCH_MIRROR)

#include <benchmark/benchmark.h>

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/event_mirror.hpp"

namespace {

constexpr int kHashesPerEvent = 64;
constexpr int kLag = 8;  // messages between a block's store and its removal

/// Message m: `events` BlockStored events of fresh hashes, plus (from message kLag on) the
/// BlockRemoved events of message m - kLag.
std::string payload(std::uint64_t m, int events, bool positional) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(1.0e9);
  const bool removes = m >= kLag;
  pk.pack_array(static_cast<std::uint32_t>(removes ? 2 * events : events));
  auto hashes = [&](std::uint64_t msg, int e) {
    pk.pack_array(kHashesPerEvent);
    for (int h = 0; h < kHashesPerEvent; ++h) {
      // Distinct, well-spread 64-bit hashes (what vLLM's int hashes look like).
      std::uint64_t x = (msg * 1000003ULL + static_cast<std::uint64_t>(e)) * 131ULL +
                        static_cast<std::uint64_t>(h) + 1;
      x ^= x >> 31;
      x *= 0x9E3779B97F4A7C15ULL;
      pk.pack(x ^ (x >> 29));
    }
  };
  for (int e = 0; e < events; ++e) {
    if (positional) {
      pk.pack_array(10);
      pk.pack(std::string("BlockStored"));
      hashes(m, e);
      pk.pack_nil();
      pk.pack_array(0);
      pk.pack(16);
      pk.pack_nil();
      pk.pack(std::string("GPU"));
      pk.pack_nil();
      pk.pack_nil();
      pk.pack(0);
    } else {
      pk.pack_map(7);
      pk.pack(std::string("type"));
      pk.pack(std::string("BlockStored"));
      pk.pack(std::string("block_hashes"));
      hashes(m, e);
      pk.pack(std::string("parent_block_hash"));
      pk.pack_nil();
      pk.pack(std::string("token_ids"));
      pk.pack_array(0);
      pk.pack(std::string("block_size"));
      pk.pack(16);
      pk.pack(std::string("medium"));
      pk.pack(std::string("GPU"));
      pk.pack(std::string("group_idx"));
      pk.pack(0);
    }
  }
  if (removes) {
    for (int e = 0; e < events; ++e) {
      pk.pack_array(4);
      pk.pack(std::string("BlockRemoved"));
      hashes(m - kLag, e);
      pk.pack(std::string("GPU"));
      pk.pack(0);
    }
  }
  pk.pack(0);
  return std::string(buf.data(), buf.size());
}

std::vector<std::string> payloads(std::size_t n, int events, bool positional) {
  std::vector<std::string> out;
  for (std::size_t m = 0; m < n; ++m) {
    out.push_back(payload(m, events, positional));
  }
  return out;
}

std::int64_t hashes_in(std::size_t messages, int events) {
  const auto m = static_cast<std::int64_t>(messages);
  return (m * events + std::max<std::int64_t>(0, m - kLag) * events) * kHashesPerEvent;
}

void BM_MirrorApply(benchmark::State& state) {
  const bool positional = state.range(0) != 0;
  const int events = 16;
  const std::vector<std::string> msgs = payloads(512, events, positional);
  std::int64_t hashes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    prefixhit::BlockIndex index;
    prefixhit::BlockIndexSink sink(index);
    prefixhit::EventApplier applier(sink, prefixhit::EventMirrorOptions{});
    state.ResumeTiming();
    for (const std::string& p : msgs) {
      applier.apply_payload(reinterpret_cast<const std::uint8_t*>(p.data()), p.size());
    }
    benchmark::DoNotOptimize(index.size());
    hashes += hashes_in(msgs.size(), events);
  }
  state.SetItemsProcessed(hashes);
  state.SetLabel(positional ? "positional" : "tagged");
}
BENCHMARK(BM_MirrorApply)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

/// Takes the key changes and drops them (batched: it never refuses).
class CountingSink final : public prefixhit::MirrorSink {
 public:
  void insert(prefixhit::Namespace, prefixhit::span<const prefixhit::EventKey> keys) override {
    size_ += keys.size();
  }
  void erase(prefixhit::Namespace, prefixhit::span<const prefixhit::EventKey> keys) override {
    size_ -= keys.size();
  }
  std::size_t size() const override { return size_; }
  bool may_refuse() const override { return false; }

 private:
  std::size_t size_ = 0;
};

void BM_MirrorApplyNoIndex(benchmark::State& state) {
  const bool positional = state.range(0) != 0;
  const int events = 16;
  const std::vector<std::string> msgs = payloads(512, events, positional);
  std::int64_t hashes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    CountingSink sink;
    prefixhit::EventApplier applier(sink, prefixhit::EventMirrorOptions{});
    state.ResumeTiming();
    for (const std::string& p : msgs) {
      applier.apply_payload(reinterpret_cast<const std::uint8_t*>(p.data()), p.size());
    }
    benchmark::DoNotOptimize(sink.size());
    hashes += hashes_in(msgs.size(), events);
  }
  state.SetItemsProcessed(hashes);
  state.SetLabel(positional ? "positional" : "tagged");
}
BENCHMARK(BM_MirrorApplyNoIndex)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

/// Per thread of this process (by tid): name, ns run and ns waiting for a core, from
/// /proc/self/task (Linux; empty elsewhere).
struct ThreadTimes {
  std::string name;
  double run_ns = 0;
  double wait_ns = 0;
};
std::map<std::string, ThreadTimes> thread_times() {
  std::map<std::string, ThreadTimes> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) {
    return out;
  }
  while (const dirent* ent = readdir(dir)) {
    const std::string tid = ent->d_name;
    if (tid == "." || tid == "..") {
      continue;
    }
    ThreadTimes t;
    std::ifstream("/proc/self/task/" + tid + "/comm") >> t.name;
    std::ifstream("/proc/self/task/" + tid + "/schedstat") >> t.run_ns >> t.wait_ns;
    out[tid] = t;
  }
  closedir(dir);
  return out;
}

void BM_MirrorZmqIngest(benchmark::State& state) {
  const int events = 16;
  const std::vector<std::string> msgs = payloads(2048, events, false);
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::sndhwm, 0);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::string endpoint = pub.get(zmq::sockopt::last_endpoint);
  std::int64_t hashes = 0;
  std::uint64_t seq = 0;
  prefixhit::BlockIndex index;
  prefixhit::BlockIndexSink sink(index);
  prefixhit::EventMirrorOptions options;
  options.endpoints = {endpoint};
  prefixhit::EventMirror mirror(sink, options);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string main_tid = std::to_string(static_cast<long>(syscall(SYS_gettid)));
  const std::map<std::string, ThreadTimes> before = thread_times();
  const auto wall_start = std::chrono::steady_clock::now();
  auto send = [&](const std::string& p) {
    std::uint8_t be[8];
    for (int i = 0; i < 8; ++i) {
      be[i] = static_cast<std::uint8_t>(seq >> (56 - 8 * i));
    }
    std::array<zmq::const_buffer, 3> frames = {zmq::str_buffer("kv"), zmq::buffer(be, 8),
                                               zmq::buffer(p.data(), p.size())};
    zmq::send_multipart(pub, frames);
    ++seq;
  };
  for (auto _ : state) {
    for (const std::string& p : msgs) {
      send(p);
    }
    if (!mirror.wait_for_seq(seq - 1, 60.0)) {
      state.SkipWithError("the mirror did not catch up");
      break;
    }
    hashes += hashes_in(msgs.size(), events);
  }
  // The mirror's threads: neither this one nor ZeroMQ's (ZMQbg/...); the busiest is the
  // pipeline's bottleneck.
  const double wall_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - wall_start)
          .count();
  double busiest_run = 0;
  double busiest_wait = 0;
  double process_run = 0;
  for (const auto& [tid, t] : thread_times()) {
    const auto was = before.find(tid);
    const double run = t.run_ns - (was == before.end() ? 0 : was->second.run_ns);
    const double wait = t.wait_ns - (was == before.end() ? 0 : was->second.wait_ns);
    process_run += run;
    if (tid != main_tid && t.name.rfind("ZMQbg", 0) != 0 && run > busiest_run) {
      busiest_run = run;
      busiest_wait = wait;
    }
  }
  if (busiest_run > 0) {
    state.counters["busiest_M/s"] = static_cast<double>(hashes) / busiest_run * 1e3;
    state.counters["busiest_wait"] = busiest_wait / busiest_run;
    state.counters["cpu_per_wall"] = process_run / wall_ns;
  }
  const prefixhit::EventMirrorStats st = mirror.stats();
  state.counters["gaps"] = static_cast<double>(st.gaps);
  state.counters["backpressure"] = static_cast<double>(st.backpressure);
  state.SetItemsProcessed(hashes);
}
BENCHMARK(BM_MirrorZmqIngest)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_IndexEraseBatch(benchmark::State& state) {
  const auto live = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kBatch = 1024;
  std::mt19937_64 rng(42);
  std::vector<prefixhit::BlockDigest> keys(live);
  for (prefixhit::BlockDigest& d : keys) {
    for (int w = 0; w < 4; ++w) {
      const std::uint64_t x = rng();
      std::memcpy(d.bytes.data() + 8 * w, &x, 8);
    }
  }
  prefixhit::BlockIndex index;
  index.insert(0, 0, prefixhit::span<const prefixhit::BlockDigest>(keys));
  std::size_t at = 0;
  for (auto _ : state) {
    const prefixhit::span<const prefixhit::BlockDigest> batch(keys.data() + at, kBatch);
    benchmark::DoNotOptimize(index.erase(0, 0, batch));
    state.PauseTiming();
    index.insert(0, 0, batch);
    at = (at + kBatch) % (live - kBatch + 1);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_IndexEraseBatch)->Arg(1 << 13)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace

#endif  // PREFIXHIT_BENCH_MIRROR
