// EventApplier: decoded events -> holder counts -> the sink, one event at a time, in order.
// An event whose sink call throws is undone in the counts, so the counts and the index never
// disagree; a bad payload or event never reaches the counts at all.
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "host/mirror/decode.hpp"
#include "host/mirror/key_counts.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

struct EventApplier::Impl {
  Impl(MirrorSink& s, const EventMirrorOptions& o)
      : sink(s), options(o), decoder(o), counts(std::random_device{}()) {
    expected_ranks = static_cast<std::uint16_t>(o.ranks.empty() ? 1 : o.ranks.size());
    if (o.format == EventFormat::vllm) {
      expected_ranks = 1;
    }
  }

  bool present(std::size_t i) { return counts.at(i).ranks_present == expected_ranks; }

  void apply_stored(const mirror::DecodedEvent& ev) {
    const mirror::Holder holder{ev.rank, ev.medium};
    counts.reserve(ev.num_keys);
    touched.clear();
    changed.clear();
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      counts.prefetch(batch.keys[ev.first_key + k]);
    }
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      const EventKey& key = batch.keys[ev.first_key + k];
      const std::size_t i = counts.find_or_add(key);
      const bool was = present(i);
      counts.add(i, holder, +1);
      touched.push_back(i);
      if (!was && present(i)) {
        changed.push_back(key);
      }
    }
    try {
      if (!changed.empty()) {
        sink.insert(options.ns, span<const EventKey>(changed));
      }
    } catch (...) {
      for (auto it = touched.rbegin(); it != touched.rend(); ++it) {
        counts.add(*it, holder, -1);
        counts.drop_if_empty(*it);
      }
      throw;
    }
    present_keys += changed.size();
    ++stats.events_stored;
    stats.hashes_stored += ev.num_keys;
  }

  void apply_removed(const mirror::DecodedEvent& ev) {
    const mirror::Holder holder{ev.rank, ev.medium};
    touched.clear();
    changed.clear();
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      counts.prefetch(batch.keys[ev.first_key + k]);
    }
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      const EventKey& key = batch.keys[ev.first_key + k];
      const std::size_t i = counts.find(key);
      if (i == SIZE_MAX) {
        continue;  // never stored here (or stored before this mirror joined): nothing to undo
      }
      const bool was = present(i);
      if (!counts.add(i, holder, -1)) {
        continue;
      }
      touched.push_back(i);
      if (was && !present(i)) {
        changed.push_back(key);
      }
    }
    try {
      if (!changed.empty()) {
        sink.erase(options.ns, span<const EventKey>(changed));
      }
    } catch (...) {
      for (auto it = touched.rbegin(); it != touched.rend(); ++it) {
        counts.add(*it, holder, +1);
      }
      throw;
    }
    for (const std::size_t i : touched) {
      counts.drop_if_empty(i);
    }
    present_keys -= changed.size();
    ++stats.events_removed;
    stats.hashes_removed += ev.num_keys;
  }

  void clear_all() {
    std::vector<EventKey> keys;
    keys.reserve(present_keys);
    counts.for_each([&](std::size_t i, const mirror::KeyCounts::Entry&) {
      if (present(i)) {
        keys.push_back(mirror::KeyCounts::key_of(counts.at(i)));
      }
    });
    sink.erase(options.ns, span<const EventKey>(keys));
    counts.clear();
    present_keys = 0;
  }

  MirrorSink& sink;
  EventMirrorOptions options;
  mirror::Decoder decoder;
  mirror::KeyCounts counts;
  mirror::DecodedBatch batch;
  std::uint16_t expected_ranks = 1;
  std::uint64_t present_keys = 0;
  std::vector<std::size_t> touched;
  std::vector<EventKey> changed;
  EventMirrorStats stats;
};

EventApplier::EventApplier(MirrorSink& sink, const EventMirrorOptions& options)
    : impl_(std::make_unique<Impl>(sink, options)) {
  if (options.ranks.size() > 64) {
    throw InvalidArgument("EventMirror: " + std::to_string(options.ranks.size()) +
                          " rank namespaces (at most 64)");
  }
}

EventApplier::~EventApplier() = default;

void EventApplier::apply_payload(const std::uint8_t* data, std::size_t size) {
  Impl& m = *impl_;
  try {
    m.decoder.decode(data, size, m.batch);
  } catch (const std::exception& e) {
    ++m.stats.malformed_messages;
    m.stats.last_error = e.what();
    return;
  }
  m.stats.malformed_events += m.batch.malformed_events;
  m.stats.foreign_keys += m.batch.foreign_keys;
  if (!m.batch.last_error.empty()) {
    m.stats.last_error = m.batch.last_error;
  }
  for (const mirror::DecodedEvent& ev : m.batch.events) {
    try {
      switch (ev.type) {
        case mirror::EventType::stored:
          m.apply_stored(ev);
          break;
        case mirror::EventType::removed:
          m.apply_removed(ev);
          break;
        case mirror::EventType::cleared:
          m.clear_all();
          ++m.stats.events_cleared;
          break;
      }
    } catch (const std::exception& e) {
      ++m.stats.failed_events;
      m.stats.last_error = std::string("index refused an event: ") + e.what();
    }
  }
  ++m.stats.messages;
  if (m.batch.has_ts) {
    const double now_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    m.stats.lag_ms = now_ms - m.batch.ts_ms;
    m.stats.max_lag_ms = std::max(m.stats.max_lag_ms, m.stats.lag_ms);
  }
  m.stats.keys = m.present_keys;
}

void EventApplier::clear() {
  impl_->clear_all();
  impl_->stats.keys = 0;
}

const EventMirrorStats& EventApplier::stats() const noexcept {
  return impl_->stats;
}

EventMirrorStats& EventApplier::mutable_stats() noexcept {
  return impl_->stats;
}

}  // namespace prefixhit
