// The applying half of a mirror: decoded batches -> holder counts -> the sink, in order.
// EventApplier is a Decoder followed by one of these; EventMirror decodes on its receiving
// thread and applies on its applying thread, so that the two overlap.
#pragma once

#include <memory>
#include <string>

#include "host/mirror/decode.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit::mirror {

class BatchApplier {
 public:
  BatchApplier(MirrorSink& sink, const EventMirrorOptions& options);
  ~BatchApplier();
  BatchApplier(const BatchApplier&) = delete;
  BatchApplier& operator=(const BatchApplier&) = delete;

  /// Applies one decoded message: every event in order, bad events counted (never throws for
  /// bad input; a sink refusal is counted and the event skipped).
  void apply(const DecodedBatch& batch);
  /// Counts a message whose payload could not be decoded (skipped whole).
  void malformed_message(const std::string& why);
  /// Erases every key this mirror put in the index.
  void clear();
  EventMirrorStats& stats() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prefixhit::mirror
