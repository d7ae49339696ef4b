// The device residency index's host half (router_gpu.hpp): a snapshot of a CPU ResidencyIndex in
// the device table's layout (detail/residency_table.hpp).
#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/residency_table.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::gpu {

using Impl = ResidencyIndex::Impl;

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
