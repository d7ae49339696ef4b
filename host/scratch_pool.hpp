// Working buffers that outlive the thread that used them (issue 14).
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace prefixhit::detail {

/// A process-wide stack of T's (working buffers). A batch's workers are pool threads that come
/// and go (worker_pool.hpp; before the pool, a new thread on every call): thread_local buffers
/// would be allocated, grown and page-faulted in again for each new thread (and freed at its
/// exit), which cost a 2-thread batch more than its second core saved when threads were new. Taking
/// a buffer here is one uncontended lock; nested calls (a store callback that looks up again) just
/// take another buffer.
template <class T>
class ScratchPool {
 public:
  /// A buffer taken from the pool, returned to it on destruction.
  class Lease {
   public:
    explicit Lease(ScratchPool& pool) : pool_(pool), item_(pool.take()) {}
    ~Lease() { pool_.give(std::move(item_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    T& operator*() const { return *item_; }
    T* operator->() const { return item_.get(); }

   private:
    ScratchPool& pool_;
    std::unique_ptr<T> item_;
  };

  Lease lease() { return Lease(*this); }

 private:
  std::unique_ptr<T> take() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        std::unique_ptr<T> item = std::move(free_.back());
        free_.pop_back();
        return item;
      }
    }
    return std::make_unique<T>();
  }
  void give(std::unique_ptr<T> item) noexcept {
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(std::move(item));
    } catch (...) {
      // No room to keep it: the buffer is simply freed.
    }
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<T>> free_;
};

}  // namespace prefixhit::detail
