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
