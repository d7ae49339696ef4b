// Host probes: how the shared finders (detail/finders.hpp) see a store on the CPU.
#pragma once

#include <cstdint>

#include "prefixhit/detail/lookup_plan.hpp"
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

}  // namespace prefixhit::detail
