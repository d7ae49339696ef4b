// The replay request of host/mirror/replay.hpp.
#include "host/mirror/replay.hpp"

#include <zmq_addon.hpp>

#include <array>
#include <chrono>
#include <iterator>
#include <vector>

#include "host/mirror/wire.hpp"

namespace prefixhit::mirror {

ReplayOutcome request_replay(
    zmq::context_t& context, const std::string& endpoint, std::uint64_t start, int timeout_ms,
    const std::function<void(std::uint64_t seq, const zmq::message_t& payload)>& on_message) {
  ReplayOutcome out;
  try {
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(endpoint);
    std::uint8_t start_bytes[8];
    write_be64(start, start_bytes);
    std::array<zmq::const_buffer, 2> request = {zmq::const_buffer(nullptr, 0),
                                                zmq::buffer(start_bytes, 8)};
    zmq::send_multipart(dealer, request);
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
      if ((item.revents & ZMQ_POLLIN) == 0) {
        out.why = "replay timed out";
        return out;
      }
      frames.clear();
      if (!zmq::recv_multipart(dealer, std::back_inserter(frames))) {
        out.why = "replay receive failed";
        return out;
      }
      if (frames.size() < 3 || frames.size() > 4 || !frames[0].empty() ||
          frames[frames.size() - 2].size() != 8) {
        out.why = "malformed replay frames";
        return out;
      }
      const std::uint64_t seq = read_be64(frames[frames.size() - 2].data());
      if (seq == kEndOfReplay) {
        out.completed = true;
        return out;
      }
      ++out.messages;
      on_message(seq, frames.back());
    }
  } catch (const zmq::error_t& e) {
    out.why = std::string("replay failed: ") + e.what();
    return out;
  }
}

}  // namespace prefixhit::mirror
