// The host pass of GPU router scoring (router_gpu.hpp): each key some worker's lookup reads,
// read once from the residency index, becomes a small id of its (tier-folded) worker set; the
// pass's finder runs also give the worker classes the kernel runs one thread each.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host/checks.hpp"
#include "host/probes.hpp"
#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::gpu {

namespace {

using Impl = ResidencyIndex::Impl;

bool fits_width(const BlockDigest& d, std::size_t width) {
  return std::all_of(d.bytes.begin() + static_cast<std::ptrdiff_t>(width), d.bytes.end(),
                     [](std::uint8_t b) { return b == 0; });
}

/// Fills table entries from the residency index (the caller holds its reader lock), interning
/// each distinct tier-folded worker set once per batch.
class TableFiller {
 public:
  TableFiller(const detail::LookupPlan& plan, const Impl& index, const ScoreOptions& options,
              WorkerSetTable& table)
      : index_(index),
        tier_mask_(options.tier_mask),
        width_(static_cast<std::size_t>(plan.digest_size)),
        table_(table),
        folded_(table.words) {
    for (int gid = 0; gid < plan.num_groups; ++gid) {
      metas_[gid] = Impl::make_meta(options.ns, gid, width_);
    }
  }

  /// Entry (gid, i) of a request's block (hashes, n): read once, then kept.
  std::uint32_t fill(std::uint32_t* block, const BlockDigest* hashes, std::int64_t n, int gid,
                     std::int64_t i) {
    std::uint32_t& entry = block[static_cast<std::ptrdiff_t>(gid) * n + i];
    if (entry != kUnreadSet) {
      return entry;
    }
    const BlockDigest& key = hashes[i];
    if (width_ < BlockDigest::kSize && !fits_width(key, width_)) {
      entry = kBadDigestSet;
    } else {
      entry = intern(index_.set_of(key, metas_[gid]));
      ++table_.index_reads;
    }
    return entry;
  }

  /// Starts loading the slot of entry (gid, i)'s key, unless the entry is filled.
  void prefetch(const std::uint32_t* block, const BlockDigest* hashes, std::int64_t n, int gid,
                std::int64_t i) const {
    if (block[static_cast<std::ptrdiff_t>(gid) * n + i] == kUnreadSet) {
      index_.prefetch(hashes[i], metas_[gid]);
    }
  }

 private:
  /// Residency set id -> table set id (0 when the tier mask leaves nobody).
  std::uint32_t intern(std::uint32_t set) {
    if (set == Impl::kEmptySet) {
      return 0;
    }
    const auto it = local_.find(set);
    if (it != local_.end()) {
      return it->second;
    }
    std::fill(folded_.begin(), folded_.end(), 0);
    index_.fold_workers(set, tier_mask_, folded_.data());
    std::uint32_t id = 0;
    if (std::any_of(folded_.begin(), folded_.end(), [](std::uint64_t x) { return x != 0; })) {
      id = static_cast<std::uint32_t>(table_.num_sets());
      table_.sets.insert(table_.sets.end(), folded_.begin(), folded_.end());
    }
    local_.emplace(set, id);
    return id;
  }

  const Impl& index_;
  std::uint32_t tier_mask_;
  std::size_t width_;
  WorkerSetTable& table_;
  std::uint32_t metas_[kMaxGroups] = {};
  std::unordered_map<std::uint32_t, std::uint32_t> local_;
  std::vector<std::uint64_t> folded_;
};

/// The finders' Probe for the reached fill: it answers for a class of workers (those that agreed
/// on every key the class's run has read), filling the entries it reads. One key per window, as
/// the kernel's WorkerSetProbe, so a run reads exactly what each member's own lookup reads. On
/// the first key on which the members differ the run is void: it records that key's workers and
/// answers what ends each scan soonest (reading nothing more); the caller splits the class.
struct ReachProbe {
  static constexpr int kFirstWindow = 1;
  static constexpr int kMaxWindow = 1;

  const detail::LookupPlan* plan;
  TableFiller* filler;
  const WorkerSetTable* table;
  std::uint32_t* block;  ///< the request's block of the table
  const BlockDigest* hashes;
  std::int64_t n;
  const std::uint64_t* cls;          ///< the class's workers
  std::vector<std::uint64_t>* held;  ///< [words]: the probed key's workers (all members)
  const int* scan_depth;             ///< per spec group: keys a scan prefetches ahead
  /// Spec group 0's hashes per block when it is full attention, else 0: its chain of block keys
  /// is every run's longest walk, and the first `known` blocks of it are held by every member
  /// of the class (learnt by a run of a class that contains it), so they are answered without
  /// a table look-up.
  std::int64_t chain_step = 0;
  std::int64_t known = 0;
  mutable std::int64_t chain_run = 0;  ///< chain blocks from block 0 answered "all" so far
  mutable bool split = false;
  mutable int pf_sg = -1;  ///< the scan `ahead` last served, and the next key it would prefetch
  mutable std::int64_t pf_step = 0;
  mutable std::int64_t pf_next = 0;

  /// Index reads are cache misses: on a miss, prefetch the slots of the next keys of the same
  /// scan (and the digests of the keys after them), each once per scan.
  void ahead(int sg, std::int64_t index, std::int64_t step) const {
    const int depth = scan_depth[sg];
    std::int64_t k = 1;
    if (sg == pf_sg && step == pf_step && step != 0) {
      const std::int64_t q = (pf_next - index) / step;
      if (q >= 1 && q <= depth + 1 && index + q * step == pf_next) {
        k = q;
      }
    }
    const detail::SpecGroupPlan& spec = plan->spec_groups[sg];
    for (; k <= depth; ++k) {
      const std::int64_t i = index + k * step;
      if (i < 0 || i >= n) {
        break;
      }
      for (int m = 0; m < spec.num_members; ++m) {
        filler->prefetch(block, hashes, n, plan->members[spec.first_member + m], i);
      }
      const std::int64_t far = i + depth * step;
      if (far >= 0 && far < n) {
        __builtin_prefetch(hashes + far);
      }
    }
    pf_sg = sg;
    pf_step = step;
    pf_next = index + (depth + 1) * step;
  }

  /// held = the workers holding hash `index` in every member group of spec group `sg` (a misfit
  /// hash: nobody, as the kernel's probe answers it).
  void read(int sg, std::int64_t index) const {
    const detail::SpecGroupPlan& spec = plan->spec_groups[sg];
    std::uint32_t ids[kMaxGroups];
    for (int m = 0; m < spec.num_members; ++m) {
      ids[m] = filler->fill(block, hashes, n, plan->members[spec.first_member + m], index);
    }
    std::vector<std::uint64_t>& out = *held;
    for (std::size_t w = 0; w < out.size(); ++w) {
      std::uint64_t x = ~std::uint64_t{0};
      for (int m = 0; m < spec.num_members; ++m) {
        x &= ids[m] < table->num_sets() ? table->sets[ids[m] * table->words + w] : 0;
      }
      out[w] = x;
    }
  }

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    if (split) {
      // A forward walk stops at an absent key, a backward scan at a present run.
      return step >= 0 ? 0 : count >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << count) - 1;
    }
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const std::int64_t index = first + k * step;
      if (index < 0 || index >= n) {
        continue;  // the kernel's probe answers absent without reading
      }
      const bool on_chain =
          chain_step > 0 && sg == 0 && step == chain_step && (index + 1) % chain_step == 0;
      if (on_chain && (index + 1) / chain_step <= known) {
        bits |= std::uint64_t{1} << k;
        continue;
      }
      if (block[static_cast<std::ptrdiff_t>(plan->members[plan->spec_groups[sg].first_member]) * n +
                index] == kUnreadSet) {
        ahead(sg, index, step);
      }
      read(sg, index);
      bool all = true;
      bool none = true;
      for (std::size_t w = 0; w < held->size(); ++w) {
        const std::uint64_t x = (*held)[w] & cls[w];
        all = all && x == cls[w];
        none = none && x == 0;
      }
      if (all) {
        bits |= std::uint64_t{1} << k;
        if (on_chain && (index + 1) / chain_step == chain_run + 1) {
          ++chain_run;
        }
      } else if (!none) {
        split = true;  // `held` keeps this key's workers for the caller
        return window(sg, first, step, count);
      }
    }
    return bits;
  }
};

/// Keys a scan prefetches ahead of the one it reads.
constexpr int kPrefetch = 8;

/// TableFill::reached for one request: runs the finders over classes of workers, splitting a
/// class on the first key its members disagree on, until every class ran to its end. Every
/// worker ends in a class whose run read (and filled) every key its own lookup reads, errors
/// included, so the table answers each worker's lookup on the device.
void fill_reached(const detail::LookupPlan& plan, TableFiller& filler, WorkerSetTable& table,
                  const LookupBatch& batch, std::size_t r, std::vector<std::uint64_t>* finals) {
  const std::int64_t off = batch.offsets[r];
  const std::int64_t n = batch.offsets[r + 1] - off;
  const bool eagle = batch.apply_eagle.empty() || batch.apply_eagle[r] != 0;
  const std::size_t words = table.words;
  std::vector<std::uint64_t> held(words);
  std::vector<std::uint64_t> cls(words, ~std::uint64_t{0});
  if (table.num_workers % 64 != 0) {
    cls[words - 1] = (std::uint64_t{1} << (table.num_workers % 64)) - 1;
  }
  // Pending classes: `words` of workers, then the chain blocks they all hold.
  std::vector<std::uint64_t> stack(cls);
  stack.push_back(0);
  int scan_depth[kMaxGroups];
  detail::scan_prefetch_depths(plan, kPrefetch, scan_depth);
  ReachProbe probe{&plan,
                   &filler,
                   &table,
                   table.set_ids.data() + static_cast<std::size_t>(off) * table.num_groups,
                   batch.digests.data() + off,
                   n,
                   cls.data(),
                   &held,
                   scan_depth};
  if (plan.num_spec_groups > 0 && plan.spec_groups[0].finder == FinderKind::full_attention) {
    probe.chain_step = plan.spec_groups[0].block_size / plan.hash_block_size;
  }
  GroupHit hits[kMaxGroups];
  while (!stack.empty()) {
    probe.known = static_cast<std::int64_t>(stack.back());
    stack.pop_back();
    std::copy(stack.end() - static_cast<std::ptrdiff_t>(words), stack.end(), cls.begin());
    stack.resize(stack.size() - words);
    probe.chain_run = probe.known;
    probe.split = false;
    std::int64_t hit_length = 0;
    static_cast<void>(detail::find_longest_cache_hit(plan, n, batch.max_lengths[r], eagle, probe,
                                                     hits, hit_length));
    ++table.finder_runs;
    if (!probe.split && finals != nullptr) {
      finals->insert(finals->end(), cls.begin(), cls.end());
    }
    if (probe.split) {
      // Both halves are non-empty: the members differed on the key in `held`.
      for (std::size_t w = 0; w < words; ++w) {
        stack.push_back(cls[w] & held[w]);
      }
      stack.push_back(static_cast<std::uint64_t>(probe.chain_run));
      for (std::size_t w = 0; w < words; ++w) {
        stack.push_back(cls[w] & ~held[w]);
      }
      stack.push_back(static_cast<std::uint64_t>(probe.chain_run));
    }
  }
}

/// Appends request r's classes (`finals`: `words` each, disjoint, covering every worker) to
/// `out` in build_worker_classes' order: by lowest member, members ascending.
void emit_classes(const std::vector<std::uint64_t>& finals, std::size_t words, std::size_t r,
                  WorkerClasses& out) {
  auto lowest = [&](std::size_t c) {
    std::size_t w = 0;
    while (finals[c * words + w] == 0) {
      ++w;
    }
    return w * 64 + static_cast<std::size_t>(__builtin_ctzll(finals[c * words + w]));
  };
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (lowest member, class)
  for (std::size_t c = 0; c < finals.size() / words; ++c) {
    order.emplace_back(lowest(c), c);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [low, c] : order) {
    out.requests.push_back(static_cast<std::uint32_t>(r));
    for (std::size_t w = 0; w < words; ++w) {
      for (std::uint64_t x = finals[c * words + w]; x != 0; x &= x - 1) {
        out.members.push_back(static_cast<std::int32_t>(w * 64 + __builtin_ctzll(x)));
      }
    }
    out.member_offsets.push_back(static_cast<std::int64_t>(out.members.size()));
  }
}

/// TableFill::every_probe for one request: each spec group's block keys, every hash of a
/// fine-grained group.
void fill_every_probe(const detail::LookupPlan& plan, TableFiller& filler, WorkerSetTable& table,
                      const LookupBatch& batch, std::size_t r) {
  const std::int64_t off = batch.offsets[r];
  const std::int64_t n = batch.offsets[r + 1] - off;
  std::uint32_t* block = table.set_ids.data() + static_cast<std::size_t>(off) * table.num_groups;
  for (int k = 0; k < plan.num_spec_groups; ++k) {
    const detail::SpecGroupPlan& spec = plan.spec_groups[k];
    for (int m = 0; m < spec.num_members; ++m) {
      for (std::int64_t i = 0; i < n; ++i) {
        if (detail::probed_by_finders(plan, k, i)) {
          filler.fill(block, batch.digests.data() + off, n, plan.members[spec.first_member + m], i);
        }
      }
    }
  }
}

}  // namespace

WorkerSetTable build_worker_set_table(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency, const ScoreOptions& options,
                                      TableFill fill, WorkerClasses* classes) {
  coordinator.validate_batch(batch);
  detail::check_namespace(options.ns, "score_workers");
  const detail::LookupPlan& plan = coordinator.plan();
  const Impl& index = residency.impl();
  WorkerSetTable table;
  table.num_workers = index.num_workers;
  table.num_groups = plan.num_groups;
  table.words = index.worker_words;
  table.set_ids.assign(static_cast<std::size_t>(plan.num_groups) * batch.digests.size(),
                       kUnreadSet);
  table.sets.assign(table.words, 0);  // set 0: nobody
  const bool reached_classes = classes != nullptr && fill == TableFill::reached;
  if (reached_classes) {
    *classes = WorkerClasses{};
    classes->member_offsets.push_back(0);
    classes->members.reserve(batch.num_requests() * static_cast<std::size_t>(table.num_workers));
  }
  {
    const std::shared_lock lock(index.mutex);
    TableFiller filler(plan, index, options, table);
    std::vector<std::uint64_t> finals;
    for (std::size_t r = 0; r < batch.num_requests(); ++r) {
      if (fill == TableFill::reached) {
        finals.clear();
        fill_reached(plan, filler, table, batch, r, reached_classes ? &finals : nullptr);
        if (reached_classes) {
          emit_classes(finals, table.words, r, *classes);
        }
      } else {
        fill_every_probe(plan, filler, table, batch, r);
      }
    }
  }
  if (classes != nullptr && !reached_classes) {
    *classes = build_worker_classes(table, batch.offsets);
  }
  return table;
}

}  // namespace prefixhit::gpu
