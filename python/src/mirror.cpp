// prefixhit.EventMirror: a BlockIndex kept in sync from KV-event streams (ZeroMQ + msgpack) on
// the mirror's own threads, while Python looks keys up in the same index.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit::py {

namespace {

struct PyEventMirror {
  std::unique_ptr<BlockIndexSink> sink;
  std::unique_ptr<EventMirror> mirror;
};

nb::dict stats_dict(const EventMirrorStats& s) {
  nb::dict d;
  d["messages"] = s.messages;
  d["events_stored"] = s.events_stored;
  d["events_removed"] = s.events_removed;
  d["events_cleared"] = s.events_cleared;
  d["hashes_stored"] = s.hashes_stored;
  d["hashes_removed"] = s.hashes_removed;
  d["malformed_messages"] = s.malformed_messages;
  d["malformed_events"] = s.malformed_events;
  d["failed_events"] = s.failed_events;
  d["foreign_keys"] = s.foreign_keys;
  d["gaps"] = s.gaps;
  d["missed_messages"] = s.missed_messages;
  d["replays"] = s.replays;
  d["replayed_messages"] = s.replayed_messages;
  d["resyncs"] = s.resyncs;
  d["duplicates"] = s.duplicates;
  d["backpressure"] = s.backpressure;
  d["queue_depth"] = s.queue_depth;
  d["last_seq"] = s.has_seq ? nb::cast(s.last_seq) : nb::none();
  d["lag_ms"] = s.lag_ms;
  d["max_lag_ms"] = s.max_lag_ms;
  d["keys"] = s.keys;
  d["index_keys"] = s.index_keys;
  d["last_error"] = s.last_error;
  return d;
}

EventMirror& live(PyEventMirror& self) {
  if (!self.mirror) {
    throw InvalidArgument("this EventMirror was not constructed");
  }
  return *self.mirror;
}

}  // namespace

void bind_mirror(nb::module_& m) {
  m.def("mirror_available", &mirror_available,
        "Whether this build has EventMirror (ZeroMQ and msgpack-cxx were found at build time).");
  nb::class_<PyEventMirror>(
      m, "EventMirror",
      "Keeps a BlockIndex true to a store from its KV-event streams: subscribes to ZeroMQ PUB "
      "endpoints and applies vLLM KV events (format='vllm': BlockStored/BlockRemoved/"
      "AllBlocksCleared, tagged maps or positional arrays, hashes as bytes or 64-bit ints) or "
      "Mooncake master events (format='mooncake': object keys in vLLM's store key format, a key "
      "kept only while every rank namespace in `ranks` holds it), in order, on its own threads. "
      "Sequence gaps (and a late join) are filled from the replay endpoint; when that is "
      "impossible the mirror clears its keys and resyncs (stats()['resyncs']). Bad messages "
      "are counted and skipped. Lookups on `index` may run while it ingests. Integer hashes "
      "are 8-byte digests (their big-endian bytes, zero-padded to 32 in today's index).")
      .def(
          "__init__",
          [](PyEventMirror* self, nb::handle index_obj, std::vector<std::string> endpoints,
             const std::string& format, std::vector<std::string> replay, std::int64_t ns,
             const std::string& topic, std::size_t queue_capacity, int replay_timeout_ms,
             std::vector<std::tuple<int, int, int, int>> ranks, const std::string& model,
             nb::handle cache_prefix) {
            if (!is_block_index(index_obj)) {
              throw InvalidArgument("index must be a prefixhit.BlockIndex");
            }
            PyBlockIndex& index = as_block_index(index_obj);
            if (!index.cpu) {
              throw Unavailable(
                  "EventMirror mirrors into a 'cpu' BlockIndex from Python (the "
                  "C++ DeviceBlockIndexSink serves device indexes)");
            }
            if (ns < 0 || ns > static_cast<std::int64_t>(kMaxNamespace)) {
              throw InvalidArgument("namespace must be in [0, " + std::to_string(kMaxNamespace) +
                                    "], got " + std::to_string(ns));
            }
            EventMirrorOptions o;
            o.format = parse_event_format(format);
            o.endpoints = std::move(endpoints);
            o.replay_endpoints = std::move(replay);
            o.ns = static_cast<Namespace>(ns);
            o.topic = topic;
            o.queue_capacity = queue_capacity;
            o.replay_timeout_ms = replay_timeout_ms;
            for (const auto& [tp, pcp, dcp, pp] : ranks) {
              o.ranks.push_back(RankNamespace{tp, pcp, dcp, pp});
            }
            o.model = model;
            if (!cache_prefix.is_none()) {
              o.match_cache_prefix = true;
              o.cache_prefix = nb::cast<std::string>(cache_prefix);
            }
            auto sink = std::make_unique<BlockIndexSink>(*index.cpu);
            auto mirror = std::make_unique<EventMirror>(*sink, std::move(o));
            new (self) PyEventMirror{std::move(sink), std::move(mirror)};
          },
          nb::arg("index"), nb::arg("endpoints"), nb::kw_only(), nb::arg("format") = "vllm",
          nb::arg("replay") = std::vector<std::string>{}, nb::arg("namespace") = 0,
          nb::arg("topic") = "", nb::arg("queue_capacity") = 4096,
          nb::arg("replay_timeout_ms") = 1000,
          nb::arg("ranks") = std::vector<std::tuple<int, int, int, int>>{}, nb::arg("model") = "",
          nb::arg("cache_prefix").none() = nb::none(), nb::keep_alive<1, 2>(),
          nb::sig("def __init__(self, index: BlockIndex, endpoints: Sequence[str], *, "
                  "format: str = 'vllm', replay: Sequence[str] = [], namespace: int = 0, "
                  "topic: str = '', queue_capacity: int = 4096, replay_timeout_ms: int = 1000, "
                  "ranks: Sequence[tuple[int, int, int, int]] = [], model: str = '', "
                  "cache_prefix: str | None = None) -> None"),
          "index: the BlockIndex to keep in sync (kept alive by the mirror). endpoints: PUB "
          "endpoints, each its own sequence stream. replay: one ROUTER replay endpoint per "
          "endpoint ('' for none). namespace: the index namespace the keys go to. ranks "
          "(Mooncake): the (tp, pcp, dcp, pp) rank namespaces a key needs (default: (0,0,0,0) "
          "only). model / cache_prefix (Mooncake): keep only keys of this model / prefix.")
      .def(
          "stats", [](PyEventMirror& self) { return stats_dict(live(self).stats()); },
          "Counters: messages, events_stored/removed/cleared, hashes_stored/removed, "
          "malformed_messages/events, failed_events, foreign_keys, gaps, missed_messages, "
          "replays, replayed_messages, resyncs, duplicates, backpressure, queue_depth, "
          "last_seq (None before the first message), lag_ms, max_lag_ms, keys (present per the "
          "mirror), index_keys, last_error.")
      .def(
          "wait_for_seq",
          [](PyEventMirror& self, std::uint64_t seq, double timeout) {
            EventMirror& mirror = live(self);
            nb::gil_scoped_release release;
            return mirror.wait_for_seq(seq, timeout);
          },
          nb::arg("seq"), nb::arg("timeout") = 5.0,
          "Waits until a message with sequence >= seq has been applied; False on timeout.")
      .def(
          "stop",
          [](PyEventMirror& self) {
            if (self.mirror) {
              nb::gil_scoped_release release;
              self.mirror->stop();
            }
          },
          "Stops ingesting and closes the sockets (idempotent). The index keeps its keys.")
      .def_prop_ro("running",
                   [](PyEventMirror& self) { return self.mirror && self.mirror->running(); })
      .def("__enter__", [](nb::handle self) { return self; })
      .def(
          "__exit__",
          [](PyEventMirror& self, nb::handle, nb::handle, nb::handle) {
            if (self.mirror) {
              nb::gil_scoped_release release;
              self.mirror->stop();
            }
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

}  // namespace prefixhit::py
