// Builds without ZeroMQ or msgpack-cxx: the mirror's API exists and says why it cannot run.
#include <string>

#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace {
[[noreturn]] void unavailable() {
  throw Unavailable(
      "this prefixhit was built without the event mirror (ZeroMQ/cppzmq and msgpack-cxx were "
      "not found; apt-get install cppzmq-dev libzmq3-dev libmsgpack-cxx-dev and rebuild)");
}
}  // namespace

bool mirror_available() noexcept {
  return false;
}

struct EventApplier::Impl {};
EventApplier::EventApplier(MirrorSink& /*sink*/, const EventMirrorOptions& /*options*/) {
  unavailable();
}
EventApplier::~EventApplier() = default;
void EventApplier::apply_payload(const std::uint8_t* /*data*/, std::size_t /*size*/) {
  unavailable();
}
void EventApplier::clear() {
  unavailable();
}
const EventMirrorStats& EventApplier::stats() const noexcept {
  static const EventMirrorStats none;
  return none;
}
EventMirrorStats& EventApplier::mutable_stats() noexcept {
  static EventMirrorStats none;
  return none;
}

struct EventMirror::Impl {
  EventMirrorOptions options;
};
// NOLINTNEXTLINE(performance-unnecessary-value-param): the signature is the header's
EventMirror::EventMirror(MirrorSink& /*sink*/, EventMirrorOptions /*options*/) {
  unavailable();
}
EventMirror::~EventMirror() = default;
void EventMirror::stop() {}
bool EventMirror::running() const noexcept {
  return false;
}
EventMirrorStats EventMirror::stats() const {
  unavailable();
}
bool EventMirror::wait_for_seq(std::uint64_t /*seq*/, double /*timeout_s*/) const {
  unavailable();
}
const EventMirrorOptions& EventMirror::options() const noexcept {
  static const EventMirrorOptions none;
  return none;
}

}  // namespace prefixhit
