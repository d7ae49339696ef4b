// The applying half of EventMirror, run by its applying thread: sequence checks per endpoint,
// gap recovery (replay through host/mirror/replay.cpp, else a resync), then the BatchApplier.
// Its state is the applying thread's alone except the applier's stats, which every thread reads
// under the state mutex (stats(), wait_for_seq(), count_backpressure()).
#pragma once

#include <zmq.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/mirror/batch_applier.hpp"
#include "host/mirror/decode.hpp"
#include "host/mirror/message_queue.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

class Sequencer {
 public:
  /// `options` and `context` are the mirror's and must outlive this; `media` is the table the
  /// receiving thread's decoder shares, so that replayed events name the same media.
  Sequencer(MirrorSink& sink, const EventMirrorOptions& options, std::shared_ptr<MediumTable> media,
            zmq::context_t& context);

  // The applying thread.

  /// Sequence checks for one live message, gap recovery, then apply. Bad input is counted,
  /// never thrown; only an allocation failure throws.
  void handle(const QueuedMessage& message);
  /// Counts a message that handle() failed on (skipped), with why.
  void skipped(const std::exception& e);

  // Any thread.

  /// The receiver found the queue full (called under the queue's lock).
  void count_backpressure();
  /// The applier's counters, a consistent snapshot.
  EventMirrorStats stats();
  /// Waits until a message with sequence >= seq has been applied; false on timeout.
  bool wait_for_seq(std::uint64_t seq, double timeout_s);

 private:
  struct Stream {
    bool has_seq = false;
    std::uint64_t last_seq = 0;
  };

  void apply(std::size_t endpoint, std::uint64_t seq, const DecodedBatch* batch,
             const std::string& error);
  void resync_locked(const std::string& why);
  void recover_gap(std::size_t endpoint, std::uint64_t expected, std::uint64_t seen);
  bool replay_from(std::size_t endpoint, const std::string& endpoint_name, std::uint64_t start,
                   std::string& why);
  void apply_replayed(std::size_t endpoint, std::uint64_t start, bool first, std::uint64_t seq,
                      const zmq::message_t& payload);

  const EventMirrorOptions& options_;
  zmq::context_t& context_;  // thread-safe; each replay opens its own socket on this thread
  BatchApplier applier_;
  Decoder replay_decoder_;  // for replayed messages (live ones are decoded by the receiver)
  DecodedBatch replay_batch_;
  std::vector<Stream> streams_;  // per endpoint
  const std::string empty_;

  std::mutex state_mutex_;  // the applier and its stats
  std::condition_variable applied_;
};

}  // namespace prefixhit::mirror
