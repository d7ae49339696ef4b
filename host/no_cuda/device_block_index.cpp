// DeviceBlockIndex in builds without CUDA: the API links everywhere and every call that would
// need a GPU throws Unavailable.
#include <string>

#include "prefixhit/device_block_index.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

struct DeviceBlockIndex::Impl {
  DeviceBlockIndexOptions options;
};

namespace {
[[noreturn]] void no_cuda(const char* call) {
  throw Unavailable(std::string("DeviceBlockIndex::") + call +
                    ": prefixhit was built without CUDA");
}
}  // namespace

DeviceBlockIndex::DeviceBlockIndex(const DeviceBlockIndexOptions& /*options*/,
                                   cudaStream_t /*stream*/) {
  no_cuda("DeviceBlockIndex");
}
DeviceBlockIndex::~DeviceBlockIndex() = default;
DeviceBlockIndex::DeviceBlockIndex(DeviceBlockIndex&&) noexcept = default;
DeviceBlockIndex& DeviceBlockIndex::operator=(DeviceBlockIndex&&) noexcept = default;

std::size_t DeviceBlockIndex::insert(Namespace, int, const BlockDigest*, std::size_t, cudaStream_t,
                                     std::size_t) {
  no_cuda("insert");
}
void DeviceBlockIndex::insert_async(Namespace, int, const BlockDigest*, std::size_t, cudaStream_t,
                                    std::size_t) {
  no_cuda("insert_async");
}
std::size_t DeviceBlockIndex::insert(Namespace, const std::int32_t*, const BlockDigest*,
                                     std::size_t, cudaStream_t, std::size_t) {
  no_cuda("insert");
}
std::size_t DeviceBlockIndex::erase(Namespace, int, const BlockDigest*, std::size_t, cudaStream_t,
                                    std::size_t) {
  no_cuda("erase");
}
void DeviceBlockIndex::erase_async(Namespace, int, const BlockDigest*, std::size_t, cudaStream_t,
                                   std::size_t) {
  no_cuda("erase_async");
}
std::size_t DeviceBlockIndex::erase(Namespace, const std::int32_t*, const BlockDigest*, std::size_t,
                                    cudaStream_t, std::size_t) {
  no_cuda("erase");
}
void DeviceBlockIndex::contains(Namespace, int, const BlockDigest*, std::size_t, std::uint8_t*,
                                cudaStream_t, std::size_t) const {
  no_cuda("contains");
}
void DeviceBlockIndex::contains_async(Namespace, int, const BlockDigest*, std::size_t,
                                      std::uint8_t*, cudaStream_t, std::size_t) const {
  no_cuda("contains_async");
}
void DeviceBlockIndex::contains(Namespace, const std::int32_t*, const BlockDigest*, std::size_t,
                                std::uint8_t*, cudaStream_t, std::size_t) const {
  no_cuda("contains");
}
void DeviceBlockIndex::contains_async(Namespace, const std::int32_t*, const BlockDigest*,
                                      std::size_t, std::uint8_t*, cudaStream_t, std::size_t) const {
  no_cuda("contains_async");
}
std::size_t DeviceBlockIndex::size(cudaStream_t) const {
  no_cuda("size");
}
DeviceBlockIndexStats DeviceBlockIndex::stats(cudaStream_t) const {
  no_cuda("stats");
}
std::size_t DeviceBlockIndex::capacity() const noexcept {
  return 0;
}
void DeviceBlockIndex::clear(cudaStream_t) {
  no_cuda("clear");
}
DeviceBlockIndexRef DeviceBlockIndex::ref() const noexcept {
  return DeviceBlockIndexRef{};
}
const DeviceBlockIndexOptions& DeviceBlockIndex::options() const noexcept {
  static const DeviceBlockIndexOptions kNone{};
  return impl_ ? impl_->options : kNone;
}
std::uint64_t DeviceBlockIndex::hash_seed() const noexcept {
  return 0;
}

}  // namespace prefixhit
