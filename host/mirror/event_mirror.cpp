// EventMirror: a receiving thread (SUB sockets -> msgpack decoding -> bounded queue of decoded
// messages, host/mirror/message_queue.hpp) and an applying thread (queue -> sequence checks,
// replay on gaps -> BatchApplier, host/mirror/sequencer.hpp), so that decoding one message
// overlaps applying the previous ones. This file holds the public API, construction and stop,
// and the receiving thread. ZeroMQ sockets stay on the thread that uses them; the only shared
// state is the queue and the stats, each under a mutex, and the medium names (MediumTable, its
// own lock). The replay request itself is host/mirror/replay.cpp.
#include <zmq.hpp>
#include <zmq_addon.hpp>

#if defined(__linux__)
#include <pthread.h>
#endif

#include <chrono>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "host/mirror/decode.hpp"
#include "host/mirror/message_queue.hpp"
#include "host/mirror/sequencer.hpp"
#include "host/mirror/wire.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace {

using mirror::QueuedMessage;
using mirror::read_be64;

/// [topic, seq, payload] or, from older publishers, [seq, payload]: fills `item` (reused) and
/// decodes the payload frame where ZeroMQ received it.
void parse_message(std::vector<zmq::message_t>& frames, std::size_t endpoint,
                   mirror::Decoder& decoder, QueuedMessage& item) {
  item.endpoint = endpoint;
  item.ok = false;
  item.decoded = false;
  item.seq = 0;
  item.error.clear();
  item.batch.reset();
  if (frames.size() != 2 && frames.size() != 3) {
    item.error =
        "message has " + std::to_string(frames.size()) + " frames (expected [topic, seq, payload])";
    return;
  }
  const zmq::message_t& seq = frames[frames.size() - 2];
  if (seq.size() != 8) {
    item.error = "sequence frame has " + std::to_string(seq.size()) + " bytes (expected 8)";
    return;
  }
  item.ok = true;
  item.seq = read_be64(seq.data());
  const zmq::message_t& payload = frames.back();
  try {
    decoder.decode(static_cast<const std::uint8_t*>(payload.data()), payload.size(), item.batch);
    item.decoded = true;
  } catch (const std::exception& e) {
    item.error = e.what();  // counted as a malformed message when its turn comes
    item.batch.reset();
  }
}

}  // namespace

bool mirror_available() noexcept {
  return true;
}

struct EventMirror::Impl {
  Impl(MirrorSink& s, EventMirrorOptions o)
      : options(std::move(o)),
        sequencer(s, options, media, context),
        queue(options.queue_capacity, options.queue_max_keys,
              [this] { sequencer.count_backpressure(); }),
        live_decoder(options, media),
        sink(&s) {}

  void receive_loop() {
    std::vector<zmq::pollitem_t> items;
    for (auto& s : subs) {
      items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
    }
    std::vector<zmq::message_t> frames;
    QueuedMessage next;
    while (!queue.stopping()) {
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
      } catch (const zmq::error_t&) {
        continue;  // EINTR
      }
      for (std::size_t e = 0; e < subs.size(); ++e) {
        if ((items[e].revents & ZMQ_POLLIN) == 0) {
          continue;
        }
        // Drain what is ready on this socket, bounded so that no endpoint starves another.
        for (int burst = 0; burst < 256; ++burst) {
          frames.clear();
          std::optional<std::size_t> got;
          try {
            got =
                zmq::recv_multipart(subs[e], std::back_inserter(frames), zmq::recv_flags::dontwait);
          } catch (const zmq::error_t&) {
            got.reset();
          }
          if (!got) {
            break;
          }
          try {
            parse_message(frames, e, live_decoder, next);
            queue.push(next);
          } catch (const std::bad_alloc&) {
            // No memory for the message: it is lost; the sequence gap will show it.
          }
        }
      }
    }
  }

  void apply_loop() {
    std::vector<QueuedMessage> taken;
    while (queue.take(taken)) {
      for (const QueuedMessage& item : taken) {
        try {
          sequencer.handle(item);
        } catch (const std::exception& e) {
          // Only an allocation failure gets here (bad input is handled inside): skip the
          // message rather than end the thread.
          sequencer.skipped(e);
        }
        queue.applied(item.batch.keys.size());
      }
    }
  }

  EventMirrorOptions options;
  std::shared_ptr<mirror::MediumTable> media = std::make_shared<mirror::MediumTable>();
  zmq::context_t context{1};
  mirror::Sequencer sequencer;   // the applying thread's, and the stats
  mirror::MessageQueue queue;    // the only state both threads use, with the stats
  mirror::Decoder live_decoder;  // the receiving thread's
  MirrorSink* sink;
  std::vector<zmq::socket_t> subs;  // the receiving thread's, once started
  std::thread receiver;
  std::thread worker;
};

EventMirror::EventMirror(MirrorSink& sink, EventMirrorOptions options) {
  if (options.endpoints.empty()) {
    throw InvalidArgument("EventMirror: no endpoint to subscribe to");
  }
  if (options.replay_endpoints.size() > options.endpoints.size()) {
    throw InvalidArgument("EventMirror: " + std::to_string(options.replay_endpoints.size()) +
                          " replay endpoints for " + std::to_string(options.endpoints.size()) +
                          " endpoints");
  }
  if (options.queue_capacity == 0) {
    throw InvalidArgument("EventMirror: queue_capacity must be at least 1");
  }
  if (options.queue_max_keys == 0) {
    throw InvalidArgument("EventMirror: queue_max_keys must be at least 1");
  }
  if (options.replay_timeout_ms <= 0) {
    throw InvalidArgument("EventMirror: replay_timeout_ms must be positive");
  }
  if (options.ns > kMaxNamespace) {
    throw InvalidArgument("EventMirror: namespace " + std::to_string(options.ns) +
                          " exceeds the 24-bit maximum");
  }
  impl_ = std::make_unique<Impl>(sink, std::move(options));
  Impl& m = *impl_;
  for (const std::string& endpoint : m.options.endpoints) {
    zmq::socket_t sub(m.context, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvhwm, 100000);
    try {
      sub.connect(endpoint);
    } catch (const zmq::error_t& e) {
      throw InvalidArgument("EventMirror: cannot connect to '" + endpoint + "': " + e.what());
    }
    sub.set(zmq::sockopt::subscribe, m.options.topic);
    m.subs.push_back(std::move(sub));
  }
  for (const std::string& replay : m.options.replay_endpoints) {
    if (replay.empty()) {
      continue;
    }
    zmq::socket_t probe(m.context, zmq::socket_type::dealer);
    probe.set(zmq::sockopt::linger, 0);
    try {
      probe.connect(replay);
    } catch (const zmq::error_t& e) {
      throw InvalidArgument("EventMirror: bad replay endpoint '" + replay + "': " + e.what());
    }
  }
  m.worker = std::thread([&m] { m.apply_loop(); });
  m.receiver = std::thread([&m] { m.receive_loop(); });
#if defined(__linux__)
  // Named for top -H, perf and the ingestion benchmark's per-thread CPU times.
  pthread_setname_np(m.worker.native_handle(), "prefixhit-apply");
  pthread_setname_np(m.receiver.native_handle(), "prefixhit-recv");
#endif
}

EventMirror::~EventMirror() {
  stop();
}

void EventMirror::stop() {
  if (!impl_) {
    return;
  }
  Impl& m = *impl_;
  m.queue.stop();
  if (m.receiver.joinable()) {
    m.receiver.join();
  }
  if (m.worker.joinable()) {
    m.worker.join();
  }
  m.subs.clear();
}

bool EventMirror::running() const noexcept {
  return impl_ && !impl_->queue.stopping();
}

EventMirrorStats EventMirror::stats() const {
  Impl& m = *impl_;
  EventMirrorStats out = m.sequencer.stats();
  out.queue_depth = m.queue.depth();
  out.index_keys = m.sink->size();
  return out;
}

bool EventMirror::wait_for_seq(std::uint64_t seq, double timeout_s) const {
  return impl_->sequencer.wait_for_seq(seq, timeout_s);
}

const EventMirrorOptions& EventMirror::options() const noexcept {
  return impl_->options;
}

}  // namespace prefixhit
