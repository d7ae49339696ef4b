// The event mirror's part of the C ABI (include/prefixhit/prefixhit.h, "event mirror").
#include <memory>
#include <string>
#include <vector>

#include "host/c_api_internal.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/prefixhit.h"

struct prefixhit_mirror {
  std::unique_ptr<prefixhit::MirrorSink> sink;     // a CPU or a device index's sink
  std::unique_ptr<prefixhit::EventMirror> mirror;  // declared last: stopped before the sink goes
};

namespace {

using prefixhit::InvalidArgument;

template <class T>
void require(const T* pointer, const char* what) {
  if (pointer == nullptr) {
    throw InvalidArgument(std::string(what) + " must not be NULL");
  }
}

std::vector<std::string> strings(const char* const* items, std::size_t n, const char* what,
                                 bool allow_null) {
  std::vector<std::string> out;
  if (n != 0) {
    require(items, what);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (items[i] == nullptr && !allow_null) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] is NULL");
    }
    out.emplace_back(items[i] == nullptr ? "" : items[i]);
  }
  return out;
}

int size_or_one(std::int32_t n) {
  return n == 0 ? 1 : n;
}

/// The C options as EventMirrorOptions (checked: format, endpoint strings).
prefixhit::EventMirrorOptions mirror_options(const prefixhit_mirror_options* options) {
  require(options, "options");
  prefixhit::EventMirrorOptions o;
  if (options->format != PREFIXHIT_EVENTS_VLLM && options->format != PREFIXHIT_EVENTS_MOONCAKE) {
    throw InvalidArgument("format " + std::to_string(static_cast<int>(options->format)) +
                          " is neither PREFIXHIT_EVENTS_VLLM nor PREFIXHIT_EVENTS_MOONCAKE");
  }
  o.format = options->format == PREFIXHIT_EVENTS_VLLM ? prefixhit::EventFormat::vllm
                                                      : prefixhit::EventFormat::mooncake;
  o.endpoints = strings(options->endpoints, options->num_endpoints, "endpoints", false);
  o.replay_endpoints =
      strings(options->replay_endpoints, options->num_replay_endpoints, "replay_endpoints", true);
  o.ns = options->ns;
  o.topic = options->topic == nullptr ? "" : options->topic;
  if (options->queue_capacity != 0) {
    o.queue_capacity = options->queue_capacity;
  }
  if (options->queue_max_keys != 0) {
    o.queue_max_keys = options->queue_max_keys;
  }
  if (options->replay_timeout_ms != 0) {
    o.replay_timeout_ms = options->replay_timeout_ms;
  }
  o.ranks =
      prefixhit::rank_namespaces(size_or_one(options->tp_size), size_or_one(options->pcp_size),
                                 size_or_one(options->dcp_size), size_or_one(options->pp_size));
  o.model = options->model == nullptr ? "" : options->model;
  o.match_cache_prefix = options->cache_prefix != nullptr;
  o.cache_prefix = options->cache_prefix == nullptr ? "" : options->cache_prefix;
  return o;
}

/// Starts a mirror into `sink` (made once the options are checked) and hands it out.
template <class MakeSink>
void start_mirror(const prefixhit_mirror_options* options, prefixhit_mirror** out,
                  MakeSink&& make_sink) {
  require(out, "out");
  *out = nullptr;
  prefixhit::EventMirrorOptions o = mirror_options(options);
  auto handle = std::make_unique<prefixhit_mirror>();
  handle->sink = make_sink();
  handle->mirror = std::make_unique<prefixhit::EventMirror>(*handle->sink, std::move(o));
  *out = handle.release();
}

}  // namespace

extern "C" {

int prefixhit_mirror_available(void) {
  return prefixhit::mirror_available() ? 1 : 0;
}

prefixhit_status prefixhit_mirror_create(const prefixhit_mirror_options* options,
                                         prefixhit_block_index* index, prefixhit_mirror** out) {
  return prefixhit::capi::guarded_call([&] {
    start_mirror(options, out, [&]() -> std::unique_ptr<prefixhit::MirrorSink> {
      return std::make_unique<prefixhit::BlockIndexSink>(prefixhit::capi::block_index_of(index));
    });
  });
}

prefixhit_status prefixhit_mirror_create_device(const prefixhit_mirror_options* options,
                                                prefixhit_device_block_index* index,
                                                prefixhit_mirror** out) {
  return prefixhit::capi::guarded_call([&] {
    start_mirror(options, out, [&] { return prefixhit::capi::device_mirror_sink(index); });
  });
}

void prefixhit_mirror_destroy(prefixhit_mirror* mirror) {
  delete mirror;
}

prefixhit_status prefixhit_mirror_stop(prefixhit_mirror* mirror) {
  return prefixhit::capi::guarded_call([&] {
    require(mirror, "mirror");
    mirror->mirror->stop();
  });
}

prefixhit_status prefixhit_mirror_get_stats(const prefixhit_mirror* mirror,
                                            prefixhit_mirror_stats* out) {
  return prefixhit::capi::guarded_call([&] {
    require(mirror, "mirror");
    require(out, "out");
    const prefixhit::EventMirrorStats s = mirror->mirror->stats();
    *out = prefixhit_mirror_stats{};
    out->messages = s.messages;
    out->events_stored = s.events_stored;
    out->events_removed = s.events_removed;
    out->events_cleared = s.events_cleared;
    out->hashes_stored = s.hashes_stored;
    out->hashes_removed = s.hashes_removed;
    out->malformed_messages = s.malformed_messages;
    out->malformed_events = s.malformed_events;
    out->failed_events = s.failed_events;
    out->foreign_keys = s.foreign_keys;
    out->gaps = s.gaps;
    out->missed_messages = s.missed_messages;
    out->replays = s.replays;
    out->replayed_messages = s.replayed_messages;
    out->resyncs = s.resyncs;
    out->duplicates = s.duplicates;
    out->backpressure = s.backpressure;
    out->queue_depth = s.queue_depth;
    out->has_seq = s.has_seq ? 1 : 0;
    out->last_seq = s.last_seq;
    out->lag_ms = s.lag_ms;
    out->max_lag_ms = s.max_lag_ms;
    out->keys = s.keys;
    out->index_keys = s.index_keys;
  });
}

prefixhit_status prefixhit_mirror_wait_for_seq(const prefixhit_mirror* mirror, uint64_t seq,
                                               double timeout_s, int* reached) {
  return prefixhit::capi::guarded_call([&] {
    require(mirror, "mirror");
    require(reached, "reached");
    if (!(timeout_s >= 0)) {
      throw InvalidArgument("timeout_s must be >= 0");
    }
    *reached = mirror->mirror->wait_for_seq(seq, timeout_s) ? 1 : 0;
  });
}

}  // extern "C"
