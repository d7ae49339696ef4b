// The host pass of GPU router scoring (router_gpu.hpp): each key a request's finders may probe,
// read once from the residency index, becomes a small id of its (tier-folded) worker set.
#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/residency_table.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::gpu {

namespace {

using Impl = ResidencyIndex::Impl;

/// splitmix64's finaliser: the per-set random word of a worker signature.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

bool fits_width(const BlockDigest& d, std::size_t width) {
  return std::all_of(d.bytes.begin() + static_cast<std::ptrdiff_t>(width), d.bytes.end(),
                     [](std::uint8_t b) { return b == 0; });
}

}  // namespace

WorkerSetTable build_worker_set_table(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency,
                                      const ScoreOptions& options) {
  coordinator.validate_batch(batch);
  if (options.ns > kMaxNamespace) {
    throw InvalidArgument("score_workers: namespace " + std::to_string(options.ns) + " is above " +
                          std::to_string(kMaxNamespace));
  }
  const detail::LookupPlan& plan = coordinator.plan();
  const Impl& index = residency.impl();
  const auto g = static_cast<std::size_t>(plan.num_groups);
  const auto width = static_cast<std::size_t>(plan.digest_size);
  WorkerSetTable table;
  table.num_workers = index.num_workers;
  table.num_groups = plan.num_groups;
  table.words = index.worker_words;
  table.set_ids.assign(g * batch.digests.size(), 0);
  table.sets.assign(table.words, 0);  // set 0: nobody

  std::uint32_t metas[kMaxGroups];
  for (int gid = 0; gid < plan.num_groups; ++gid) {
    metas[gid] = Impl::make_meta(options.ns, gid, width);
  }
  // Residency set id -> table set id (0 when the tier mask leaves nobody).
  std::unordered_map<std::uint32_t, std::uint32_t> local;
  std::vector<std::uint64_t> folded(table.words);
  auto intern = [&](std::uint32_t set) -> std::uint32_t {
    if (set == Impl::kEmptySet) {
      return 0;
    }
    const auto it = local.find(set);
    if (it != local.end()) {
      return it->second;
    }
    std::fill(folded.begin(), folded.end(), 0);
    index.fold_workers(set, options.tier_mask, folded.data());
    std::uint32_t id = 0;
    if (std::any_of(folded.begin(), folded.end(), [](std::uint64_t x) { return x != 0; })) {
      id = static_cast<std::uint32_t>(table.num_sets());
      table.sets.insert(table.sets.end(), folded.begin(), folded.end());
    }
    local.emplace(set, id);
    return id;
  };

  const std::shared_lock lock(index.mutex);
  for (std::size_t r = 0; r < batch.num_requests(); ++r) {
    const std::int64_t off = batch.offsets[r];
    const std::int64_t n = batch.offsets[r + 1] - off;
    const BlockDigest* hashes = batch.digests.data() + off;
    std::uint32_t* block = table.set_ids.data() + static_cast<std::size_t>(off) * g;
    for (int k = 0; k < plan.num_spec_groups; ++k) {
      const detail::SpecGroupPlan& spec = plan.spec_groups[k];
      for (int m = 0; m < spec.num_members; ++m) {
        const int gid = plan.members[spec.first_member + m];
        std::uint32_t* row = block + static_cast<std::ptrdiff_t>(gid) * n;
        for (std::int64_t i = 0; i < n; ++i) {
          if (!detail::probed_by_finders(plan, k, i)) {
            continue;
          }
          const BlockDigest& key = hashes[i];
          if (width < BlockDigest::kSize && !fits_width(key, width)) {
            row[i] = kBadDigestSet;
            continue;
          }
          row[i] = intern(index.set_of(key, metas[gid]));
          ++table.index_reads;
        }
      }
    }
  }
  return table;
}

WorkerClasses build_worker_classes(const WorkerSetTable& table, span<const std::int64_t> offsets,
                                   std::uint64_t signature_mask) {
  WorkerClasses out;
  out.member_offsets.push_back(0);
  const int nw = table.num_workers;
  if (offsets.size() < 2 || nw <= 0) {
    return out;
  }
  const std::size_t num_requests = offsets.size() - 1;
  const auto g = static_cast<std::size_t>(table.num_groups);
  const std::size_t num_sets = table.num_sets();
  out.members.reserve(num_requests * static_cast<std::size_t>(nw));
  auto holds = [&](std::uint32_t set, int w) {
    return ((table.sets[set * table.words + static_cast<std::size_t>(w) / 64] >> (w % 64)) & 1U) !=
           0;
  };
  std::vector<std::uint32_t> stamp(num_sets, 0);  // request r + 1 once set seen in request r
  std::vector<std::uint32_t> distinct;
  std::vector<std::uint64_t> signature(static_cast<std::size_t>(nw));
  std::vector<std::int32_t> order(static_cast<std::size_t>(nw));
  std::vector<std::int32_t> reps;  // a signature bucket's classes, by representative
  std::vector<std::int32_t> rep_of(static_cast<std::size_t>(nw));  // a worker's representative
  std::vector<std::int64_t> slot(static_cast<std::size_t>(nw));    // a class's size, next slot
  for (std::size_t r = 0; r < num_requests; ++r) {
    // Set 0 (nobody) and kBadDigestSet read alike for every worker: they split no class.
    distinct.clear();
    const std::size_t begin = static_cast<std::size_t>(offsets[r]) * g;
    const std::size_t end = static_cast<std::size_t>(offsets[r + 1]) * g;
    for (std::size_t e = begin; e < end; ++e) {
      const std::uint32_t id = table.set_ids[e];
      if (id != 0 && id < num_sets && stamp[id] != r + 1) {
        stamp[id] = static_cast<std::uint32_t>(r + 1);
        distinct.push_back(id);
      }
    }
    std::fill(signature.begin(), signature.end(), 0);
    for (const std::uint32_t id : distinct) {
      const std::uint64_t word = mix64(id) & signature_mask;
      const std::uint64_t* bits = table.sets.data() + id * table.words;
      for (std::size_t k = 0; k < table.words; ++k) {
        for (std::uint64_t b = bits[k]; b != 0; b &= b - 1) {
          const std::size_t w = k * 64 + static_cast<std::size_t>(__builtin_ctzll(b));
          if (w < signature.size()) {
            signature[w] ^= word;
          }
        }
      }
    }
    for (int w = 0; w < nw; ++w) {
      order[static_cast<std::size_t>(w)] = w;
    }
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      const std::uint64_t sa = signature[static_cast<std::size_t>(a)];
      const std::uint64_t sb = signature[static_cast<std::size_t>(b)];
      return sa != sb ? sa < sb : a < b;
    });
    for (std::size_t i = 0; i < order.size();) {
      std::size_t j = i + 1;
      while (j < order.size() && signature[static_cast<std::size_t>(order[j])] ==
                                     signature[static_cast<std::size_t>(order[i])]) {
        ++j;
      }
      // Confirm: a worker joins a class only if its bit equals the representative's on every
      // distinct set, so a collision costs a split, never a wrong answer. A bucket runs in
      // worker order, so each representative is its class's lowest worker.
      reps.clear();
      for (std::size_t k = i; k < j; ++k) {
        const std::int32_t w = order[k];
        std::size_t c = 0;
        while (c < reps.size() &&
               !std::all_of(distinct.begin(), distinct.end(),
                            [&](std::uint32_t id) { return holds(id, w) == holds(id, reps[c]); })) {
          ++c;
        }
        if (c == reps.size()) {
          reps.push_back(w);
          out.collisions += c > 0 ? 1 : 0;
        }
        rep_of[static_cast<std::size_t>(w)] = reps[c];
      }
      i = j;
    }
    // Emit the classes by representative, members ascending (a counting sort: no allocation
    // per class).
    std::fill(slot.begin(), slot.end(), 0);
    for (const std::int32_t rep : rep_of) {
      ++slot[static_cast<std::size_t>(rep)];
    }
    auto at = static_cast<std::int64_t>(out.members.size());
    for (int w = 0; w < nw; ++w) {
      if (rep_of[static_cast<std::size_t>(w)] == w) {
        const std::int64_t size = slot[static_cast<std::size_t>(w)];
        slot[static_cast<std::size_t>(w)] = at;
        at += size;
        out.requests.push_back(static_cast<std::uint32_t>(r));
        out.member_offsets.push_back(at);
      }
    }
    out.members.resize(static_cast<std::size_t>(at));
    for (int w = 0; w < nw; ++w) {
      const auto rep = static_cast<std::size_t>(rep_of[static_cast<std::size_t>(w)]);
      out.members[static_cast<std::size_t>(slot[rep]++)] = w;
    }
  }
  return out;
}

std::uint32_t residency_key_meta(Namespace ns, int group_id, std::size_t digest_size) {
  return Impl::make_meta(ns, group_id, digest_size);
}

ResidencySnapshot snapshot_residency(const ResidencyIndex& residency, std::uint64_t seed) {
  const Impl& cpu = residency.impl();
  ResidencySnapshot out;
  out.seed = seed;
  const std::shared_lock lock(cpu.mutex);
  out.words = cpu.words;
  out.num_workers = cpu.num_workers;
  out.num_tiers = cpu.num_tiers;
  // Live keys: a key whose set was emptied in place (clear_worker) counts as absent.
  auto is_live = [&](const Impl::Slot& s) {
    return s.set != Impl::kFreeSlot && s.set != Impl::kTombstone && s.set != Impl::kEmptySet &&
           cpu.set_count[s.set] != 0;
  };
  out.live_keys =
      static_cast<std::size_t>(std::count_if(cpu.slots.begin(), cpu.slots.end(), is_live));
  std::size_t capacity = 16;
  while (capacity < 2 * out.live_keys) {
    capacity *= 2;
  }
  out.mask = capacity - 1;
  out.keys.assign(4 * capacity, 0);
  out.metas.assign(capacity, 0);
  out.slot_sets.assign(capacity, detail::kFreeResidencySlot);
  out.sets.assign(cpu.words, 0);  // set 0: nobody
  std::unordered_map<std::uint32_t, std::uint32_t> dense;
  for (const Impl::Slot& s : cpu.slots) {
    if (!is_live(s)) {
      continue;
    }
    const auto [it, fresh] =
        dense.emplace(s.set, static_cast<std::uint32_t>(out.sets.size() / cpu.words));
    if (fresh) {
      const std::uint64_t* bits = cpu.bits(s.set);
      out.sets.insert(out.sets.end(), bits, bits + cpu.words);
    }
    std::uint64_t i = detail::residency_slot_hash(s.d, s.meta, seed) & out.mask;
    while (out.slot_sets[i] != detail::kFreeResidencySlot) {
      i = (i + 1) & out.mask;
    }
    std::copy(s.d, s.d + 4, out.keys.begin() + static_cast<std::ptrdiff_t>(4 * i));
    out.metas[i] = s.meta;
    out.slot_sets[i] = it->second;
  }
  return out;
}

}  // namespace prefixhit::gpu
