// The queue between EventMirror's threads (host/mirror/message_queue.hpp).
#include "host/mirror/message_queue.hpp"

#include <utility>

namespace prefixhit::mirror {

namespace {

/// Spare queue items kept for reuse (each keeps its decoded vectors' capacity), so that a
/// steady stream allocates nothing per message; at most this many, holding at most
/// queue_max_keys keys of capacity in all (a burst of huge messages is not kept around).
constexpr std::size_t kMaxSpareItems = 128;

}  // namespace

MessageQueue::MessageQueue(std::size_t capacity, std::size_t max_keys,
                           std::function<void()> on_full)
    : capacity_(capacity), max_keys_(max_keys), on_full_(std::move(on_full)) {}

bool MessageQueue::has_room_locked(std::size_t keys) const {
  const std::size_t pending = pending_locked();
  // A message larger than the whole key bound still goes through, alone.
  return pending == 0 || (pending < capacity_ && pending_keys_ + keys <= max_keys_);
}

void MessageQueue::push(QueuedMessage& message) {
  const std::size_t keys = message.batch.keys.size();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!has_room_locked(keys)) {
    on_full_();
    receiver_waiting_.store(true, std::memory_order_relaxed);
    not_full_.wait(lock, [&] { return has_room_locked(keys) || stopping(); });
    receiver_waiting_.store(false, std::memory_order_relaxed);
  }
  const bool was_empty = queue_.empty();
  queue_.push_back(std::move(message));
  pending_keys_ += keys;
  if (spares_.empty()) {
    message = QueuedMessage{};
  } else {
    message = std::move(spares_.back());
    spares_.pop_back();
    spare_keys_ -= message.batch.keys.capacity();
  }
  if (was_empty) {  // the applier only sleeps on an empty queue
    not_empty_.notify_one();
  }
}

bool MessageQueue::take(std::vector<QueuedMessage>& taken) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    applying_ = 0;
    pending_keys_ -= applying_keys_;
    applying_keys_ = 0;
    for (QueuedMessage& message : taken) {
      const std::size_t capacity = message.batch.keys.capacity();
      if (spares_.size() < kMaxSpareItems && spare_keys_ + capacity <= max_keys_) {
        spare_keys_ += capacity;
        spares_.push_back(std::move(message));
      }
    }
    not_full_.notify_one();
  }
  taken.clear();  // the items not kept: freed outside the lock
  std::unique_lock<std::mutex> lock(mutex_);
  not_empty_.wait(lock, [&] { return !queue_.empty() || stopping(); });
  if (queue_.empty()) {
    return false;
  }
  taken.swap(queue_);
  applying_ = taken.size();
  applying_keys_ = pending_keys_;
  done_ = 0;
  done_keys_ = 0;
  return true;
}

void MessageQueue::applied(std::size_t keys) {
  ++done_;
  done_keys_ += keys;
  if (receiver_waiting_.load(std::memory_order_relaxed) &&
      (done_ * 8 >= capacity_ || done_keys_ * 8 >= max_keys_)) {
    std::lock_guard<std::mutex> lock(mutex_);
    applying_ -= done_;
    applying_keys_ -= done_keys_;
    pending_keys_ -= done_keys_;
    done_ = 0;
    done_keys_ = 0;
    not_full_.notify_one();
  }
}

std::size_t MessageQueue::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_locked();
}

void MessageQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  not_empty_.notify_all();
  not_full_.notify_all();
}

}  // namespace prefixhit::mirror
