// EventMirror: a receiving thread (SUB sockets -> msgpack decoding -> bounded queue of decoded
// messages) and an applying thread (queue -> sequence checks, replay on gaps -> BatchApplier),
// so that decoding one message overlaps applying the previous ones. ZeroMQ sockets stay on the
// thread that uses them; the only shared state is the queue and the stats, each under a mutex,
// and the medium names (MediumTable, its own lock). The replay request itself is
// host/mirror/replay.cpp.
#include <zmq.hpp>
#include <zmq_addon.hpp>

#if defined(__linux__)
#include <pthread.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "host/mirror/batch_applier.hpp"
#include "host/mirror/decode.hpp"
#include "host/mirror/replay.hpp"
#include "host/mirror/wire.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace {

using mirror::read_be64;

/// Spare queue items kept for reuse (each keeps its decoded vectors' capacity), so that a
/// steady stream allocates nothing per message; at most this many, holding at most
/// queue_max_keys keys of capacity in all (a burst of huge messages is not kept around).
constexpr std::size_t kMaxSpareItems = 128;

/// One received message, decoded on the receiving thread.
struct Item {
  std::size_t endpoint = 0;
  bool ok = false;       // the frames are well formed (seq is valid)
  bool decoded = false;  // the payload decoded into batch
  std::uint64_t seq = 0;
  std::string error;  // when !ok or !decoded, why
  mirror::DecodedBatch batch;
};

/// [topic, seq, payload] or, from older publishers, [seq, payload]: fills `item` (reused) and
/// decodes the payload frame where ZeroMQ received it.
void parse_message(std::vector<zmq::message_t>& frames, std::size_t endpoint,
                   mirror::Decoder& decoder, Item& item) {
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
        applier(s, options),
        media(std::make_shared<mirror::MediumTable>()),
        live_decoder(options, media),
        replay_decoder(options, media),
        sink(&s) {}

  struct Stream {
    bool has_seq = false;
    std::uint64_t last_seq = 0;
  };

  void receive_loop() {
    std::vector<zmq::pollitem_t> items;
    for (auto& s : subs) {
      items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
    }
    std::vector<zmq::message_t> frames;
    Item next;
    while (!stopping.load(std::memory_order_acquire)) {
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
            push(next);
          } catch (const std::bad_alloc&) {
            // No memory for the message: it is lost; the sequence gap will show it.
          }
        }
      }
    }
  }

  /// Messages queued plus those the applier has taken but not finished: the bounded amount
  /// (and the block hashes they hold).
  std::size_t pending_locked() const { return queue.size() + applying; }
  bool has_room_locked(std::size_t keys) const {
    const std::size_t pending = pending_locked();
    // A message larger than the whole key bound still goes through, alone.
    return pending == 0 ||
           (pending < options.queue_capacity && pending_keys + keys <= options.queue_max_keys);
  }

  /// Moves `item` into the queue (waiting for room: backpressure) and refills it with a spare.
  void push(Item& item) {
    const std::size_t keys = item.batch.keys.size();
    std::unique_lock<std::mutex> lock(queue_mutex);
    if (!has_room_locked(keys)) {
      {
        std::lock_guard<std::mutex> s(state_mutex);
        ++applier.stats().backpressure;
      }
      receiver_waiting.store(true, std::memory_order_relaxed);
      not_full.wait(
          lock, [&] { return has_room_locked(keys) || stopping.load(std::memory_order_acquire); });
      receiver_waiting.store(false, std::memory_order_relaxed);
    }
    const bool was_empty = queue.empty();
    queue.push_back(std::move(item));
    pending_keys += keys;
    if (spares.empty()) {
      item = Item{};
    } else {
      item = std::move(spares.back());
      spares.pop_back();
      spare_keys -= item.batch.keys.capacity();
    }
    if (was_empty) {  // the applier only sleeps on an empty queue
      not_empty.notify_one();
    }
  }

  void apply_loop() {
    std::vector<Item> taken;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        applying = 0;
        pending_keys -= applying_keys;
        applying_keys = 0;
        for (Item& item : taken) {
          const std::size_t capacity = item.batch.keys.capacity();
          if (spares.size() < kMaxSpareItems && spare_keys + capacity <= options.queue_max_keys) {
            spare_keys += capacity;
            spares.push_back(std::move(item));
          }
        }
        not_full.notify_one();
      }
      taken.clear();  // the items not kept: freed outside the lock
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        not_empty.wait(lock,
                       [&] { return !queue.empty() || stopping.load(std::memory_order_acquire); });
        if (queue.empty()) {
          return;
        }
        // Take the whole queue: one lock and one wake-up per drain rather than per message.
        taken.swap(queue);
        applying = taken.size();
        applying_keys = pending_keys;
      }
      std::size_t done = 0;  // applied, still counted in the bound
      std::size_t done_keys = 0;
      for (const Item& item : taken) {
        try {
          handle(item);
        } catch (const std::exception& e) {
          // Only an allocation failure gets here (bad input is handled inside): skip the
          // message rather than end the thread.
          std::lock_guard<std::mutex> lock(state_mutex);
          ++applier.stats().failed_events;
          applier.stats().last_error = std::string("message skipped: ") + e.what();
        }
        ++done;
        done_keys += item.batch.keys.size();
        // A receiver waiting for room gets it as the drain goes, an eighth of the bound at a
        // time, rather than after the whole drain: else a full queue empties completely before
        // it refills, and the two threads take turns instead of overlapping.
        if (receiver_waiting.load(std::memory_order_relaxed) &&
            (done * 8 >= options.queue_capacity || done_keys * 8 >= options.queue_max_keys)) {
          std::lock_guard<std::mutex> lock(queue_mutex);
          applying -= done;
          applying_keys -= done_keys;
          pending_keys -= done_keys;
          done = 0;
          done_keys = 0;
          not_full.notify_one();
        }
      }
    }
  }

  /// Sequence checks for one live message, then apply.
  void handle(const Item& item) {
    if (!item.ok) {
      std::lock_guard<std::mutex> lock(state_mutex);
      applier.malformed_message(item.error);
      return;
    }
    Stream& stream = streams[item.endpoint];
    const std::uint64_t first = options.format == EventFormat::vllm ? 0 : 1;
    const std::uint64_t expected = stream.has_seq ? stream.last_seq + 1 : first;
    if (stream.has_seq && item.seq < expected) {
      if (item.seq <= first) {
        // The publisher restarted and numbers from the start again: what we hold may be stale.
        std::lock_guard<std::mutex> lock(state_mutex);
        resync_locked("publisher restarted (sequence went back to " + std::to_string(item.seq) +
                      ")");
      } else {
        std::lock_guard<std::mutex> lock(state_mutex);
        ++applier.stats().duplicates;
        return;
      }
    } else if (item.seq > expected) {
      recover_gap(item.endpoint, expected, item.seq);
      if (stream.has_seq && item.seq <= stream.last_seq) {
        std::lock_guard<std::mutex> lock(state_mutex);
        ++applier.stats().duplicates;  // the replay already covered it
        return;
      }
    }
    apply(item.endpoint, item.seq, item.decoded ? &item.batch : nullptr, item.error);
  }

  /// Applies a decoded message, or counts one whose payload did not decode (`batch` null,
  /// `error` why); either way the stream has reached `seq`.
  void apply(std::size_t endpoint, std::uint64_t seq, const mirror::DecodedBatch* batch,
             const std::string& error) {
    std::lock_guard<std::mutex> lock(state_mutex);
    if (batch != nullptr) {
      applier.apply(*batch);
    } else {
      applier.malformed_message(error);
    }
    Stream& stream = streams[endpoint];
    stream.has_seq = true;
    stream.last_seq = seq;
    EventMirrorStats& st = applier.stats();
    st.has_seq = true;
    st.last_seq = std::max(st.last_seq, seq);
    applied.notify_all();
  }

  void resync_locked(const std::string& why) {
    try {
      applier.clear();
    } catch (const std::exception& e) {
      applier.stats().last_error = std::string("clear failed: ") + e.what();
    }
    ++applier.stats().resyncs;
    applier.stats().last_error = "resync: " + why;
  }

  /// Messages [expected, seen) are missing on `endpoint`: ask its replay socket for them.
  void recover_gap(std::size_t endpoint, std::uint64_t expected, std::uint64_t seen) {
    {
      std::lock_guard<std::mutex> lock(state_mutex);
      ++applier.stats().gaps;
    }
    const std::string& replay =
        endpoint < options.replay_endpoints.size() ? options.replay_endpoints[endpoint] : empty;
    std::string why;
    if (replay.empty()) {
      why = "no replay endpoint";
    } else if (replay_from(endpoint, replay, expected, why)) {
      return;
    }
    std::lock_guard<std::mutex> lock(state_mutex);
    applier.stats().missed_messages += seen - expected;
    resync_locked("messages " + std::to_string(expected) + ".." + std::to_string(seen - 1) +
                  " lost (" + why + ")");
  }

  /// Requests [start, ...] from the ROUTER at `endpoint_name` and applies what comes back, in
  /// order. True when the replay started exactly at `start` (the gap is filled).
  bool replay_from(std::size_t endpoint, const std::string& endpoint_name, std::uint64_t start,
                   std::string& why) {
    {
      std::lock_guard<std::mutex> lock(state_mutex);
      ++applier.stats().replays;
    }
    bool first = true;
    const mirror::ReplayOutcome outcome =
        mirror::request_replay(context, endpoint_name, start, options.replay_timeout_ms,
                               [&](std::uint64_t seq, const zmq::message_t& payload) {
                                 apply_replayed(endpoint, start, first, seq, payload);
                                 first = false;
                               });
    if (!outcome.completed) {
      why = outcome.why;
      return false;
    }
    if (outcome.messages == 0) {
      why = "the publisher holds nothing to replay";
      return false;
    }
    // A partial replay already resynced; report it filled so the caller does not clear again.
    return true;
  }

  /// One replayed message of a replay asked from `start`. The first one says whether the
  /// publisher still holds `start`: if it begins later, what lies between is lost, so resync
  /// before applying.
  void apply_replayed(std::size_t endpoint, std::uint64_t start, bool first, std::uint64_t seq,
                      const zmq::message_t& payload) {
    Stream& stream = streams[endpoint];
    if (first && seq > start) {
      const std::string why = "the publisher no longer holds message " + std::to_string(start) +
                              " (replay starts at " + std::to_string(seq) + ")";
      std::lock_guard<std::mutex> lock(state_mutex);
      applier.stats().missed_messages += seq - start;
      resync_locked(why);
    }
    if (stream.has_seq && seq <= stream.last_seq) {
      return;
    }
    bool decoded = true;
    std::string error;
    try {
      replay_decoder.decode(static_cast<const std::uint8_t*>(payload.data()), payload.size(),
                            replay_batch);
    } catch (const std::exception& e) {
      decoded = false;
      error = e.what();
    }
    apply(endpoint, seq, decoded ? &replay_batch : nullptr, error);
    std::lock_guard<std::mutex> lock(state_mutex);
    ++applier.stats().replayed_messages;
  }

  EventMirrorOptions options;
  mirror::BatchApplier applier;
  std::shared_ptr<mirror::MediumTable> media;
  mirror::Decoder live_decoder;    // the receiving thread's
  mirror::Decoder replay_decoder;  // the applying thread's, for replayed messages
  mirror::DecodedBatch replay_batch;
  MirrorSink* sink;
  zmq::context_t context{1};
  std::vector<zmq::socket_t> subs;
  std::vector<Stream> streams;
  const std::string empty;

  std::mutex queue_mutex;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::vector<Item> queue;
  std::vector<Item> spares;       // applied items, reused by the receiver
  std::size_t spare_keys = 0;     // the spares' key capacity
  std::size_t applying = 0;       // messages taken from the queue, not yet applied
  std::size_t pending_keys = 0;   // block hashes in the queue and in the applier's hands
  std::size_t applying_keys = 0;  // of which in the applier's hands
  std::atomic<bool> receiver_waiting{false};  // the receiver waits for room (not_full)

  mutable std::mutex state_mutex;  // the applier and its stats
  mutable std::condition_variable applied;

  std::atomic<bool> stopping{false};
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
  m.streams.resize(m.options.endpoints.size());
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
  {
    std::lock_guard<std::mutex> lock(m.queue_mutex);
    m.stopping.store(true, std::memory_order_release);
  }
  m.not_empty.notify_all();
  m.not_full.notify_all();
  if (m.receiver.joinable()) {
    m.receiver.join();
  }
  if (m.worker.joinable()) {
    m.worker.join();
  }
  m.subs.clear();
}

bool EventMirror::running() const noexcept {
  return impl_ && !impl_->stopping.load(std::memory_order_acquire);
}

EventMirrorStats EventMirror::stats() const {
  Impl& m = *impl_;
  EventMirrorStats out;
  {
    std::lock_guard<std::mutex> lock(m.state_mutex);
    out = m.applier.stats();
  }
  {
    std::lock_guard<std::mutex> lock(m.queue_mutex);
    out.queue_depth = m.pending_locked();
  }
  out.index_keys = m.sink->size();
  return out;
}

bool EventMirror::wait_for_seq(std::uint64_t seq, double timeout_s) const {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.state_mutex);
  return m.applied.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    const EventMirrorStats& st = m.applier.stats();
    return st.has_seq && st.last_seq >= seq;
  });
}

const EventMirrorOptions& EventMirror::options() const noexcept {
  return impl_->options;
}

}  // namespace prefixhit
