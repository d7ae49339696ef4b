// The existence functor of GPU router scoring (router_gpu.hpp): one worker's view of a batch's
// worker-set table, and the per-(request, worker) and per-(request, class) steps that run the
// shared finders through it.
// Host-and-device, so the emulated build and the kernel run the same code.
#pragma once

#include <cstdint>

#include "prefixhit/detail/finders.hpp"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/error_kind.hpp"

namespace prefixhit::detail {

/// Whether a finder of spec group `sg` can read hash `index`: its block keys (hash (j+1)*s - 1
/// for blocks of s hashes), or every hash where a fine-grained (partial) probe walks hash by
/// hash. The device index's table fills these entries (gpu::TableFill::every_probe likewise);
/// the host's reached table only those some worker's lookup reads.
PREFIXHIT_HD PREFIXHIT_FORCEINLINE bool probed_by_finders(const LookupPlan& plan, int sg,
                                                          std::int64_t index) {
  const SpecGroupPlan& spec = plan.spec_groups[sg];
  const bool fine = plan.alignment < spec.block_size &&
                    (spec.finder == FinderKind::full_attention || spec.finder == FinderKind::mamba);
  return fine || (index + 1) % (spec.block_size / plan.hash_block_size) == 0;
}

/// A Probe (finders.hpp) for worker `worker` of one request: key (g, i) is present when bit
/// `worker` of set row[g*n + i] is set. One key per window, as the CPU scorer's ClassProbe: a
/// hash of the wrong width fails the lookup only if the finder really reads it, and the host
/// fills only the entries the lookups read (gpu::kUnreadSet elsewhere, a malformed entry here),
/// so the probe must not read ahead.
struct WorkerSetProbe {
  static constexpr int kFirstWindow = 1;
  static constexpr int kMaxWindow = 1;
  static constexpr std::uint32_t kBadDigest = 0xFFFFFFFFU;  ///< gpu::kBadDigestSet

  const LookupPlan* plan;
  const std::uint32_t* row;  ///< the request's block of the table: set_ids + G*offsets[r]
  std::int64_t n;            ///< the request's number of hashes
  const std::uint64_t* sets;
  std::int64_t num_sets;
  std::int64_t words;  ///< 64-bit words per set
  std::int64_t worker;
  /// Sets have `tiers` columns per worker (column worker*tiers + t); the worker holds the key
  /// when a column of a tier in `tier_mask` is set. Host-built tables are folded: 1 and 1.
  std::int32_t tiers;
  std::uint32_t tier_mask;
  mutable bool bad_digest = false;  ///< a probed key's hash is not of the digest width
  mutable bool bad_set = false;     ///< a probed entry names no set (a malformed table)

  PREFIXHIT_HD bool contains(int group_id, std::int64_t index) const {
    if (index < 0 || index >= n) {
      return false;  // never asked by the finders; keeps a malformed batch inside its block
    }
    const std::uint32_t id = row[group_id * n + index];
    if (id == kBadDigest) {
      bad_digest = true;
      return false;
    }
    if (static_cast<std::int64_t>(id) >= num_sets) {
      bad_set = true;
      return false;
    }
    const std::uint64_t* set = sets + static_cast<std::int64_t>(id) * words;
    for (int t = 0; t < tiers; ++t) {
      const std::int64_t column = worker * tiers + t;
      if (((tier_mask >> t) & 1U) != 0 && ((set[column / 64] >> (column % 64)) & 1U) != 0) {
        return true;
      }
    }
    return false;
  }

  PREFIXHIT_HD std::uint64_t window(int sg, std::int64_t first, std::int64_t step,
                                    int count) const {
    const SpecGroupPlan& spec = plan->spec_groups[sg];
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const std::int64_t index = first + k * step;
      bool present = true;
      for (int m = 0; m < spec.num_members; ++m) {
        present = contains(plan->members[spec.first_member + m], index) && present;
      }
      bits |= static_cast<std::uint64_t>(present) << k;
    }
    return bits;
  }
};

/// Where the scores go: RouterScores' layout, row = r * W + w.
struct WorkerScoreOutputs {
  std::int64_t* hit_lengths;
  std::int64_t* num_blocks;
  std::int64_t* num_placeholders;
  ErrorKind* status;
};

/// The lookup of `probe.worker` for one request, written to rows row_base + members[k] for k in
/// [0, count) (members outside [0, num_workers) are skipped): a worker class shares one run of
/// the finders. A failed lookup (finder error, a probed hash of the wrong width, a malformed
/// table) writes its error and zeros, the "no partial result" rule of SEMANTICS.md 9.3.
PREFIXHIT_HD inline ErrorKind score_worker_rows(const LookupPlan& plan, std::int64_t max_length,
                                                bool apply_eagle, const WorkerSetProbe& probe,
                                                std::int64_t row_base, const std::int32_t* members,
                                                std::int64_t count, std::int64_t num_workers,
                                                const WorkerScoreOutputs& out) {
  GroupHit hits[kMaxGroups];
  std::int64_t hit_length = 0;
  ErrorKind err =
      find_longest_cache_hit(plan, probe.n, max_length, apply_eagle, probe, hits, hit_length);
  if (err == ErrorKind::ok && (probe.bad_digest || probe.bad_set)) {
    err = ErrorKind::invalid_argument;
  }
  const bool ok = err == ErrorKind::ok;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t w = members == nullptr ? probe.worker : members[k];
    if (w < 0 || w >= num_workers) {
      continue;
    }
    const std::int64_t row = row_base + w;
    out.hit_lengths[row] = ok ? hit_length : 0;
    out.status[row] = err;
    const std::int64_t base = row * plan.num_groups;
    for (int g = 0; g < plan.num_groups; ++g) {
      const GroupHit& hit = hits[plan.spec_group_of[g]];
      out.num_blocks[base + g] = ok ? hit.num_blocks : 0;
      out.num_placeholders[base + g] = ok ? hit.num_placeholders : 0;
    }
  }
  return err;
}

/// Worker `probe.worker`'s lookup of one request, written to row `row` of the outputs.
PREFIXHIT_HD inline ErrorKind score_worker(const LookupPlan& plan, std::int64_t max_length,
                                           bool apply_eagle, const WorkerSetProbe& probe,
                                           std::int64_t row, const WorkerScoreOutputs& out) {
  // One row, as a class of one whose row base puts probe.worker at `row`.
  return score_worker_rows(plan, max_length, apply_eagle, probe, row - probe.worker, nullptr, 1,
                           probe.worker + 1, out);
}

}  // namespace prefixhit::detail
