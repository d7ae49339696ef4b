// A publisher's replay socket (a ZeroMQ ROUTER), from the asking side: request the messages
// from a sequence number on and read them until the end marker. What the mirror does with each
// message (sequence checks, decoding, applying, resyncs) stays in the mirror.
#pragma once

#include <zmq.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace prefixhit::mirror {

struct ReplayOutcome {
  bool completed = false;    ///< the end marker came
  std::size_t messages = 0;  ///< messages handed to the callback
  std::string why;           ///< when not completed: why the replay stopped
};

/// Sends [b"", start as 8-byte big-endian] to the ROUTER at `endpoint` from a fresh DEALER
/// socket (so a late reply to an abandoned request is never mixed into this one), then calls
/// `on_message(seq, payload)` for each reply [b"", topic, seq, payload] or [b"", seq, payload],
/// in order, until a seq of all 0xFF bytes. Stops early, with `why`, when no reply comes within
/// `timeout_ms`, a reply is malformed, or the socket fails. Exceptions from `on_message` go on.
ReplayOutcome request_replay(
    zmq::context_t& context, const std::string& endpoint, std::uint64_t start, int timeout_ms,
    const std::function<void(std::uint64_t seq, const zmq::message_t& payload)>& on_message);

}  // namespace prefixhit::mirror
