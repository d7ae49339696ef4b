// prefixhit.EventMirror: a BlockIndex kept in sync from KV-event streams (ZeroMQ + msgpack) on
// the mirror's own threads, while Python looks keys up in the same index. A 'cpu' index is fed
// through BlockIndexSink (thread-safe on its own); a 'cuda' index through DeviceBlockIndexSink,
// whose lock (mirror.lock()) keeps the mirror's writes off the index during a lookup.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit::py {

namespace {

struct PyEventMirror {
  nb::object index;  // the prefixhit.BlockIndex mirrored into (kept alive)
  std::string device;
  std::unique_ptr<MirrorSink> sink;
  DeviceBlockIndexSink* device_sink = nullptr;  // sink, when device == "cuda"
  std::unique_ptr<EventMirror> mirror;
  std::atomic<std::size_t> lock_holder{0};  // hash of the thread inside mirror.lock(), or 0
};

/// `with mirror.lock():` holds a 'cuda' mirror's writes off its index (a no-op for 'cpu').
struct PyMirrorLock {
  PyEventMirror* owner = nullptr;
  std::unique_lock<std::mutex> held;
};

std::size_t this_thread_hash() {
  return std::hash<std::thread::id>{}(std::this_thread::get_id()) | 1U;  // never 0
}

/// stats()/stop() wait for the mirror's writes, which mirror.lock() holds off: from inside it
/// they would wait forever.
void refuse_inside_lock(const PyEventMirror& self, const char* what) {
  if (self.lock_holder.load() == this_thread_hash()) {
    throw InvalidArgument(std::string("EventMirror.") + what +
                          " inside `with mirror.lock()` would wait for itself; call it after the "
                          "with block");
  }
}

/// The device a mirror writes to: `device` ('auto', 'cpu' or 'cuda') against the given index.
std::string mirror_device(const std::string& device, nb::handle index_obj) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw InvalidArgument("device must be 'auto', 'cpu' or 'cuda', got '" + device + "'");
  }
  if (index_obj.is_none()) {
    if (device != "auto") {
      return device;
    }
    return gpu::device_available() ? "cuda" : "cpu";
  }
  const std::string& has = as_block_index(index_obj).device;
  if (device != "auto" && device != has) {
    throw InvalidArgument("device='" + device + "' but the index is a '" + has +
                          "' BlockIndex (leave device='auto' to follow the index)");
  }
  return has;
}

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
             const std::string& device, const std::string& format, std::vector<std::string> replay,
             std::int64_t ns, const std::string& topic, std::size_t queue_capacity,
             std::size_t queue_max_keys, int replay_timeout_ms,
             const std::vector<std::tuple<int, int, int, int>>& ranks, const std::string& model,
             nb::handle cache_prefix) {
            if (!index_obj.is_none() && !is_block_index(index_obj)) {
              throw InvalidArgument("index must be a prefixhit.BlockIndex or None");
            }
            const std::string on = mirror_device(device, index_obj);
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
            o.queue_max_keys = queue_max_keys;
            o.replay_timeout_ms = replay_timeout_ms;
            for (const auto& [tp, pcp, dcp, pp] : ranks) {
              o.ranks.push_back(RankNamespace{tp, pcp, dcp, pp});
            }
            o.model = model;
            if (!cache_prefix.is_none()) {
              o.match_cache_prefix = true;
              o.cache_prefix = nb::cast<std::string>(cache_prefix);
            }
            // A new index when none is given; BlockIndex('cuda') raises BackendUnavailableError
            // without a CUDA build or device.
            nb::object index = index_obj.is_none() ? nb::object(nb::type<PyBlockIndex>()(on))
                                                   : nb::borrow(index_obj);
            PyBlockIndex& target = as_block_index(index);
            std::unique_ptr<MirrorSink> sink;
            DeviceBlockIndexSink* device_sink = nullptr;
            if (target.gpu) {
              auto d = std::make_unique<DeviceBlockIndexSink>(*target.gpu);
              device_sink = d.get();
              sink = std::move(d);
            } else {
              sink = std::make_unique<BlockIndexSink>(*target.cpu);
            }
            auto mirror = std::make_unique<EventMirror>(*sink, std::move(o));
            auto* made = new (self) PyEventMirror();
            made->index = std::move(index);
            made->device = on;
            made->sink = std::move(sink);
            made->device_sink = device_sink;
            made->mirror = std::move(mirror);
          },
          nb::arg("index").none(), nb::arg("endpoints"), nb::kw_only(), nb::arg("device") = "auto",
          nb::arg("format") = "vllm", nb::arg("replay") = std::vector<std::string>{},
          nb::arg("namespace") = 0, nb::arg("topic") = "", nb::arg("queue_capacity") = 4096,
          nb::arg("queue_max_keys") = std::size_t{1} << 20, nb::arg("replay_timeout_ms") = 1000,
          nb::arg("ranks") = std::vector<std::tuple<int, int, int, int>>{}, nb::arg("model") = "",
          nb::arg("cache_prefix").none() = nb::none(),
          nb::sig("def __init__(self, index: BlockIndex | None, endpoints: Sequence[str], *, "
                  "device: str = 'auto', format: str = 'vllm', replay: Sequence[str] = [], "
                  "namespace: int = 0, "
                  "topic: str = '', queue_capacity: int = 4096, queue_max_keys: int = 1048576, "
                  "replay_timeout_ms: int = 1000, "
                  "ranks: Sequence[tuple[int, int, int, int]] = [], model: str = '', "
                  "cache_prefix: str | None = None) -> None"),
          "index: the BlockIndex to keep in sync (kept alive by the mirror), or None for a new "
          "one (mirror.index). device: 'auto' (the index's device; for a new index 'cuda' where "
          "a GPU is usable, else 'cpu'), 'cpu' or 'cuda' (must match a given index; a new "
          "'cuda' index raises BackendUnavailableError without a CUDA build or device). A "
          "'cuda' index is written through the device index sink: look it up (BlockIndex "
          "calls, find_longest_cache_hit(s) on the GPU engine) inside `with mirror.lock():`. "
          "endpoints: PUB "
          "endpoints, each its own sequence stream. replay: one ROUTER replay endpoint per "
          "endpoint ('' for none). queue_capacity / queue_max_keys: the bound on messages / "
          "decoded block hashes waiting between the receiving and the applying thread. namespace: "
          "the index namespace the keys go to. ranks "
          "(Mooncake): the (tp, pcp, dcp, pp) rank namespaces a key needs (default: (0,0,0,0) "
          "only). model / cache_prefix (Mooncake): keep only keys of this model / prefix.")
      .def_prop_ro(
          "index", [](PyEventMirror& self) { return self.index; },
          "The BlockIndex this mirror keeps in sync (the one given, or the one it made).")
      .def_prop_ro(
          "device", [](PyEventMirror& self) { return self.device; },
          "'cpu' or 'cuda': where the mirrored index lives.")
      .def(
          "lock",
          [](PyEventMirror& self) {
            live(self);
            return PyMirrorLock{&self, {}};
          },
          nb::keep_alive<0, 1>(),
          "A context manager that holds the mirror's writes off a 'cuda' index while it is "
          "entered, for lookups on it (the device index is not synchronised on its own). "
          "Events keep arriving and queue meanwhile (bounded: queue_capacity). For a 'cpu' "
          "index it does nothing: BlockIndex is thread-safe. stats() and stop() cannot be "
          "called inside it.")
      .def(
          "stats",
          [](PyEventMirror& self) {
            refuse_inside_lock(self, "stats()");
            return stats_dict(live(self).stats());
          },
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
            refuse_inside_lock(self, "stop()");
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
            refuse_inside_lock(self, "__exit__");
            if (self.mirror) {
              nb::gil_scoped_release release;
              self.mirror->stop();
            }
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());

  nb::class_<PyMirrorLock>(m, "EventMirrorLock",
                           "What EventMirror.lock() returns: `with mirror.lock(): ...`.")
      .def("__enter__",
           [](nb::handle obj) {
             PyMirrorLock& self = nb::cast<PyMirrorLock&>(obj);
             if (self.held.owns_lock() || self.owner->lock_holder.load() == this_thread_hash()) {
               throw InvalidArgument("this EventMirror's lock is already held by this thread");
             }
             if (self.owner->device_sink != nullptr) {
               nb::gil_scoped_release release;  // the mirror may hold it for a moment
               self.held = self.owner->device_sink->lock();
             }
             self.owner->lock_holder.store(this_thread_hash());
             return obj;
           })
      .def(
          "__exit__",
          [](PyMirrorLock& self, nb::handle, nb::handle, nb::handle) {
            self.owner->lock_holder.store(0);
            if (self.held.owns_lock()) {
              self.held.unlock();
            }
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

}  // namespace prefixhit::py
