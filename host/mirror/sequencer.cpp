// The applying half of EventMirror (host/mirror/sequencer.hpp): sequence checks, gap recovery
// by replay or resync, and the applier's stats under the state mutex.
#include "host/mirror/sequencer.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "host/mirror/replay.hpp"

namespace prefixhit::mirror {

Sequencer::Sequencer(MirrorSink& sink, const EventMirrorOptions& options,
                     std::shared_ptr<MediumTable> media, zmq::context_t& context)
    : options_(options),
      context_(context),
      applier_(sink, options),
      replay_decoder_(options, std::move(media)),
      streams_(options.endpoints.size()) {}

void Sequencer::handle(const QueuedMessage& message) {
  if (!message.ok) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    applier_.malformed_message(message.error);
    return;
  }
  Stream& stream = streams_[message.endpoint];
  const std::uint64_t first = options_.format == EventFormat::vllm ? 0 : 1;
  const std::uint64_t expected = stream.has_seq ? stream.last_seq + 1 : first;
  if (stream.has_seq && message.seq < expected) {
    if (message.seq <= first) {
      // The publisher restarted and numbers from the start again: what we hold may be stale.
      std::lock_guard<std::mutex> lock(state_mutex_);
      resync_locked("publisher restarted (sequence went back to " + std::to_string(message.seq) +
                    ")");
    } else {
      std::lock_guard<std::mutex> lock(state_mutex_);
      ++applier_.stats().duplicates;
      return;
    }
  } else if (message.seq > expected) {
    recover_gap(message.endpoint, expected, message.seq);
    if (stream.has_seq && message.seq <= stream.last_seq) {
      std::lock_guard<std::mutex> lock(state_mutex_);
      ++applier_.stats().duplicates;  // the replay already covered it
      return;
    }
  }
  apply(message.endpoint, message.seq, message.decoded ? &message.batch : nullptr, message.error);
}

void Sequencer::skipped(const std::exception& e) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  ++applier_.stats().failed_events;
  applier_.stats().last_error = std::string("message skipped: ") + e.what();
}

void Sequencer::count_backpressure() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  ++applier_.stats().backpressure;
}

EventMirrorStats Sequencer::stats() {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return applier_.stats();
}

bool Sequencer::wait_for_seq(std::uint64_t seq, double timeout_s) {
  std::unique_lock<std::mutex> lock(state_mutex_);
  return applied_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    const EventMirrorStats& st = applier_.stats();
    return st.has_seq && st.last_seq >= seq;
  });
}

/// Applies a decoded message, or counts one whose payload did not decode (`batch` null,
/// `error` why); either way the stream has reached `seq`.
void Sequencer::apply(std::size_t endpoint, std::uint64_t seq, const DecodedBatch* batch,
                      const std::string& error) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (batch != nullptr) {
    applier_.apply(*batch);
  } else {
    applier_.malformed_message(error);
  }
  Stream& stream = streams_[endpoint];
  stream.has_seq = true;
  stream.last_seq = seq;
  EventMirrorStats& st = applier_.stats();
  st.has_seq = true;
  st.last_seq = std::max(st.last_seq, seq);
  applied_.notify_all();
}

void Sequencer::resync_locked(const std::string& why) {
  try {
    applier_.clear();
  } catch (const std::exception& e) {
    applier_.stats().last_error = std::string("clear failed: ") + e.what();
  }
  ++applier_.stats().resyncs;
  applier_.stats().last_error = "resync: " + why;
}

/// Messages [expected, seen) are missing on `endpoint`: ask its replay socket for them.
void Sequencer::recover_gap(std::size_t endpoint, std::uint64_t expected, std::uint64_t seen) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    ++applier_.stats().gaps;
  }
  const std::string& replay =
      endpoint < options_.replay_endpoints.size() ? options_.replay_endpoints[endpoint] : empty_;
  std::string why;
  if (replay.empty()) {
    why = "no replay endpoint";
  } else if (replay_from(endpoint, replay, expected, why)) {
    return;
  }
  std::lock_guard<std::mutex> lock(state_mutex_);
  applier_.stats().missed_messages += seen - expected;
  resync_locked("messages " + std::to_string(expected) + ".." + std::to_string(seen - 1) +
                " lost (" + why + ")");
}

/// Requests [start, ...] from the ROUTER at `endpoint_name` and applies what comes back, in
/// order. True when the replay started exactly at `start` (the gap is filled).
bool Sequencer::replay_from(std::size_t endpoint, const std::string& endpoint_name,
                            std::uint64_t start, std::string& why) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    ++applier_.stats().replays;
  }
  bool first = true;
  const ReplayOutcome outcome =
      request_replay(context_, endpoint_name, start, options_.replay_timeout_ms,
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
void Sequencer::apply_replayed(std::size_t endpoint, std::uint64_t start, bool first,
                               std::uint64_t seq, const zmq::message_t& payload) {
  Stream& stream = streams_[endpoint];
  if (first && seq > start) {
    const std::string why = "the publisher no longer holds message " + std::to_string(start) +
                            " (replay starts at " + std::to_string(seq) + ")";
    std::lock_guard<std::mutex> lock(state_mutex_);
    applier_.stats().missed_messages += seq - start;
    resync_locked(why);
  }
  if (stream.has_seq && seq <= stream.last_seq) {
    return;
  }
  bool decoded = true;
  std::string error;
  try {
    replay_decoder_.decode(static_cast<const std::uint8_t*>(payload.data()), payload.size(),
                           replay_batch_);
  } catch (const std::exception& e) {
    decoded = false;
    error = e.what();
  }
  apply(endpoint, seq, decoded ? &replay_batch_ : nullptr, error);
  std::lock_guard<std::mutex> lock(state_mutex_);
  ++applier_.stats().replayed_messages;
}

}  // namespace prefixhit::mirror
