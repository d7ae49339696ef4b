// Host probes: how the shared finders (detail/finders.hpp) see a store on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"
#include "prefixhit/existence.hpp"

namespace prefixhit::detail {

inline std::uint64_t low_bits(int count) {
  return count >= 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << count) - 1);
}

/// Answers a window from any ExistenceSource: a key is present for a spec group only if every
/// member group holds it. Small first windows keep the window scans (which usually stop after a
/// few blocks) cheap; doubling keeps long full-attention walks at one call per 64 blocks.
struct SourceProbe {
  static constexpr int kFirstWindow = 8;
  static constexpr int kMaxWindow = 64;

  const LookupPlan* plan;
  const ExistenceSource* source;
  const BlockDigest* hashes;

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    std::uint64_t bits = low_bits(count);
    const SpecGroupPlan& spec = plan->spec_groups[sg];
    for (int m = 0; m < spec.num_members && bits != 0; ++m) {
      bits &= source->probe(plan->members[spec.first_member + m], hashes, first, step, count);
    }
    return bits;
  }
};

/// The store that holds every key (load_mask).
struct AllPresentProbe {
  static constexpr int kFirstWindow = 64;
  static constexpr int kMaxWindow = 64;

  std::uint64_t window(int /*sg*/, std::int64_t /*first*/, std::int64_t /*step*/, int count) const {
    return low_bits(count);
  }
};

/// One lookup for run_planned_lookups: its request (hashes, n, max_length, apply_eagle) and
/// where its answer goes (hits: one GroupHit per spec group).
struct PlannedLookup {
  const BlockDigest* hashes;
  std::int64_t n;
  std::int64_t max_length;
  bool apply_eagle;
  GroupHit* hits;
  std::int64_t* hit_length;
  ErrorKind* error;
};

/// Runs find_longest_cache_hit for every lookup of `lookups`. For a store that
/// prefers_probe_many(), with its probe set fetched up front (issue 14): a first pass of the shared
/// finders records the windows they ask for, guessing every key present; the store answers all
/// recorded windows of all lookups in one probe_many call (BlockIndex::View overlaps their cache
/// misses); the next pass replays the finders on those answers and records only what they still
/// lack (after a miss, or for the fixed point's second reads). A pass that records nothing ran on
/// real answers only, so its result is exactly the one-window-at-a-time lookup's. After a few
/// passes any lookup still short of answers finishes with SourceProbe's direct probes. Other stores
/// are probed window by window (SourceProbe), as before.
void run_planned_lookups(const LookupPlan& plan, const ExistenceSource& store,
                         PlannedLookup* lookups, std::size_t count);

}  // namespace prefixhit::detail
