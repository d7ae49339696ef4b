// The scorer's probe (issue 12): one class of workers runs the shared finders through
// ClassProbe, which answers each key from a per-request memo of worker sets read once from the
// residency index, and splits the class on the first key its members disagree on. Also the
// one full-attention chain walk that forms the first classes. Used by score_workers.cpp only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "host/probes.hpp"
#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit::router_detail {

using Impl = ResidencyIndex::Impl;

/// What a class knows of spec group 0's full-attention chain (hash indices s-1, 2s-1, ...):
/// a key at hash index i < known is held by every member iff i < stop.
struct ChainAnswer {
  std::int64_t stop = 0;
  std::int64_t known = 0;
};

/// Per-thread storage, reused across requests (the memo is epoch-tagged, so never cleared).
struct Scratch {
  std::vector<std::uint64_t> memo;  ///< [sg * n + index]: (epoch << 32) | pool entry
  std::uint32_t epoch = 0;
  std::vector<std::uint64_t> pool;  ///< worker sets read, `words` each
  std::size_t pool_used = 0;
  std::vector<std::uint64_t> stack;  ///< pending classes, `words` each
  std::vector<ChainAnswer> stack_chain;
  std::vector<std::uint64_t> tmp;
  std::vector<std::uint64_t> run;  ///< the chain walk's running AND
  std::vector<std::uint64_t> cls;  ///< the class being run
  std::vector<std::uint64_t> all;  ///< every worker

  void start(std::size_t entries, std::size_t words) {
    if (memo.size() < entries) {
      memo.assign(entries, 0);
      epoch = 0;
    }
    if (++epoch == 0) {
      std::fill(memo.begin(), memo.end(), 0);
      epoch = 1;
    }
    pool_used = 0;
    stack.clear();
    stack_chain.clear();
    tmp.assign(words, 0);
    run.assign(words, 0);
    cls.assign(words, 0);
    all.assign(words, 0);
  }
};

struct ClassProbe {
  // One key per window (window_limit) where a key must be read: a class splits only on keys
  // its finder really reads (a wider window would read, and split on, keys past where the scan
  // stops). Index reads are cache misses, so each read prefetches the keys the scan reaches
  // next instead. The chain's known part is answered 64 blocks at a time, and keys already in
  // the memo (read by this class's parent, or by another class) up to kMemoWindow at a time,
  // up to the first the class disagrees on: a re-run after a split costs few finder refills.
  static constexpr int kFirstWindow = 64;
  static constexpr int kMaxWindow = 64;
  static constexpr int kPrefetch = 8;
  static constexpr int kMemoWindow = 32;

  const detail::LookupPlan* plan;
  const Impl* index;
  const BlockDigest* hashes;
  std::int64_t n;
  const std::uint32_t* metas;  ///< per group id
  std::uint32_t tier_mask;
  std::size_t words;
  Scratch* scratch;
  const int* scan_depth;        ///< per spec group: keys a scan prefetches ahead
  std::int64_t chain_step = 0;  ///< spec group 0's hashes per block when its chain was walked
  const std::uint64_t* cls = nullptr;
  ChainAnswer chain{};
  mutable bool split = false;
  mutable std::size_t split_at = 0;  ///< pool offset of the disagreeing key's worker set
  mutable std::int64_t bad_digest = -1;
  mutable std::size_t reads = 0;   ///< keys read from the index (memo misses)
  mutable std::size_t probes = 0;  ///< keys answered to the finders
  mutable int pf_sg = -1;          ///< the scan prefetch_ahead last served, and where it is
  mutable std::int64_t pf_step = 0;
  mutable std::int64_t pf_next = 0;
  mutable int pre_sg = -1;  ///< the window window_limit answered from the memo, if pre_count > 0
  mutable std::int64_t pre_first = 0;
  mutable std::int64_t pre_step = 0;
  mutable int pre_count = 0;
  mutable std::uint64_t pre_bits = 0;

  bool fits(const BlockDigest& d) const {
    for (auto b = static_cast<std::size_t>(plan->digest_size); b < BlockDigest::kSize; ++b) {
      if (d.bytes[b] != 0) {
        return false;
      }
    }
    return true;
  }

  std::size_t entry(int sg, std::int64_t idx) const {
    return static_cast<std::size_t>(sg) * static_cast<std::size_t>(n) +
           static_cast<std::size_t>(idx);
  }
  bool memoised(int sg, std::int64_t idx) const {
    return (scratch->memo[entry(sg, idx)] >> 32) == scratch->epoch;
  }

  /// Starts loading the digest of hashes[idx] (stage 1: the request's hashes are read sparsely,
  /// so they miss too; the slot prefetch of stage 2 needs the digest to hash it).
  void prefetch_digest(std::int64_t idx) const { __builtin_prefetch(hashes + idx); }

  /// Prefetches the slots of the next kPrefetch keys of a scan (and the digests of the
  /// kPrefetch after them), issuing only what the same scan has not prefetched yet.
  void prefetch_ahead(int sg, std::int64_t first, std::int64_t step) const {
    int from = 1;
    if (sg == pf_sg && step == pf_step && step != 0) {
      const std::int64_t q = (pf_next - first) / step;
      if (q >= 1 && q <= scan_depth[sg] + 1 && first + q * step == pf_next) {
        from = static_cast<int>(q);
      }
    }
    const int depth = scan_depth[sg];
    for (int k = from; k <= depth; ++k) {
      const std::int64_t idx = first + k * step;
      if (idx < 0 || idx >= n) {
        break;
      }
      if (!memoised(sg, idx)) {
        prefetch(sg, idx);
      }
      const std::int64_t far = idx + depth * step;
      if (far >= 0 && far < n) {
        prefetch_digest(far);
      }
    }
    pf_sg = sg;
    pf_step = step;
    pf_next = first + (depth + 1) * step;
  }

  void prefetch(int sg, std::int64_t idx) const {
    const detail::SpecGroupPlan& spec = plan->spec_groups[sg];
    for (int m = 0; m < spec.num_members; ++m) {
      index->prefetch(hashes[idx], metas[plan->members[spec.first_member + m]]);
    }
  }

  /// Pool offset of the worker set of (sg, idx), reading the index on the first ask.
  /// Inlined: most asks hit the memo (split halves re-run over the keys their parent read).
  std::size_t memo(int sg, std::int64_t idx) const {
    const std::uint64_t tag = scratch->memo[entry(sg, idx)];
    if ((tag >> 32) == scratch->epoch) {
      return static_cast<std::size_t>(tag & 0xFFFFFFFFU) * words;
    }
    return read(sg, idx);
  }

  /// The memo miss: reads the key's worker set from the index into the pool (out of line).
  __attribute__((noinline)) std::size_t read(int sg, std::int64_t idx) const {
    Scratch& s = *scratch;
    std::uint64_t& tag = s.memo[entry(sg, idx)];
    if (s.pool.size() < s.pool_used + words) {
      s.pool.resize(std::max(s.pool.size() * 2, s.pool_used + words));
    }
    const std::size_t at = s.pool_used;
    s.pool_used += words;
    std::uint64_t* out = s.pool.data() + at;
    const BlockDigest& key = hashes[idx];
    ++reads;
    // words >= 1: a residency index has at least one worker (checked when it is built).
    tag = (std::uint64_t{s.epoch} << 32) | (at / words);  // NOLINT(clang-analyzer-core.DivideZero)
    if (plan->digest_size < static_cast<std::int32_t>(BlockDigest::kSize) && !fits(key)) {
      if (bad_digest < 0 || idx < bad_digest) {
        bad_digest = idx;
      }
      std::fill(out, out + words, 0);
    } else {
      const detail::SpecGroupPlan& spec = plan->spec_groups[sg];
      for (int m = 0; m < spec.num_members; ++m) {
        const int gid = plan->members[spec.first_member + m];
        const std::uint32_t set = index->set_of(key, metas[gid]);
        std::uint64_t* dst = m == 0 ? out : s.tmp.data();
        std::fill(dst, dst + words, 0);
        index->fold_workers(set, tier_mask, dst);
        if (m > 0) {
          for (std::size_t w = 0; w < words; ++w) {
            out[w] &= dst[w];
          }
        }
      }
    }
    return at;
  }

  /// Once the class has split, the run is void: answer what ends each scan soonest (a forward
  /// walk stops at an absent key, a backward scan at a present run).
  static std::uint64_t void_answer(std::int64_t step, int count) {
    return step < 0 ? detail::low_bits(count) : 0;
  }

  /// Whether hash index `i` ends a block of spec group 0 (a power-of-two step needs no division).
  bool on_chain(std::int64_t i) const {
    return (chain_step & (chain_step - 1)) == 0 ? ((i + 1) & (chain_step - 1)) == 0
                                                : (i + 1) % chain_step == 0;
  }

  /// Whether (sg, first, step) walks spec group 0's chain inside the part this class knows.
  bool on_known_chain(int sg, std::int64_t first, std::int64_t step) const {
    return sg == 0 && step == chain_step && step > 0 && on_chain(first) && first < chain.known;
  }

  /// Whether the class agrees on the worker set at pool offset `at`; `all`: every member holds it.
  bool agrees(std::size_t at, bool& all) const {
    const std::uint64_t* m = scratch->pool.data() + at;
    bool none = true;
    all = true;
    for (std::size_t w = 0; w < words; ++w) {
      const std::uint64_t x = m[w] & cls[w];
      all = all && x == cls[w];
      none = none && x == 0;
    }
    return all || none;
  }

  /// Bits a window may hold: the known chain up to its end; else the keys from `first` on that
  /// are already in the memo and that the class agrees on (answered at once: no read, and no
  /// split on a key the finder may not ask for), at most kMemoWindow; else one key.
  int window_limit(int sg, std::int64_t first, std::int64_t step) const {
    if (split) {
      return 1;
    }
    if (on_known_chain(sg, first, step)) {
      return static_cast<int>(
          std::min<std::int64_t>(kMaxWindow, (chain.known - 1 - first) / step + 1));
    }
    std::uint64_t bits = 0;
    int k = 0;
    for (; k < kMemoWindow; ++k) {
      const std::int64_t idx = first + k * step;
      if (idx < 0 || idx >= n) {
        break;
      }
      const std::uint64_t tag = scratch->memo[entry(sg, idx)];
      bool all = false;
      if ((tag >> 32) != scratch->epoch ||
          !agrees(static_cast<std::size_t>(tag & 0xFFFFFFFFU) * words, all)) {
        break;
      }
      bits |= all ? std::uint64_t{1} << k : 0;
    }
    if (k == 0) {
      return 1;
    }
    pre_sg = sg;
    pre_first = first;
    pre_step = step;
    pre_count = k;
    pre_bits = bits;
    return k;
  }

  std::uint64_t window(int sg, std::int64_t first, std::int64_t step, int count) const {
    if (split) {
      return void_answer(step, count);
    }
    probes += static_cast<std::size_t>(count);
    // Spec group 0's full-attention walk (forward, one block per step, on block ends): known
    // from the chain walk, as far as it went.
    if (on_known_chain(sg, first, step) && first + (count - 1) * step < chain.known) {
      // Blocks before the class's stop are held by every member, the stop by none.
      const std::int64_t held = first < chain.stop ? (chain.stop - first + step - 1) / step : 0;
      return detail::low_bits(static_cast<int>(std::min<std::int64_t>(held, count)));
    }
    if (pre_count > 0) {
      // Answered by window_limit, just before (the cursor asks at most what it allowed).
      const bool same =
          sg == pre_sg && first == pre_first && step == pre_step && count <= pre_count;
      pre_count = 0;
      if (same) {
        return pre_bits & detail::low_bits(count);
      }
    }
    if (!memoised(sg, first)) {
      prefetch_ahead(sg, first, step);
    }
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const std::size_t at = memo(sg, first + k * step);
      bool all = false;
      if (!agrees(at, all)) {
        split = true;
        split_at = at;
        return void_answer(step, count);
      }
      bits |= all ? std::uint64_t{1} << k : 0;
    }
    return bits;
  }

  void push_class(const std::uint64_t* bits, ChainAnswer answer) const {
    scratch->stack.insert(scratch->stack.end(), bits, bits + words);
    scratch->stack_chain.push_back(answer);
  }

  /// Walks spec group 0's full-attention chain once with a running AND over `all` workers and
  /// pushes one class per distinct stop (the block where the workers' bits drop). Reads only
  /// blocks some worker's own walk reads: up to the bound of spec group 0's first finder call.
  /// Returns false (nothing pushed) when spec group 0 is not full attention.
  bool walk_chain(std::int64_t max_length, bool apply_eagle, const std::uint64_t* all) {
    if (plan->num_spec_groups < 1 || plan->spec_groups[0].finder != FinderKind::full_attention ||
        !detail::max_length_in_range(n, max_length)) {
      return false;
    }
    const detail::SpecGroupPlan& spec = plan->spec_groups[0];
    const bool drop = apply_eagle && spec.use_eagle;
    const std::int64_t bound =
        plan->num_spec_groups == 1
            ? max_length
            : detail::fixed_point_bound(*plan, spec, n, max_length, max_length, drop);
    const std::int64_t s = spec.block_size / plan->hash_block_size;
    const std::int64_t blocks = detail::full_attention_max_blocks(*plan, 0, n, bound);
    chain_step = s;
    std::uint64_t* run = scratch->run.data();
    std::copy(all, all + words, run);
    std::uint64_t* dropped = scratch->tmp.data();
    // Two-stage software pipeline: digests kDigestAhead blocks ahead, slots kAhead ahead.
    constexpr std::int64_t kAhead = 12;
    constexpr std::int64_t kDigestAhead = 32;
    for (std::int64_t j = 0; j < std::min(blocks, kDigestAhead); ++j) {
      prefetch_digest(j * s + s - 1);
    }
    for (std::int64_t j = 0; j < std::min(blocks, kAhead); ++j) {
      prefetch(0, j * s + s - 1);
    }
    for (std::int64_t j = 0; j < blocks; ++j) {
      if (j + kDigestAhead < blocks) {
        prefetch_digest((j + kDigestAhead) * s + s - 1);
      }
      if (j + kAhead < blocks) {
        prefetch(0, (j + kAhead) * s + s - 1);
      }
      const std::size_t at = memo(0, j * s + s - 1);  // may grow the pool: read it after
      const std::uint64_t* held = scratch->pool.data() + at;
      bool any_dropped = false;
      bool any_left = false;
      for (std::size_t w = 0; w < words; ++w) {
        dropped[w] = run[w] & ~held[w];
        run[w] &= held[w];
        any_dropped = any_dropped || dropped[w] != 0;
        any_left = any_left || run[w] != 0;
      }
      if (any_dropped) {
        push_class(dropped, ChainAnswer{j * s, (j + 1) * s});
      }
      if (!any_left) {
        return true;
      }
    }
    push_class(run, ChainAnswer{blocks * s, blocks * s});
    return true;
  }
};

}  // namespace prefixhit::router_detail
