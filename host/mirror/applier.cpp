// BatchApplier: decoded events -> holder counts -> the sink, in order; EventApplier is a
// Decoder in front of one. A message's run of stored/removed events (up to a clear) reaches the
// sink as one erase and one insert of the keys whose presence differs before and after the run
// (erase first); if the sink refuses that, the run is undone and replayed event by event, which
// is also how a sink that may refuse for capacity is always fed (so that exactly the refused
// events are skipped). An event whose sink call throws is undone in the counts, so the counts
// and the index never disagree; a bad payload or event never reaches the counts at all.
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "host/mirror/batch_applier.hpp"
#include "host/mirror/decode.hpp"
#include "host/mirror/key_counts.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/event_mirror.hpp"

namespace prefixhit {

namespace mirror {

struct BatchApplier::Impl {
  Impl(MirrorSink& s, const EventMirrorOptions& o)
      : sink(s), options(o), counts(std::random_device{}()) {
    expected_ranks = static_cast<std::uint16_t>(o.ranks.empty() ? 1 : o.ranks.size());
    if (o.format == EventFormat::vllm) {
      expected_ranks = 1;
    }
  }

  bool present(std::size_t i) { return counts.at(i).ranks_present == expected_ranks; }

  void apply_stored(const mirror::DecodedEvent& ev) {
    const EventKey* const keys = batch->keys.data();  // a local: never reloaded
    const mirror::Holder holder{ev.rank, ev.medium};
    counts.reserve(ev.num_keys);
    touched.clear();
    changed.clear();
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      counts.prefetch(keys[ev.first_key + k]);
    }
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      const EventKey& key = keys[ev.first_key + k];
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
      }
      counts.drop_empty(touched);
      throw;
    }
    present_keys += changed.size();
    ++stats.events_stored;
    stats.hashes_stored += ev.num_keys;
  }

  void apply_removed(const mirror::DecodedEvent& ev) {
    const EventKey* const keys = batch->keys.data();  // a local: never reloaded
    const mirror::Holder holder{ev.rank, ev.medium};
    touched.clear();
    changed.clear();
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      counts.prefetch(keys[ev.first_key + k]);
    }
    for (std::uint32_t k = 0; k < ev.num_keys; ++k) {
      const EventKey& key = keys[ev.first_key + k];
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
    counts.drop_empty(touched);
    present_keys -= changed.size();
    ++stats.events_removed;
    stats.hashes_removed += ev.num_keys;
  }

  /// First touch of entry `i` in this run: remember its presence before the run.
  void mark(std::size_t i) {
    mirror::KeyCounts::Entry& e = counts.at(i);
    if (e.epoch != epoch) {
      e.epoch = epoch;
      e.was_present = present(i);
      run_entries.push_back(i);
    }
  }

  /// Applies events [begin, end) (stored/removed only) with one sink erase and one sink
  /// insert. False when the sink refused: then nothing of the run is applied (counts undone,
  /// index as before) and the caller applies it event by event.
  bool apply_run(const mirror::DecodedEvent* begin, const mirror::DecodedEvent* end) {
    const EventKey* const keys = batch->keys.data();  // a local: never reloaded
    if (begin == end) {
      return true;
    }
    std::size_t stored_keys = 0;
    for (const mirror::DecodedEvent* ev = begin; ev != end; ++ev) {
      stored_keys += ev->type == mirror::EventType::stored ? ev->num_keys : 0;
    }
    counts.reserve(stored_keys);  // entry indices stay valid for the whole run
    if (++epoch == 0) {           // stamps wrapped: make every old stamp stale
      counts.for_each([](std::size_t, mirror::KeyCounts::Entry& e) { e.epoch = 0; });
      epoch = 1;
    }
    run_entries.clear();
    // The run's keys are contiguous in the batch: prefetch a fixed distance ahead so that the
    // slots' cache misses overlap.
    constexpr std::size_t kAhead = 12;
    const std::size_t first = begin->first_key;
    const std::size_t last = (end - 1)->first_key + (end - 1)->num_keys;
    // Each key is hashed once, when prefetched.
    hashes.resize(last - first);
    applied.resize(last - first);
    auto ahead = [&](std::size_t j) {
      hashes[j - first] = counts.hash_of(keys[j]);
      counts.prefetch(hashes[j - first]);
    };
    for (std::size_t j = first; j < std::min(last, first + kAhead); ++j) {
      ahead(j);
    }
    for (const mirror::DecodedEvent* ev = begin; ev != end; ++ev) {
      const mirror::Holder holder{ev->rank, ev->medium};
      const bool stored = ev->type == mirror::EventType::stored;
      for (std::size_t j = ev->first_key; j < ev->first_key + ev->num_keys; ++j) {
        if (j + kAhead < last) {
          ahead(j + kAhead);
        }
        const EventKey& key = keys[j];
        const std::uint64_t h = hashes[j - first];
        const std::size_t i =
            stored ? counts.find_or_add_hashed(key, h) : counts.find_hashed(key, h);
        // The run's undo log: one byte per key, the key's entry when it changed (the rare undo
        // finds it again; indices stay valid for the whole run).
        applied[j - first] = 0;
        if (i == SIZE_MAX) {
          continue;  // removed but never stored here (or before this mirror joined)
        }
        mark(i);
        applied[j - first] = counts.add(i, holder, stored ? +1 : -1) ? 1 : 0;
      }
    }
    inserted.clear();
    changed.clear();  // erased
    counts.begin_drops();
    for (const std::size_t i : run_entries) {
      const bool now = present(i);
      if (now != counts.at(i).was_present) {
        (now ? inserted : changed).push_back(mirror::KeyCounts::key_of(counts.at(i)));
      }
      counts.note_if_empty(i);  // while the entry is in cache: dropped after the sink's calls
    }
    // Erase first: a lookup in between sees only keys present both before and after the run
    // (never a key the run removed).
    bool ok = true;
    try {
      if (!changed.empty()) {
        sink.erase(options.ns, span<const EventKey>(changed));
      }
    } catch (...) {
      ok = false;
    }
    if (ok) {
      try {
        if (!inserted.empty()) {
          sink.insert(options.ns, span<const EventKey>(inserted));
        }
      } catch (...) {
        ok = false;
        try {  // put back what the run erased; it was in the index a moment ago
          sink.insert(options.ns, span<const EventKey>(changed));
        } catch (const std::exception& e) {
          stats.last_error = std::string("could not restore erased keys: ") + e.what();
        }
      }
    }
    if (!ok) {
      undo_run(begin, end);
      counts.drop_empty(run_entries);
      return false;
    }
    counts.drop_noted();
    present_keys += inserted.size();
    present_keys -= changed.size();
    for (const mirror::DecodedEvent* ev = begin; ev != end; ++ev) {
      if (ev->type == mirror::EventType::stored) {
        ++stats.events_stored;
        stats.hashes_stored += ev->num_keys;
      } else {
        ++stats.events_removed;
        stats.hashes_removed += ev->num_keys;
      }
    }
    return true;
  }

  /// Undoes the holder changes of a run, last first.
  void undo_run(const mirror::DecodedEvent* begin, const mirror::DecodedEvent* end) {
    const EventKey* const keys = batch->keys.data();  // a local: never reloaded
    const std::size_t first = begin->first_key;
    for (const mirror::DecodedEvent* ev = end; ev != begin;) {
      --ev;
      const mirror::Holder holder{ev->rank, ev->medium};
      const int delta = ev->type == mirror::EventType::stored ? -1 : +1;
      for (std::size_t j = ev->first_key + ev->num_keys; j-- > ev->first_key;) {
        if (applied[j - first] != 0) {
          counts.add(counts.find_hashed(keys[j], hashes[j - first]), holder, delta);
        }
      }
    }
  }

  /// Applies one event on its own (stored or removed); a sink refusal is counted and skipped.
  void apply_one(const mirror::DecodedEvent& ev) {
    try {
      if (ev.type == mirror::EventType::stored) {
        apply_stored(ev);
      } else {
        apply_removed(ev);
      }
    } catch (const std::exception& e) {
      ++stats.failed_events;
      stats.last_error = std::string("index refused an event: ") + e.what();
    }
  }

  void apply_events() {
    const std::vector<mirror::DecodedEvent>& events = batch->events;
    const bool batched = !sink.may_refuse();
    std::size_t run = 0;  // start of the current run of stored/removed events
    for (std::size_t e = 0; e <= events.size(); ++e) {
      if (e < events.size() && events[e].type != mirror::EventType::cleared) {
        if (!batched) {
          apply_one(events[e]);
        }
        continue;
      }
      if (batched && !apply_run(events.data() + run, events.data() + e)) {
        for (std::size_t k = run; k < e; ++k) {
          apply_one(events[k]);
        }
      }
      run = e + 1;
      if (e < events.size()) {
        try {
          clear_all();
          ++stats.events_cleared;
        } catch (const std::exception& ex) {
          ++stats.failed_events;
          stats.last_error = std::string("index refused an event: ") + ex.what();
        }
      }
    }
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
  mirror::KeyCounts counts;
  const mirror::DecodedBatch* batch = nullptr;  // the message being applied
  std::uint16_t expected_ranks = 1;
  std::uint64_t present_keys = 0;
  std::vector<std::size_t> touched;
  std::vector<EventKey> changed;
  std::vector<EventKey> inserted;
  std::vector<std::size_t> run_entries;
  std::vector<std::uint64_t> hashes;  // of the run's keys
  std::vector<std::uint8_t> applied;  // per key of the run: its holder count changed
  std::uint32_t epoch = 0;
  EventMirrorStats stats;
};

BatchApplier::BatchApplier(MirrorSink& sink, const EventMirrorOptions& options)
    : impl_(std::make_unique<Impl>(sink, options)) {
  if (options.ranks.size() > 64) {
    throw InvalidArgument("EventMirror: " + std::to_string(options.ranks.size()) +
                          " rank namespaces (at most 64)");
  }
}

BatchApplier::~BatchApplier() = default;

void BatchApplier::apply(const DecodedBatch& batch) {
  Impl& m = *impl_;
  m.stats.malformed_events += batch.malformed_events;
  m.stats.foreign_keys += batch.foreign_keys;
  if (!batch.last_error.empty()) {
    m.stats.last_error = batch.last_error;
  }
  m.batch = &batch;
  m.apply_events();
  m.batch = nullptr;
  ++m.stats.messages;
  if (batch.has_ts) {
    const double now_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    m.stats.lag_ms = now_ms - batch.ts_ms;
    m.stats.max_lag_ms = std::max(m.stats.max_lag_ms, m.stats.lag_ms);
  }
  m.stats.keys = m.present_keys;
}

void BatchApplier::malformed_message(const std::string& why) {
  ++impl_->stats.malformed_messages;
  impl_->stats.last_error = why;
}

void BatchApplier::clear() {
  impl_->clear_all();
  impl_->stats.keys = 0;
}

EventMirrorStats& BatchApplier::stats() noexcept {
  return impl_->stats;
}

}  // namespace mirror

struct EventApplier::Impl {
  Impl(MirrorSink& sink, const EventMirrorOptions& options)
      : decoder(options), applier(sink, options) {}
  mirror::Decoder decoder;
  mirror::DecodedBatch batch;
  mirror::BatchApplier applier;
};

EventApplier::EventApplier(MirrorSink& sink, const EventMirrorOptions& options)
    : impl_(std::make_unique<Impl>(sink, options)) {}

EventApplier::~EventApplier() = default;

void EventApplier::apply_payload(const std::uint8_t* data, std::size_t size) {
  Impl& m = *impl_;
  try {
    m.decoder.decode(data, size, m.batch);
  } catch (const std::exception& e) {
    m.applier.malformed_message(e.what());
    return;
  }
  m.applier.apply(m.batch);
}

void EventApplier::clear() {
  impl_->applier.clear();
}

const EventMirrorStats& EventApplier::stats() const noexcept {
  return impl_->applier.stats();
}

EventMirrorStats& EventApplier::mutable_stats() noexcept {
  return impl_->applier.stats();
}

}  // namespace prefixhit
