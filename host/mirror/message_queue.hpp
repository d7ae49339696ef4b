// The bounded queue of decoded messages between EventMirror's two threads: the receiving thread
// pushes (and waits for room: backpressure), the applying thread takes the whole queue at once
// and hands the room back as it applies. With the stats, it is the only state the two threads
// share: the queue, the spares and the counts are under one mutex, the queue's (the two flags
// are atomics read outside it). Applied items come back as spares, so that a steady stream
// allocates nothing per message.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "host/mirror/decode.hpp"

namespace prefixhit::mirror {

/// One received message, decoded on the receiving thread.
struct QueuedMessage {
  std::size_t endpoint = 0;
  bool ok = false;       // the frames are well formed (seq is valid)
  bool decoded = false;  // the payload decoded into batch
  std::uint64_t seq = 0;
  std::string error;  // when !ok or !decoded, why
  DecodedBatch batch;
};

class MessageQueue {
 public:
  /// Bounded to `capacity` messages and `max_keys` block hashes (EventMirrorOptions'
  /// queue_capacity and queue_max_keys). `on_full` is called, under the queue's lock, each time
  /// the receiver finds no room and is about to wait (the mirror counts it as backpressure).
  MessageQueue(std::size_t capacity, std::size_t max_keys, std::function<void()> on_full);

  // The receiving thread.

  /// Moves `message` into the queue (waiting for room: backpressure) and refills it with a
  /// spare. Returns without waiting further once stop() is called.
  void push(QueuedMessage& message);

  // The applying thread.

  /// Recycles the messages `taken` last time (now applied) as spares, then waits for messages
  /// and takes the whole queue into `taken`: one lock and one wake-up per drain rather than per
  /// message. False when stop() was called and the queue is empty.
  bool take(std::vector<QueuedMessage>& taken);
  /// One of the taken messages is applied (`keys` its block hashes). A receiver waiting for
  /// room gets it as the drain goes, an eighth of the bound at a time, rather than after the
  /// whole drain: else a full queue empties completely before it refills, and the two threads
  /// take turns instead of overlapping.
  void applied(std::size_t keys);

  // Any thread.

  /// Messages queued plus those taken but not yet applied.
  std::size_t depth() const;
  /// Wakes both threads for good: push() stops waiting, take() returns false once empty.
  void stop();
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }

 private:
  /// Messages queued plus those the applier has taken but not finished: the bounded amount
  /// (and the block hashes they hold).
  std::size_t pending_locked() const { return queue_.size() + applying_; }
  bool has_room_locked(std::size_t keys) const;

  const std::size_t capacity_;
  const std::size_t max_keys_;
  const std::function<void()> on_full_;

  mutable std::mutex mutex_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::vector<QueuedMessage> queue_;
  std::vector<QueuedMessage> spares_;  // applied items, reused by the receiver
  std::size_t spare_keys_ = 0;         // the spares' key capacity
  std::size_t applying_ = 0;           // messages taken from the queue, not yet applied
  std::size_t pending_keys_ = 0;       // block hashes in the queue and in the applier's hands
  std::size_t applying_keys_ = 0;      // of which in the applier's hands
  std::atomic<bool> receiver_waiting_{false};  // the receiver waits for room (not_full_)
  std::atomic<bool> stopping_{false};

  // The applying thread's own (no lock): applied since the last hand-back of room.
  std::size_t done_ = 0;
  std::size_t done_keys_ = 0;
};

}  // namespace prefixhit::mirror
