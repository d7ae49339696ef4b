// Host probes: how the shared finders (detail/finders.hpp) see a store on the CPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/existence.hpp"

namespace prefixhit::detail {

inline std::uint64_t low_bits(int count) {
  return count >= 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << count) - 1);
}

/// Throws InvalidArgument unless the store holds keys of the coordinator's digest width.
inline void check_store_width(const ExistenceSource& store, std::size_t digest_size) {
  if (store.digest_size() != digest_size) {
    throw InvalidArgument("the store holds " + std::to_string(store.digest_size()) +
                          "-byte digests but the coordinator's digest_size is " +
                          std::to_string(digest_size));
  }
}

/// Answers a window from any ExistenceSource: a key is present for a spec group only if every
/// member group holds it. Small first windows keep the window scans (which usually stop after a
/// few blocks) cheap; doubling keeps long full-attention walks at one call per 64 blocks.
///
/// Narrow digests (plan->digest_size < 32): each hash a window reads must have zero bytes past
/// the width. Only the probed hashes are checked (a lookup reads a few hundred of tens of
/// thousands); the first bad index goes to *bad_digest, the window answers "absent" and the
/// caller throws after the finder returns (throw_if_bad_digest).
struct SourceProbe {
  static constexpr int kFirstWindow = 8;
  static constexpr int kMaxWindow = 64;

  const LookupPlan* plan;
  const ExistenceSource* source;
  const BlockDigest* hashes;
  std::int64_t* bad_digest = nullptr;  ///< -1, or the first probed hash that does not fit

  bool hashes_fit(std::int64_t first, std::int64_t step, int count) const {
    const auto first_word = static_cast<std::size_t>(plan->digest_size) / 8;
    for (int k = 0; k < count; ++k) {
      std::uint64_t words[4];
      std::memcpy(words, hashes + first + k * step, sizeof(words));
      std::uint64_t tail = 0;
      for (std::size_t w = first_word; w < 4; ++w) {
        tail |= words[w];
      }
      if (tail != 0) {
        const std::int64_t index = first + k * step;
        if (*bad_digest < 0 || index < *bad_digest) {
          *bad_digest = index;
        }
        return false;
      }
    }
    return true;
  }

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    if (plan->digest_size < static_cast<std::int32_t>(BlockDigest::kSize) &&
        bad_digest != nullptr && !hashes_fit(first, step, count)) {
      return 0;
    }
    std::uint64_t bits = low_bits(count);
    const SpecGroupPlan& spec = plan->spec_groups[sg];
    for (int m = 0; m < spec.num_members && bits != 0; ++m) {
      bits &= source->probe(plan->members[spec.first_member + m], hashes, first, step, count);
    }
    return bits;
  }
};

inline void throw_if_bad_digest(const SourceProbe& probe, const LookupPlan& plan) {
  if (probe.bad_digest != nullptr && *probe.bad_digest >= 0) {
    const std::string width = std::to_string(plan.digest_size);
    throw InvalidArgument("hashes[" + std::to_string(*probe.bad_digest) + "] is not a " + width +
                          "-byte digest (the coordinator's digest_size): bytes past " + width +
                          " must be zero");
  }
}
template <class Probe>
void throw_if_bad_digest(const Probe& /*probe*/, const LookupPlan& /*plan*/) {}

/// The store that holds every key (load_mask).
struct AllPresentProbe {
  static constexpr int kFirstWindow = 64;
  static constexpr int kMaxWindow = 64;

  std::uint64_t window(int /*sg*/, std::int64_t /*first*/, std::int64_t /*step*/, int count) const {
    return low_bits(count);
  }
};

/// Per spec group of `plan`, how many keys ahead a scan prefetches, at most `limit` (into out[0 ..
/// num_spec_groups - 1]): a sliding-window scan usually stops within its window's blocks, so
/// prefetching further only wastes misses; other scans walk on. The router's scorers use it.
inline void scan_prefetch_depths(const LookupPlan& plan, int limit, int* out) {
  for (int k = 0; k < plan.num_spec_groups; ++k) {
    const SpecGroupPlan& spec = plan.spec_groups[k];
    out[k] = spec.finder == FinderKind::sliding_window
                 ? static_cast<int>(std::min<std::int64_t>(
                       limit, ceil_div(spec.window - 1, spec.block_size) + 1))
                 : limit;
  }
}

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
  /// Narrow digests: receives the first probed hash with nonzero bytes past the width (see
  /// SourceProbe), and the lookup's error becomes invalid_argument. May be null.
  std::int64_t* bad_digest = nullptr;
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

/// The table size (bytes of tags, meta words and digests) from which BlockIndex::View prefers
/// planned lookups: below it the table answers from cache and window-by-window probes cost
/// less CPU. Tests set 0 to send every lookup through the planned path.
inline constexpr std::uint64_t kPlannedLookupMinBytes = std::uint64_t{64} << 20;
std::uint64_t planned_lookup_min_bytes() noexcept;
void set_planned_lookup_min_bytes(std::uint64_t bytes) noexcept;

}  // namespace prefixhit::detail
