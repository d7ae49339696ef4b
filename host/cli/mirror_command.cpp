// `prefixhit mirror ENDPOINT...`: runs an EventMirror into a resident index (a CPU BlockIndex, or
// with --backend gpu a DeviceBlockIndex), prints its statistics periodically, optionally saves
// the (CPU) index every S seconds, and on SIGINT/SIGTERM saves once more and exits 0.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "host/cli/commands.hpp"
#include "prefixhit/block_index.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/gpu.hpp"
#include "prefixhit/index_file.hpp"

namespace prefixhit::cli {

namespace {

struct MirrorCliOptions {
  std::vector<std::string> endpoints;
  std::string format = "vllm";
  std::string backend = "cpu";
  std::vector<std::string> replay;
  std::uint32_t ns = 0;
  std::string topic;
  std::string save;
  double every = 0;
  double stats_every = 5;
  double duration = 0;
  int tp = 1;
  int pcp = 1;
  int dcp = 1;
  int pp = 1;
  std::string model;
  std::string cache_prefix;
  bool has_cache_prefix = false;
};

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int /*signal*/) {
  g_stop = 1;
}

void print_stats(const EventMirrorStats& s, double seconds) {
  std::cout << "[mirror " << static_cast<std::int64_t>(seconds) << " s] messages " << s.messages
            << ", stored " << s.events_stored << " (" << s.hashes_stored << " hashes), removed "
            << s.events_removed << " (" << s.hashes_removed << " hashes), cleared "
            << s.events_cleared << ", last seq "
            << (s.has_seq ? std::to_string(s.last_seq) : std::string("-")) << ", gaps " << s.gaps
            << ", replays " << s.replays << " (" << s.replayed_messages << " msgs), resyncs "
            << s.resyncs << ", missed " << s.missed_messages << ", malformed "
            << s.malformed_messages << " msgs / " << s.malformed_events << " events, failed "
            << s.failed_events << ", foreign keys " << s.foreign_keys << ", backpressure "
            << s.backpressure << ", lag " << s.lag_ms << " ms (max " << s.max_lag_ms << "), keys "
            << s.keys << " (index " << s.index_keys << ")\n";
  if (!s.last_error.empty()) {
    std::cout << "  last skipped: " << s.last_error << "\n";
  }
  std::cout.flush();
}

void save(const BlockIndex& index, const std::string& path) {
  const IndexFileStats st = save_index(index, path);
  std::cout << "saved " << st.key_count << " keys to " << path << "\n";
}

int run_mirror(const MirrorCliOptions& o) {
  if (!mirror_available()) {
    throw Unavailable(
        "this prefixhit was built without the event mirror (cppzmq, libzmq and "
        "msgpack-cxx were not found at build time)");
  }
  if (o.every > 0 && o.save.empty()) {
    throw InvalidArgument("--every needs --save FILE");
  }
  EventMirrorOptions options;
  options.format = parse_event_format(o.format);
  options.endpoints = o.endpoints;
  options.replay_endpoints = o.replay;
  options.ns = o.ns;
  options.topic = o.topic;
  options.ranks = rank_namespaces(o.tp, o.pcp, o.dcp, o.pp);
  options.model = o.model;
  options.match_cache_prefix = o.has_cache_prefix;
  options.cache_prefix = o.cache_prefix;

  BlockIndex index;
  std::unique_ptr<DeviceBlockIndex> device_index;
  std::unique_ptr<MirrorSink> sink;
  if (o.backend == "gpu") {
    if (!o.save.empty()) {
      throw InvalidArgument("--save needs --backend cpu (a device index is not saved to a file)");
    }
    if (!gpu::device_available()) {
      throw Unavailable("--backend gpu: no usable GPU (" + gpu::describe_device() + ")");
    }
    device_index = std::make_unique<DeviceBlockIndex>();
    sink = std::make_unique<DeviceBlockIndexSink>(*device_index);
  } else {
    sink = std::make_unique<BlockIndexSink>(index);
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  EventMirror mirror(*sink, options);
  std::cout << "mirroring " << o.endpoints.size() << " endpoint(s), format " << o.format
            << ", namespace " << o.ns << ", " << o.backend << " index";
  if (!o.replay.empty()) {
    std::cout << ", replay " << o.replay.front() << (o.replay.size() > 1 ? ", ..." : "");
  }
  std::cout << std::endl;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_stats = start;
  auto last_save = start;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  while (g_stop == 0 && (o.duration <= 0 || seconds_since(start) < o.duration)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (o.stats_every > 0 && seconds_since(last_stats) >= o.stats_every) {
      print_stats(mirror.stats(), seconds_since(start));
      last_stats = Clock::now();
    }
    if (o.every > 0 && seconds_since(last_save) >= o.every) {
      save(index, o.save);
      last_save = Clock::now();
    }
  }
  mirror.stop();
  if (g_stop != 0) {
    std::cout << "stopping on signal\n";
  }
  print_stats(mirror.stats(), seconds_since(start));
  if (!o.save.empty()) {
    save(index, o.save);
  }
  return 0;
}

}  // namespace

void add_mirror_command(CLI::App& app) {
  auto o = std::make_shared<MirrorCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "mirror",
      "Keep a resident index in sync from KV-event streams (ZeroMQ PUB endpoints), print its "
      "statistics periodically; SIGINT/SIGTERM saves once more (with --save) and exits 0");
  cmd->add_option("ENDPOINT", o->endpoints, "PUB endpoints, e.g. tcp://127.0.0.1:5557")->required();
  cmd->add_option("--format", o->format,
                  "vllm (vLLM KV events) or mooncake (Mooncake master events)")
      ->check(CLI::IsMember({"vllm", "mooncake"}))
      ->capture_default_str();
  cmd->add_option("--backend", o->backend,
                  "cpu (a BlockIndex, which --save can write) or gpu (a DeviceBlockIndex on the "
                  "current device)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_option("--replay", o->replay,
                  "Replay (ROUTER) endpoint of each ENDPOINT, in order; gaps without one resync");
  cmd->add_option("--namespace", o->ns, "Index namespace the keys go to")
      ->check(CLI::Range(std::uint32_t{0}, kMaxNamespace))
      ->capture_default_str();
  cmd->add_option("--topic", o->topic, "Subscription topic prefix (default: every topic)");
  cmd->add_option("--save", o->save, "Index file to save (atomically) on exit and every --every s");
  cmd->add_option("--every", o->every, "Also save every S seconds (needs --save)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stats-every", o->stats_every,
                  "Print statistics every S seconds (0: only at "
                  "exit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--duration", o->duration, "Exit after S seconds (0: run until a signal)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tp", o->tp, "Mooncake: tensor-parallel ranks every key must be stored by")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--pcp", o->pcp, "Mooncake: prefill context-parallel ranks")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--dcp", o->dcp, "Mooncake: decode context-parallel ranks")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--pp", o->pp, "Mooncake: pipeline-parallel ranks")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--model", o->model, "Mooncake: keep only keys of this model");
  cmd->add_option("--cache-prefix", o->cache_prefix,
                  "Mooncake: keep only keys with this cache prefix ('' = keys without one)")
      ->each([o](const std::string&) { o->has_cache_prefix = true; });
  cmd->callback([o] {
    const int rc = run_mirror(*o);
    if (rc != 0) {
      throw CLI::RuntimeError(rc);
    }
  });
}

}  // namespace prefixhit::cli
