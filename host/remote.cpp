// Remote mode: a batch of lookups against a store that answers batch_is_exist(keys), in one or
// a few rounds of deduplicated keys (see remote.hpp for the plans and the candidate rule).
#include "prefixhit/remote.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "host/nvtx.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"

namespace prefixhit {

namespace {

constexpr std::int32_t kNotCandidate = -1;  // outside the candidate set: absent
constexpr std::int32_t kUnasked = -2;       // a candidate whose key has not been asked yet

enum : std::uint8_t { kPending = 0, kPresent = 1, kAbsent = 2 };

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

struct GroupKey {
  std::int32_t group;
  BlockDigest digest;
  friend bool operator==(const GroupKey& a, const GroupKey& b) noexcept {
    return a.group == b.group && a.digest == b.digest;
  }
};

struct GroupKeyHash {
  std::size_t operator()(const GroupKey& k) const noexcept {
    std::uint64_t word = 0;  // digests are hash outputs: any 8 bytes are uniform
    std::memcpy(&word, k.digest.bytes.data(), sizeof(word));
    return static_cast<std::size_t>(word ^ (static_cast<std::uint64_t>(k.group) + 1) *
                                               0x9E3779B97F4A7C15ULL);
  }
};

/// A read of a candidate not asked yet: its unit position and what to ask.
struct Unknown {
  std::int64_t position;  // into Impl::ids
  std::int32_t group;
  std::int64_t digest_index;  // into Impl::digests
};

}  // namespace

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

struct RemoteLookup::Impl {
  Impl(const Coordinator& coordinator, const StoreLayout& layout, const RemoteOptions& opts)
      : coord(coordinator), options(opts), num_groups(coordinator.num_groups()) {
    if (options.plan == RemotePlan::multi_round && options.max_rounds < 2) {
      throw InvalidArgument("remote lookup: max_rounds must be at least 2 for multi_round, got " +
                            std::to_string(options.max_rounds));
    }
    if (layout.namespaces.size() != static_cast<std::size_t>(num_groups)) {
      throw InvalidArgument("store layout has namespaces for " +
                            std::to_string(layout.namespaces.size()) + " groups, the coordinator " +
                            std::to_string(num_groups));
    }
    if (layout.format.model_name.empty()) {
      throw InvalidArgument("store layout: model_name must not be empty");
    }
    prefixes.resize(static_cast<std::size_t>(num_groups));
    for (int g = 0; g < num_groups; ++g) {
      const auto& spaces = layout.namespaces[static_cast<std::size_t>(g)];
      if (spaces.empty()) {
        throw InvalidArgument("store layout: group " + std::to_string(g) + " has no namespaces");
      }
      for (const RankNamespace& ns : spaces) {
        prefixes[static_cast<std::size_t>(g)].push_back(store_key_prefix(layout.format, ns, g) +
                                                        "@");
      }
    }
  }

  void require_done(const char* what) const {
    if (!done) {
      throw InvalidArgument(std::string("remote lookup: ") + what +
                            " before every round is answered");
    }
  }

  Coordinator coord;
  RemoteOptions options;
  bool worker = false;
  int num_groups = 0;
  bool fine = false;  // partial hits: every group's units are raw hashes

  std::vector<BlockDigest> digests;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> bounds;       // max_length (batch) or token_len (worker) per request
  std::vector<std::int64_t> num_tokens;   // worker
  std::vector<std::uint8_t> apply_eagle;  // batch; empty = true

  std::vector<std::vector<std::string>> prefixes;  // [group][namespace] "...@group:g@"
  std::vector<std::int64_t> stride;                // [group] hashes per unit (1 when fine)
  std::vector<std::int64_t> slot_first;            // [r * G + g] -> first unit in ids
  std::vector<std::int64_t> slot_count;            // [r * G + g]
  std::vector<std::int32_t> ids;                   // per unit: candidate id or a sentinel

  std::vector<std::int32_t> cand_group;
  std::vector<BlockDigest> cand_digest;
  std::vector<std::uint8_t> cand_state;
  bool dedup = false;
  std::unordered_map<GroupKey, std::int32_t, GroupKeyHash> index;

  std::vector<std::int32_t> round_cands;  // candidates asked this round, in key order
  std::vector<std::string> pending;
  std::vector<std::uint8_t> finished;  // per request (multi_round)
  bool done = false;
  RemoteStats stats;

  std::size_t num_requests() const { return offsets.size() - 1; }

  span<const BlockDigest> request_hashes(std::size_t r) const {
    return span<const BlockDigest>(digests.data() + offsets[r],
                                   static_cast<std::size_t>(offsets[r + 1] - offsets[r]));
  }

  /// The unit of hash index `idx` for group g, or -1 when the finders never read it there.
  std::int64_t unit_of(int g, std::int64_t idx) const {
    const std::int64_t s = stride[static_cast<std::size_t>(g)];
    return (idx + 1) % s == 0 ? (idx + 1) / s - 1 : -1;
  }

  /// The candidate slots of every (request, group): vLLM's candidate rule at each bound.
  void build_slots() {
    const detail::LookupPlan& plan = coord.plan();
    const std::size_t r_count = num_requests();
    const auto g_count = static_cast<std::size_t>(num_groups);
    const std::int64_t h = plan.hash_block_size;
    stride.assign(g_count, 1);
    slot_first.assign(r_count * g_count, 0);
    slot_count.assign(r_count * g_count, 0);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < r_count; ++r) {
      const std::int64_t n = offsets[r + 1] - offsets[r];
      for (std::size_t g = 0; g < g_count; ++g) {
        const std::int64_t b = coord.config().groups[g].block_size;
        stride[g] = fine ? 1 : b / h;
        const std::int64_t count = fine ? std::min(n, floor_div(bounds[r], h))
                                        : std::min(n / stride[g], floor_div(bounds[r], b));
        slot_first[r * g_count + g] = total;
        slot_count[r * g_count + g] = std::max<std::int64_t>(count, 0);
        total += slot_count[r * g_count + g];
      }
    }
    ids.assign(static_cast<std::size_t>(total), kUnasked);
    if (fine) {
      return;  // vLLM asks every raw hash of every group when partial hits are on
    }
    // Window groups: only the chunks their lookup mask keeps (retention null: segments of S).
    for (std::size_t g = 0; g < g_count; ++g) {
      const detail::SpecGroupPlan& sg = plan.spec_groups[plan.spec_group_of[g]];
      if (sg.finder != FinderKind::sliding_window) {
        continue;
      }
      const std::int64_t b = sg.block_size;
      const std::int64_t shift = sg.use_eagle ? 1 : 0;
      const std::int64_t need = (sg.window - 1 + b - 1) / b + shift;
      const std::int64_t per = plan.scheduler_block_size / b;
      if (need >= per) {
        continue;
      }
      for (std::size_t r = 0; r < r_count; ++r) {
        std::int32_t* unit = ids.data() + slot_first[r * g_count + g];
        for (std::int64_t j = 0; j < slot_count[r * g_count + g]; ++j) {
          if (j < shift || (j - shift) % per < per - need) {
            unit[j] = kNotCandidate;
          }
        }
      }
    }
  }

  /// Gives the unit at `position` (group g, digest index d) a candidate id; a new candidate
  /// (not seen in an earlier round or request) joins this round's keys.
  void assign(std::int64_t position, std::int32_t g, std::int64_t d) {
    const BlockDigest& digest = digests[static_cast<std::size_t>(d)];
    auto id = static_cast<std::int32_t>(cand_group.size());
    if (dedup) {
      const auto [it, inserted] = index.try_emplace(GroupKey{g, digest}, id);
      if (!inserted) {
        ids[static_cast<std::size_t>(position)] = it->second;
        return;
      }
    }
    cand_group.push_back(g);
    cand_digest.push_back(digest);
    cand_state.push_back(kPending);
    round_cands.push_back(id);
    ids[static_cast<std::size_t>(position)] = id;
  }

  /// Asks every unasked candidate of request r in the groups `pick` accepts.
  template <class Pick>
  void force(std::size_t r, Pick pick) {
    const auto g_count = static_cast<std::size_t>(num_groups);
    for (std::size_t g = 0; g < g_count; ++g) {
      if (!pick(static_cast<int>(g))) {
        continue;
      }
      const std::int64_t first = slot_first[r * g_count + g];
      for (std::int64_t u = 0; u < slot_count[r * g_count + g]; ++u) {
        if (ids[static_cast<std::size_t>(first + u)] == kUnasked) {
          const std::int64_t idx = fine ? u : (u + 1) * stride[g] - 1;
          assign(first + u, static_cast<std::int32_t>(g), offsets[r] + idx);
        }
      }
    }
  }

  /// Builds this round's key strings from round_cands.
  void build_keys() {
    pending.clear();
    std::size_t count = 0;
    for (std::int32_t c : round_cands) {
      count += prefixes[static_cast<std::size_t>(cand_group[static_cast<std::size_t>(c)])].size();
    }
    pending.reserve(count);
    static constexpr char kHex[] = "0123456789abcdef";
    for (std::int32_t c : round_cands) {
      const BlockDigest& d = cand_digest[static_cast<std::size_t>(c)];
      for (const std::string& prefix :
           prefixes[static_cast<std::size_t>(cand_group[static_cast<std::size_t>(c)])]) {
        std::string key(prefix.size() + 2 * d.bytes.size(), '\0');
        std::memcpy(key.data(), prefix.data(), prefix.size());
        char* out = key.data() + prefix.size();
        for (std::uint8_t byte : d.bytes) {
          *out++ = kHex[byte >> 4];
          *out++ = kHex[byte & 15];
        }
        pending.push_back(std::move(key));
      }
    }
  }

  bool probe_unit(std::size_t r, int g, std::int64_t idx, bool& unknown,
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

  /// One request's view of the answers; records reads of unasked candidates.
  class RequestSource final : public ExistenceSource {
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

  /// The whole batch's view (for the threaded CPU engine): the request from the hash pointer.
  class BatchSource final : public ExistenceSource {
   public:
    explicit BatchSource(const Impl& impl) : impl_(impl) {}
    std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                        std::int64_t step, int count) const override {
      if (group_id < 0 || group_id >= impl_.num_groups) {
        return 0;
      }
      const std::int64_t off = hashes - impl_.digests.data();
      const auto r = static_cast<std::size_t>(
          std::upper_bound(impl_.offsets.begin(), impl_.offsets.end(), off) -
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

  /// Runs request r's lookup(s) on what is known. Returns its hit length (worker mode) or 0, and
  /// sets `complete` when no unasked candidate was read.
  std::int64_t run(std::size_t r, std::vector<Unknown>* record, bool& complete) const {
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

  /// multi_round: plans the next round from the lookups of unfinished requests.
  void plan_lazy() {
    for (;;) {
      std::vector<Unknown> unknowns;
      std::vector<std::size_t> open;
      for (std::size_t r = 0; r < num_requests(); ++r) {
        if (finished[r] != 0) {
          continue;
        }
        bool complete = false;
        run(r, &unknowns, complete);
        if (complete) {
          finished[r] = 1;
        } else {
          open.push_back(r);
        }
      }
      if (open.empty()) {
        done = true;
        return;
      }
      if (stats.rounds + 1 >= options.max_rounds) {
        for (std::size_t r : open) {
          force(r, [](int) { return true; });  // the last round: everything left
        }
      } else {
        for (const Unknown& u : unknowns) {
          if (ids[static_cast<std::size_t>(u.position)] == kUnasked) {
            assign(u.position, u.group, u.digest_index);
          }
        }
      }
      if (!round_cands.empty()) {
        build_keys();
        return;
      }
      // Every read resolved through candidates other requests already asked: run again.
    }
  }

  void start() {
    PREFIXHIT_NVTX_RANGE("prefixhit::remote_plan");
    fine = coord.plan().partial;
    build_slots();
    dedup = num_requests() > 1;
    if (dedup) {
      // Shared prefixes make about half the candidate units repeats; grow the table once.
      index.reserve(ids.size() / 2);
    }
    finished.assign(num_requests(), 0);
    const detail::LookupPlan& plan = coord.plan();
    const bool multi = options.plan == RemotePlan::multi_round;
    for (std::size_t r = 0; r < num_requests(); ++r) {
      // multi_round asks full attention first: it stops at its first miss and caps every other
      // group's bound.
      force(r, [&](int g) {
        return !multi || plan.spec_groups[plan.spec_group_of[g]].is_full_attention;
      });
    }
    stats.candidates_total = static_cast<std::int64_t>(round_cands.size());
    if (dedup) {
      std::int64_t total = 0;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        total += ids[i] >= 0 ? 1 : 0;
      }
      stats.candidates_total = total;
    }
    if (!round_cands.empty()) {
      build_keys();
    } else if (multi) {
      plan_lazy();
    } else {
      done = true;
    }
  }
};

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
