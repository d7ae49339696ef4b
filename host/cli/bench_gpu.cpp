// `prefixhit bench --backend gpu`: the batch lookup engine timed on the device, over both
// existence sources (the resident DeviceBlockIndex, and a presence table built from the
// requests' KeyPlan answers). Plain C++ over the public API (gpu.hpp): it builds, and throws
// Unavailable, in builds without CUDA.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/cli/bench.hpp"
#include "host/parallel.hpp"
#include "prefixhit/detail/warp_probe.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Op {
  const char* name;
  StoreShape shape;
};

constexpr std::array<Op, 3> kOps = {
    {{"lookup_full_store", StoreShape::full},
     {"lookup_with_hole", StoreShape::with_hole},
     {"lookup_store_mask_roundtrip", StoreShape::store_mask_roundtrip}}};

/// One store shape's contents, prepared on the host for both sources.
struct PreparedStore {
  std::vector<std::vector<BlockDigest>> keys_by_group;  ///< for the device index
  std::vector<std::uint8_t> presence;                   ///< [request][group][hash index]
  std::int64_t index_keys_per_request = 0;              ///< probed by the index kernel, request 0
  std::int64_t presence_keys_per_request = 0;  ///< probed by the presence kernel, request 0
  LookupResult cpu_result_request0;            ///< the CPU engine's answer over the store
  LookupResult cpu_plan_result_request0;       ///< ... over the store's KeyPlan answers
};

/// Counts the keys the kernel's warp probe asks its source for (every lane probes each member
/// of its keys): the warp probe's CPU twin over the same store, run for one request.
template <class Inner>
struct CountingSource {
  Inner inner;
  std::int64_t* probes;
  bool contains(int group_id, std::int64_t i) const {
    ++*probes;
    return inner.contains(group_id, i);
  }
};

struct IndexAsSource {
  const BlockIndex* index;
  Namespace ns;
  const BlockDigest* hashes;
  bool contains(int group_id, std::int64_t i) const {
    return index->contains(ns, group_id, hashes[i]);
  }
};

/// Keys the kernel with `Lookahead` probes for one request of n hashes.
template <int Lookahead, class Inner>
std::int64_t count_probes(const Coordinator& coordinator, const Inner& source, std::int64_t n,
                          std::int64_t max_length) {
  std::int64_t probes = 0;
  std::int64_t scratch[2 * kMaxGroups + 1];
  ErrorKind status = ErrorKind::ok;
  const detail::KernelWarpProbe<CountingSource<Inner>, Lookahead> probe{
      &coordinator.plan(), CountingSource<Inner>{source, &probes}, n};
  detail::lookup_request(
      coordinator.plan(), n, max_length, true, probe, 0, 0, 1,
      detail::RequestOutputs{scratch, scratch + 1, scratch + 1 + kMaxGroups, &status});
  return probes;
}

PreparedStore prepare_store(const Coordinator& coordinator, const Workload& workload,
                            const std::vector<BlockDigest>& hashes, std::int64_t requests,
                            std::int64_t max_length, StoreShape shape) {
  const int groups = coordinator.num_groups();
  const std::int64_t n = workload.tokens / workload.config.hash_block_size;
  const auto cells = static_cast<std::size_t>(groups * n);
  const auto ns = static_cast<Namespace>(shape);
  PreparedStore out;
  out.keys_by_group.resize(static_cast<std::size_t>(groups));
  out.presence.assign(cells * static_cast<std::size_t>(requests), 0);
  std::mutex merge;
  std::exception_ptr failure;
  const int threads = detail::choose_threads(static_cast<std::size_t>(requests), 0, 1);
  detail::parallel_for(
      static_cast<std::size_t>(requests), threads, [&](std::size_t begin, std::size_t end) {
        try {
          std::vector<std::vector<BlockDigest>> local(static_cast<std::size_t>(groups));
          for (std::size_t r = begin; r < end; ++r) {
            const span<const BlockDigest> request(hashes.data() + r * static_cast<std::size_t>(n),
                                                  static_cast<std::size_t>(n));
            BlockIndex store;
            fill_store(store, ns, coordinator, request, workload.tokens, shape);
            store.for_each([&](Namespace, int g, const BlockDigest& key) {
              local[static_cast<std::size_t>(g)].push_back(key);
            });
            // The remote-store flow: ask the store about the request's KeyPlan, scatter.
            const KeyPlan plan = coordinator.key_plan(request, max_length);
            std::vector<std::uint8_t> answers(plan.size());
            for (std::size_t i = 0; i < plan.size(); ++i) {
              answers[i] = store.contains(ns, plan.group_ids[i], plan.keys[i]) ? 1 : 0;
            }
            gpu::scatter_plan_answers(plan, answers, groups, out.presence.data() + r * cells);
            if (r == 0) {
              out.cpu_result_request0 =
                  coordinator.find_longest_cache_hit(request, max_length, store.view(ns));
              out.cpu_plan_result_request0 = coordinator.find_longest_cache_hit(
                  request, max_length, PlanAnswers(plan, answers, groups));
              out.index_keys_per_request = count_probes<detail::kIndexLookahead>(
                  coordinator, IndexAsSource{&store, ns, request.data()}, n, max_length);
              out.presence_keys_per_request = count_probes<detail::kPresenceLookahead>(
                  coordinator, detail::PresenceTableSource{out.presence.data(), n}, n, max_length);
            }
          }
          const std::lock_guard<std::mutex> lock(merge);
          for (std::size_t g = 0; g < local.size(); ++g) {
            out.keys_by_group[g].insert(out.keys_by_group[g].end(), local[g].begin(),
                                        local[g].end());
          }
        } catch (...) {
          const std::lock_guard<std::mutex> lock(merge);
          failure = std::current_exception();
        }
      });
  if (failure) {
    std::rethrow_exception(failure);
  }
  return out;
}

struct Measured {
  double us_per_call = 0;  ///< end to end: launch and stream synchronisation
  double device_us = 0;    ///< CUDA events around the kernel
};

/// Medians over rounds of one timed call each, for at least min_seconds.
template <class Call>
Measured measure(const Call& call, double min_seconds) {
  gpu::LookupTiming timing;
  call(&timing);  // warm-up: first launch, caches
  std::vector<double> wall;
  std::vector<double> device;
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    call(&timing);
    wall.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    device.push_back(timing.device_us);
  } while (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds ||
           wall.size() < 5);
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(wall), median(device)};
}

void check_request0(const BatchLookupResult& gpu, const LookupResult& cpu, const char* what) {
  const LookupResult got = gpu.request(0);
  bool same = got.hit_length == cpu.hit_length && got.groups.size() == cpu.groups.size();
  for (std::size_t g = 0; same && g < got.groups.size(); ++g) {
    same = got.groups[g].num_blocks == cpu.groups[g].num_blocks &&
           got.groups[g].num_placeholders == cpu.groups[g].num_placeholders;
  }
  if (!same) {
    throw std::runtime_error(std::string("bench ") + what + ": the GPU answer for request 0 (hit " +
                             std::to_string(got.hit_length) +
                             ") differs from the CPU engine's (hit " +
                             std::to_string(cpu.hit_length) + ")");
  }
}

}  // namespace

std::vector<BenchRow> run_gpu_bench(const Workload& workload, std::int64_t requests,
                                    double min_seconds) {
  if (!gpu::device_available()) {
    throw Unavailable("bench --backend gpu: " + gpu::describe_device());
  }
  if (requests <= 0) {
    throw InvalidArgument("requests must be positive, got " + std::to_string(requests));
  }
  const Coordinator coordinator(workload.config);
  const gpu::BatchLookupEngine engine(coordinator);
  const int groups = coordinator.num_groups();
  const std::int64_t n = workload.tokens / workload.config.hash_block_size;
  const std::int64_t max_length = workload.tokens - 1;  // as the CPU bench
  const std::vector<BlockDigest> hashes = make_request_hashes(workload, requests, 0x5EED);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(requests) + 1);
  for (std::int64_t r = 0; r <= requests; ++r) {
    offsets[static_cast<std::size_t>(r)] = r * n;
  }
  const std::vector<std::int64_t> max_lengths(static_cast<std::size_t>(requests), max_length);
  LookupBatch batch;
  batch.digests = hashes;
  batch.offsets = offsets;
  batch.max_lengths = max_lengths;
  gpu::DeviceBatchBuffers buffers(batch, groups);
  gpu::DeviceLookupOutput out = buffers.output();
  out.first_failed = nullptr;  // one launch per call: the runtime's fast path

  std::vector<BenchRow> rows;
  auto add = [&](const char* op, const char* backend, const Measured& m, std::int64_t keys) {
    BenchRow row;
    row.workload = workload.name;
    row.backend = backend;
    row.op = op;
    row.requests = requests;
    row.tokens = workload.tokens;
    row.us_per_call = m.us_per_call;
    row.calls_per_s = 1e6 / m.us_per_call;
    row.device_us = m.device_us;
    row.keys_per_s = static_cast<double>(keys) / (m.device_us * 1e-6);
    rows.push_back(row);
  };

  for (const Op& op : kOps) {
    const PreparedStore store =
        prepare_store(coordinator, workload, hashes, requests, max_length, op.shape);
    const auto ns = static_cast<Namespace>(op.shape);

    std::size_t total = 0;
    for (const auto& keys_of_group : store.keys_by_group) {
      total += keys_of_group.size();
    }
    DeviceBlockIndexOptions options;
    options.initial_capacity = std::max<std::size_t>(std::size_t{1} << 16, total * 5 / 4 + 1);
    DeviceBlockIndex index(options);
    for (std::size_t g = 0; g < store.keys_by_group.size(); ++g) {
      gpu::insert_host_keys(index, ns, static_cast<int>(g), store.keys_by_group[g]);
    }
    const DeviceBlockIndexRef ref = index.ref();
    add(op.name, "gpu",
        measure(
            [&](gpu::LookupTiming* t) { engine.lookup(buffers.batch(), ref, ns, out, nullptr, t); },
            min_seconds),
        store.index_keys_per_request * requests);
    check_request0(buffers.download(), store.cpu_result_request0, op.name);

    const std::uint8_t* presence = buffers.upload_presence(store.presence);
    add(op.name, "gpu-bits",
        measure(
            [&](gpu::LookupTiming* t) {
              engine.lookup(buffers.batch(), presence, out, nullptr, t);
            },
            min_seconds),
        store.presence_keys_per_request * requests);
    check_request0(buffers.download(), store.cpu_plan_result_request0, op.name);
  }
  return rows;
}

}  // namespace prefixhit::cli
