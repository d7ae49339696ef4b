// Remote mode: a batch of lookups against a store that answers batch_is_exist(keys), in one or
// a few rounds of deduplicated keys (see remote.hpp for the plans and the candidate rule). This
// file reads the answers (the finders' views of them) and holds the public API and the drivers;
// host/remote_plan.cpp plans the rounds.
#include "prefixhit/remote.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "host/remote_plan.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit {

using remote::kAbsent;
using remote::kNotCandidate;
using remote::kPresent;
using remote::kUnasked;
using remote::Unknown;

StoreLayout StoreLayout::for_parallel(const Config& config, StoreKeyFormat format,
                                      const ParallelLayout& parallel) {
  StoreLayout out;
  out.format = std::move(format);
  out.namespaces.reserve(config.groups.size());
  for (const GroupSpec& spec : config.groups) {
    out.namespaces.push_back(rank_namespaces(parallel, tp_replication_factor(spec, parallel)));
  }
  return out;
}

bool RemoteLookup::Impl::probe_unit(std::size_t r, int g, std::int64_t idx, bool& unknown,
                                    std::vector<Unknown>* record) const {
  const std::size_t slot = r * static_cast<std::size_t>(num_groups) + static_cast<std::size_t>(g);
  const std::int64_t unit = unit_of(g, idx);
  if (unit < 0 || unit >= slot_count[slot]) {
    return false;
  }
  const std::int64_t position = slot_first[slot] + unit;
  const std::int32_t id = ids[static_cast<std::size_t>(position)];
  if (id == kNotCandidate) {
    return false;
  }
  if (id == kUnasked) {
    // Planning reads an unasked candidate as present: the finders then stop where they would
    // if it were, so a round asks only the keys near the current answer (a window group's last
    // few chunks, not all of them). The answer counts only once no such read remains.
    unknown = true;
    if (record != nullptr) {
      record->push_back(Unknown{position, static_cast<std::int32_t>(g), offsets[r] + idx});
      return true;
    }
    return false;
  }
  return cand_state[static_cast<std::size_t>(id)] == kPresent;
}

class RemoteLookup::Impl::RequestSource final : public ExistenceSource {
 public:
  RequestSource(const Impl& impl, std::size_t r, std::vector<Unknown>* record)
      : impl_(impl), r_(r), record_(record) {}
  std::uint64_t probe(int group_id, const BlockDigest* /*hashes*/, std::int64_t first,
                      std::int64_t step, int count) const override {
    if (group_id < 0 || group_id >= impl_.num_groups) {
      return 0;
    }
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      if (impl_.probe_unit(r_, group_id, first + k * step, unknown_, record_)) {
        bits |= std::uint64_t{1} << k;
      }
    }
    return bits;
  }
  bool saw_unknown() const { return unknown_; }

 private:
  const Impl& impl_;
  std::size_t r_;
  std::vector<Unknown>* record_;
  mutable bool unknown_ = false;
};

class RemoteLookup::Impl::BatchSource final : public ExistenceSource {
 public:
  explicit BatchSource(const Impl& impl) : impl_(impl) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override {
    if (group_id < 0 || group_id >= impl_.num_groups) {
      return 0;
    }
    const std::int64_t off = hashes - impl_.digests.data();
    const auto r =
        static_cast<std::size_t>(std::upper_bound(impl_.offsets.begin(), impl_.offsets.end(), off) -
                                 impl_.offsets.begin() - 1);
    bool unknown = false;
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      if (impl_.probe_unit(r, group_id, first + k * step, unknown, nullptr)) {
        bits |= std::uint64_t{1} << k;
      }
    }
    return bits;
  }

 private:
  const Impl& impl_;
};

std::int64_t RemoteLookup::Impl::run(std::size_t r, std::vector<Unknown>* record,
                                     bool& complete) const {
  const RequestSource source(*this, r, record);
  const span<const BlockDigest> hashes = request_hashes(r);
  std::int64_t hit = 0;
  try {
    if (!worker) {
      const bool eagle = apply_eagle.empty() || apply_eagle[r] != 0;
      coord.find_longest_cache_hit(hashes, bounds[r], source, eagle);
    } else if (!hashes.empty() && bounds[r] > 0) {
      hit = coord.find_longest_cache_hit(hashes, bounds[r], source).hit_length;
      if (hit >= num_tokens[r]) {
        // A hit of the whole prompt: recompute the last token (vLLM's second lookup).
        const std::int64_t usable = coord.align_lookup_length(num_tokens[r] - 1);
        hit = usable <= 0 ? 0 : coord.find_longest_cache_hit(hashes, usable, source).hit_length;
      }
    }
  } catch (const Error& e) {
    throw_error(e.kind(), "request " + std::to_string(r) + ": " + e.what());
  }
  complete = !source.saw_unknown();
  return hit;
}

RemoteLookup::RemoteLookup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteLookup::RemoteLookup(RemoteLookup&&) noexcept = default;
RemoteLookup& RemoteLookup::operator=(RemoteLookup&&) noexcept = default;
RemoteLookup::~RemoteLookup() = default;

RemoteLookup RemoteLookup::batch(const Coordinator& coordinator, const StoreLayout& layout,
                                 const LookupBatch& batch, const RemoteOptions& options) {
  coordinator.validate_batch(batch);
  auto impl = std::make_unique<Impl>(coordinator, layout, options);
  impl->digests.assign(batch.digests.begin(), batch.digests.end());
  impl->offsets.assign(batch.offsets.begin(), batch.offsets.end());
  impl->bounds.assign(batch.max_lengths.begin(), batch.max_lengths.end());
  impl->apply_eagle.assign(batch.apply_eagle.begin(), batch.apply_eagle.end());
  impl->start();
  return RemoteLookup(std::move(impl));
}

RemoteLookup RemoteLookup::worker(const Coordinator& coordinator, const StoreLayout& layout,
                                  span<const BlockDigest> digests, span<const std::int64_t> offsets,
                                  span<const std::int64_t> num_tokens,
                                  const RemoteOptions& options) {
  if (offsets.empty() || num_tokens.size() != offsets.size() - 1) {
    throw InvalidArgument("worker lookup: " + std::to_string(num_tokens.size()) +
                          " num_tokens for " +
                          std::to_string(offsets.empty() ? 0 : offsets.size() - 1) +
                          " requests (offsets need num_requests + 1 entries)");
  }
  const std::int64_t h = coordinator.plan().hash_block_size;
  std::vector<std::int64_t> token_lens(num_tokens.size());
  for (std::size_t r = 0; r < num_tokens.size(); ++r) {
    if (num_tokens[r] < 0) {
      throw InvalidArgument("worker lookup: request " + std::to_string(r) +
                            ": num_tokens must not be negative, got " +
                            std::to_string(num_tokens[r]));
    }
    token_lens[r] = coordinator.align_lookup_length(num_tokens[r]);
    const std::int64_t n = r + 1 < offsets.size() ? offsets[r + 1] - offsets[r] : 0;
    if (n > 0 && token_lens[r] / h > n) {
      throw InvalidArgument("worker lookup: request " + std::to_string(r) + ": num_tokens " +
                            std::to_string(num_tokens[r]) + " aligns to " +
                            std::to_string(token_lens[r]) + " tokens, past its " +
                            std::to_string(n) + " hashes of " + std::to_string(h) + " tokens");
    }
    if (n <= 0) {
      token_lens[r] = 0;  // vLLM: no hashes, no lookup
    }
  }
  coordinator.validate_batch(LookupBatch{digests, offsets, token_lens, {}});
  auto impl = std::make_unique<Impl>(coordinator, layout, options);
  impl->worker = true;
  impl->digests.assign(digests.begin(), digests.end());
  impl->offsets.assign(offsets.begin(), offsets.end());
  impl->bounds = std::move(token_lens);
  impl->num_tokens.assign(num_tokens.begin(), num_tokens.end());
  impl->start();
  return RemoteLookup(std::move(impl));
}

bool RemoteLookup::done() const noexcept {
  return impl_->done;
}

const std::vector<std::string>& RemoteLookup::pending_keys() const noexcept {
  return impl_->pending;
}

const RemoteStats& RemoteLookup::stats() const noexcept {
  return impl_->stats;
}

void RemoteLookup::answer(span<const std::int64_t> results) {
  Impl& im = *impl_;
  if (im.done) {
    throw InvalidArgument("remote lookup: answer() after the lookup is done");
  }
  if (results.size() != im.pending.size()) {
    throw InvalidArgument("remote lookup: " + std::to_string(results.size()) + " answers for " +
                          std::to_string(im.pending.size()) + " keys");
  }
  std::size_t k = 0;
  for (std::int32_t c : im.round_cands) {
    const std::size_t spaces =
        im.prefixes[static_cast<std::size_t>(im.cand_group[static_cast<std::size_t>(c)])].size();
    bool present = true;  // the all-namespaces rule
    for (std::size_t j = 0; j < spaces; ++j) {
      present = present && results[k + j] == 1;
    }
    k += spaces;
    im.cand_state[static_cast<std::size_t>(c)] = present ? kPresent : kAbsent;
  }
  ++im.stats.rounds;
  im.stats.keys_asked += static_cast<std::int64_t>(im.pending.size());
  im.stats.candidates_asked += static_cast<std::int64_t>(im.round_cands.size());
  im.stats.keys_per_round.push_back(static_cast<std::int64_t>(im.pending.size()));
  im.round_cands.clear();
  im.pending.clear();
  if (im.options.plan == RemotePlan::one_round) {
    im.done = true;
  } else {
    im.plan_lazy();
  }
}

BatchLookupResult RemoteLookup::result() const {
  const Impl& im = *impl_;
  im.require_done("result()");
  if (im.worker) {
    throw InvalidArgument("remote lookup: result() is for batch mode; use hit_lengths()");
  }
  const Impl::BatchSource source(im);
  return im.coord.find_longest_cache_hits(
      LookupBatch{im.digests, im.offsets, im.bounds, im.apply_eagle}, source);
}

BatchLookupResult RemoteLookup::result(const gpu::BatchLookupEngine& engine) const {
  const Impl& im = *impl_;
  im.require_done("result(engine)");
  if (im.worker) {
    throw InvalidArgument("remote lookup: result(engine) is for batch mode; use hit_lengths()");
  }
  return engine.find_longest_cache_hits(
      LookupBatch{im.digests, im.offsets, im.bounds, im.apply_eagle}, presence_table());
}

std::vector<std::uint8_t> RemoteLookup::presence_table() const {
  const Impl& im = *impl_;
  im.require_done("presence_table()");
  const auto g_count = static_cast<std::size_t>(im.num_groups);
  std::vector<std::uint8_t> table(g_count * im.digests.size(), 0);
  for (std::size_t r = 0; r < im.num_requests(); ++r) {
    const std::int64_t n = im.offsets[r + 1] - im.offsets[r];
    std::uint8_t* block = table.data() + static_cast<std::ptrdiff_t>(g_count) * im.offsets[r];
    for (std::size_t g = 0; g < g_count; ++g) {
      const std::int64_t first = im.slot_first[r * g_count + g];
      for (std::int64_t u = 0; u < im.slot_count[r * g_count + g]; ++u) {
        const std::int32_t id = im.ids[static_cast<std::size_t>(first + u)];
        if (id >= 0 && im.cand_state[static_cast<std::size_t>(id)] == kPresent) {
          const std::int64_t idx = im.fine ? u : (u + 1) * im.stride[g] - 1;
          block[static_cast<std::int64_t>(g) * n + idx] = 1;
        }
      }
    }
  }
  return table;
}

std::vector<std::int64_t> RemoteLookup::hit_lengths() const {
  const Impl& im = *impl_;
  im.require_done("hit_lengths()");
  if (!im.worker) {
    throw InvalidArgument("remote lookup: hit_lengths() is for worker mode; use result()");
  }
  std::vector<std::int64_t> out(im.num_requests(), 0);
  for (std::size_t r = 0; r < out.size(); ++r) {
    bool complete = false;
    out[r] = im.run(r, nullptr, complete);
  }
  return out;
}

namespace {

void drive(RemoteLookup& lookup, const BatchIsExist& exist) {
  while (!lookup.done()) {
    const std::vector<std::int64_t> results = exist(lookup.pending_keys());
    lookup.answer(results);
  }
}

}  // namespace

BatchLookupResult remote_lookup(const Coordinator& coordinator, const StoreLayout& layout,
                                const LookupBatch& batch, const BatchIsExist& exist,
                                const RemoteOptions& options, RemoteStats* stats) {
  RemoteLookup lookup = RemoteLookup::batch(coordinator, layout, batch, options);
  drive(lookup, exist);
  if (stats != nullptr) {
    *stats = lookup.stats();
  }
  return lookup.result();
}

std::vector<std::int64_t> worker_lookup(const Coordinator& coordinator, const StoreLayout& layout,
                                        span<const BlockDigest> digests,
                                        span<const std::int64_t> offsets,
                                        span<const std::int64_t> num_tokens,
                                        const BatchIsExist& exist, const RemoteOptions& options,
                                        RemoteStats* stats) {
  RemoteLookup lookup =
      RemoteLookup::worker(coordinator, layout, digests, offsets, num_tokens, options);
  drive(lookup, exist);
  if (stats != nullptr) {
    *stats = lookup.stats();
  }
  return lookup.hit_lengths();
}

}  // namespace prefixhit
