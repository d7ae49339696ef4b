// A real KV-event publisher for the mirror tests: a ZeroMQ PUB socket and a ROUTER replay
// socket on free loopback ports, with vLLM's framing, and msgpack payload builders.
#pragma once

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace prefixhit::testing {

inline std::array<std::uint8_t, 8> be64(std::uint64_t v) {
  std::array<std::uint8_t, 8> b{};
  for (int i = 7; i >= 0; --i) {
    b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v & 0xFFU);
    v >>= 8;
  }
  return b;
}

/// PUB + ROUTER replay, as vLLM's ZmqEventPublisher serves them.
class TestPublisher {
 public:
  /// `keep`: how many recent messages the replay buffer holds. `topic_frame`: whether replayed
  /// messages carry a topic frame (older publishers send none).
  explicit TestPublisher(std::size_t keep = 100000, bool topic_frame = true)
      : keep_(keep),
        topic_frame_(topic_frame),
        pub_(ctx_, zmq::socket_type::pub),
        router_(ctx_, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    pub_.set(zmq::sockopt::sndhwm, 0);
    router_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    replay_endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    server_ = std::thread([this] { serve(); });
  }
  ~TestPublisher() {
    stop_ = true;
    server_.join();
  }
  TestPublisher(const TestPublisher&) = delete;
  TestPublisher& operator=(const TestPublisher&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  /// Publishes `payload` as the next sequence number; with `drop`, only the replay buffer gets
  /// it (a message lost on the way). Returns its sequence number.
  std::uint64_t publish(const std::string& payload, bool drop = false) {
    std::uint64_t seq = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seq = next_seq_++;
      history_[seq] = payload;
      while (history_.size() > keep_) {
        history_.erase(history_.begin());
      }
    }
    if (!drop) {
      send_raw({"kv", std::string(reinterpret_cast<const char*>(be64(seq).data()), 8), payload});
    }
    return seq;
  }
  /// Any frames, for malformed-message tests.
  void send_raw(const std::vector<std::string>& frames) {
    std::vector<zmq::const_buffer> bufs;
    for (const auto& f : frames) {
      bufs.emplace_back(f.data(), f.size());
    }
    zmq::send_multipart(pub_, bufs);
  }
  void set_next_seq(std::uint64_t seq) {
    std::lock_guard<std::mutex> lock(mutex_);
    next_seq_ = seq;
  }

 private:
  void serve() {
    while (!stop_) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLIN) == 0) {
        continue;
      }
      std::vector<zmq::message_t> req;
      (void)zmq::recv_multipart(router_, std::back_inserter(req));
      if (req.size() != 3 || req[2].size() != 8) {
        continue;
      }
      std::uint64_t start = 0;
      for (std::size_t i = 0; i < 8; ++i) {
        start = (start << 8) | static_cast<const std::uint8_t*>(req[2].data())[i];
      }
      const std::string id(static_cast<const char*>(req[0].data()), req[0].size());
      std::map<std::uint64_t, std::string> snapshot;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        snapshot.insert(history_.lower_bound(start), history_.end());
      }
      for (const auto& [seq, payload] : snapshot) {
        reply(id, seq, payload);
      }
      reply(id, ~std::uint64_t{0}, "");
    }
  }
  void reply(const std::string& id, std::uint64_t seq, const std::string& payload) {
    const auto s = be64(seq);
    std::vector<zmq::const_buffer> frames{zmq::buffer(id), zmq::const_buffer(nullptr, 0)};
    if (topic_frame_) {
      frames.push_back(zmq::str_buffer("kv"));
    }
    frames.emplace_back(s.data(), 8);
    frames.emplace_back(payload.data(), payload.size());
    zmq::send_multipart(router_, frames);
  }

  std::size_t keep_;
  bool topic_frame_;
  zmq::context_t ctx_{1};
  zmq::socket_t pub_;
  zmq::socket_t router_;
  std::string endpoint_;
  std::string replay_endpoint_;
  std::mutex mutex_;
  std::map<std::uint64_t, std::string> history_;
  std::uint64_t next_seq_ = 0;
  std::atomic<bool> stop_{false};
  std::thread server_;
};

/// A vLLM event for the payload builders: hashes as ints (width 8) or 32-byte strings.
struct VllmEvent {
  enum Kind { stored, removed, cleared } kind = stored;
  std::vector<std::uint64_t> int_hashes;
  std::vector<std::string> byte_hashes;  // used when non-empty
  std::string medium = "GPU";
  int group = 0;
};

/// [ts, [events...], dp_rank] with events as tagged maps (`positional` = false) or as the older
/// positional arrays.
inline std::string vllm_payload(const std::vector<VllmEvent>& events, bool positional,
                                double ts = 0) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(3);
  pk.pack_double(
      ts != 0 ? ts
              : std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count());
  pk.pack_array(static_cast<std::uint32_t>(events.size()));
  for (const VllmEvent& e : events) {
    auto pack_hashes = [&] {
      if (!e.byte_hashes.empty()) {
        pk.pack_array(static_cast<std::uint32_t>(e.byte_hashes.size()));
        for (const auto& h : e.byte_hashes) {
          pk.pack_bin(static_cast<std::uint32_t>(h.size()));
          pk.pack_bin_body(h.data(), static_cast<std::uint32_t>(h.size()));
        }
      } else {
        pk.pack(e.int_hashes);
      }
    };
    if (e.kind == VllmEvent::cleared) {
      if (positional) {
        pk.pack_array(1);
        pk.pack(std::string("AllBlocksCleared"));
      } else {
        pk.pack_map(1);
        pk.pack(std::string("type"));
        pk.pack(std::string("AllBlocksCleared"));
      }
      continue;
    }
    const bool st = e.kind == VllmEvent::stored;
    if (positional) {
      // [tag, block_hashes, parent, token_ids, block_size, lora_id, medium, lora_name,
      //  extra_keys, group_idx] / [tag, block_hashes, medium, group_idx]
      pk.pack_array(st ? 10 : 4);
      pk.pack(std::string(st ? "BlockStored" : "BlockRemoved"));
      pack_hashes();
      if (st) {
        pk.pack_nil();
        pk.pack(std::vector<int>{1, 2, 3, 4});
        pk.pack(16);
        pk.pack_nil();
      }
      pk.pack(e.medium);
      if (st) {
        pk.pack_nil();
        pk.pack_nil();
      }
      pk.pack(e.group);
    } else {
      pk.pack_map(st ? 7 : 4);
      pk.pack(std::string("type"));
      pk.pack(std::string(st ? "BlockStored" : "BlockRemoved"));
      pk.pack(std::string("block_hashes"));
      pack_hashes();
      if (st) {
        pk.pack(std::string("parent_block_hash"));
        pk.pack_nil();
        pk.pack(std::string("token_ids"));
        pk.pack(std::vector<int>{1, 2, 3, 4});
        pk.pack(std::string("block_size"));
        pk.pack(16);
      }
      pk.pack(std::string("medium"));
      pk.pack(e.medium);
      pk.pack(std::string("group_idx"));
      pk.pack(e.group);
    }
  }
  pk.pack(0);
  return std::string(buf.data(), buf.size());
}

}  // namespace prefixhit::testing
