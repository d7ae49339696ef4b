// DeviceBlockIndexSink in builds without CUDA: it links everywhere and its constructor throws
// Unavailable (a DeviceBlockIndex cannot exist here either).
#include <mutex>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

struct DeviceBlockIndexSink::Impl {
  std::mutex mutex;
};

DeviceBlockIndexSink::DeviceBlockIndexSink(DeviceBlockIndex& /*index*/, CUstream_st* /*stream*/) {
  throw Unavailable(
      "DeviceBlockIndexSink: prefixhit was built without CUDA (use BlockIndexSink, the CPU "
      "index)");
}
DeviceBlockIndexSink::~DeviceBlockIndexSink() = default;
void DeviceBlockIndexSink::insert(Namespace, span<const EventKey>) {
  throw Unavailable("DeviceBlockIndexSink: prefixhit was built without CUDA");
}
void DeviceBlockIndexSink::erase(Namespace, span<const EventKey>) {
  throw Unavailable("DeviceBlockIndexSink: prefixhit was built without CUDA");
}
std::size_t DeviceBlockIndexSink::size() const {
  return 0;
}
bool DeviceBlockIndexSink::may_refuse() const {
  return true;
}
std::unique_lock<std::mutex> DeviceBlockIndexSink::lock() const {
  return std::unique_lock<std::mutex>(impl_->mutex);
}

}  // namespace prefixhit
