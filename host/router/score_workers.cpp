// Per-worker exact scoring in one pass (issue 12).
//
// The shared finders (detail/finders.hpp) run unchanged, once per *class* of workers, through a
// Probe that answers from a per-request memo: (spec group, hash index) -> the bitset of workers
// holding that key in every member group. Each key is read from the residency index once per
// request.
//
// 1. When spec group 0 is full attention, one walk down its block chain with a running AND of
//    worker sets gives every worker's full-attention stop (where its bit first drops): workers
//    with the same stop form the first classes, so the long walk is read once, not per class.
//    A class then answers that chain from its stop, 64 blocks per window (window_limit), with
//    no memo or bit work per block; split halves keep the answer, so they never re-walk it.
// 2. Every other probed key is answered from the memo. The first key on which a class disagrees
//    stops its run (the probe answers what ends each scan soonest and the result is discarded)
//    and splits the class into "holds it" and "does not"; both halves re-run. Workers of a final
//    class saw identical existence bits on every probe, so the deterministic finders give each
//    the same result as its own single-store lookup.
// Cost: index reads grow with the distinct probed keys; bit work with the window probes of the
// final classes (short scans near each class's bound), not with probes x workers.
#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "host/parallel.hpp"
#include "host/probes.hpp"
#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {

namespace {

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
  }
};

struct ClassProbe {
  // One key per window (window_limit), except on spec group 0's walked chain: a class splits
  // only on keys its finder really reads (a wider window would read, and split on, keys past
  // where the scan stops). Index reads are cache misses, so each read prefetches the keys the
  // scan reaches next instead. The chain's known part is answered 64 blocks at a time.
  static constexpr int kFirstWindow = 64;
  static constexpr int kMaxWindow = 64;
  static constexpr int kPrefetch = 8;

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
  std::size_t memo(int sg, std::int64_t idx) const {
    Scratch& s = *scratch;
    std::uint64_t& tag = s.memo[entry(sg, idx)];
    if ((tag >> 32) == s.epoch) {
      return static_cast<std::size_t>(tag & 0xFFFFFFFFU) * words;
    }
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

  /// Bits a window may hold: the known chain up to its end, else one key.
  int window_limit(int sg, std::int64_t first, std::int64_t step) const {
    if (!split && on_known_chain(sg, first, step)) {
      return static_cast<int>(
          std::min<std::int64_t>(kMaxWindow, (chain.known - 1 - first) / step + 1));
    }
    return 1;
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
    if (!memoised(sg, first)) {
      prefetch_ahead(sg, first, step);
    }
    std::uint64_t bits = 0;
    for (int k = 0; k < count; ++k) {
      const std::size_t at = memo(sg, first + k * step);
      const std::uint64_t* m = scratch->pool.data() + at;
      bool all = true;
      bool none = true;
      for (std::size_t w = 0; w < words; ++w) {
        const std::uint64_t x = m[w] & cls[w];
        all = all && x == cls[w];
        none = none && x == 0;
      }
      if (all) {
        bits |= std::uint64_t{1} << k;
      } else if (!none) {
        split = true;
        split_at = at;
        return void_answer(step, count);
      }
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

}  // namespace

LookupResult RouterScores::result(std::size_t r, int w) const {
  if (r >= num_requests || w < 0 || w >= num_workers) {
    throw InvalidArgument("router scores: (request " + std::to_string(r) + ", worker " +
                          std::to_string(w) + ") is out of range (" + std::to_string(num_requests) +
                          " x " + std::to_string(num_workers) + ")");
  }
  const std::size_t row = r * static_cast<std::size_t>(num_workers) + static_cast<std::size_t>(w);
  LookupResult out;
  out.hit_length = hit_lengths[row];
  const auto g = static_cast<std::size_t>(num_groups);
  out.groups.resize(g);
  for (std::size_t gid = 0; gid < g; ++gid) {
    out.groups[gid] = GroupHit{num_blocks[row * g + gid], num_placeholders[row * g + gid]};
  }
  return out;
}

RouterScores score_workers(const Coordinator& coordinator, const LookupBatch& batch,
                           const ResidencyIndex& residency, const ScoreOptions& options) {
  coordinator.validate_batch(batch);
  if (options.ns > kMaxNamespace) {
    throw InvalidArgument("score_workers: namespace " + std::to_string(options.ns) + " is above " +
                          std::to_string(kMaxNamespace));
  }
  const detail::LookupPlan& plan = coordinator.plan();
  const Impl& index = residency.impl();
  const std::size_t r = batch.num_requests();
  const auto nw = static_cast<std::size_t>(index.num_workers);
  const auto g = static_cast<std::size_t>(plan.num_groups);
  const std::size_t words = index.worker_words;
  RouterScores out;
  out.num_requests = r;
  out.num_workers = index.num_workers;
  out.num_groups = plan.num_groups;
  out.hit_lengths.assign(r * nw, 0);
  out.num_blocks.assign(r * nw * g, 0);
  out.num_placeholders.assign(r * nw * g, 0);

  std::uint32_t metas[kMaxGroups];
  // A window scan usually stops after its window's blocks: prefetching further only wastes
  // misses. Other scans walk on: kPrefetch ahead.
  int scan_depth[kMaxGroups];
  for (int k = 0; k < plan.num_spec_groups; ++k) {
    const detail::SpecGroupPlan& spec = plan.spec_groups[k];
    scan_depth[k] = ClassProbe::kPrefetch;
    if (spec.finder == FinderKind::sliding_window) {
      scan_depth[k] = static_cast<int>(std::min<std::int64_t>(
          ClassProbe::kPrefetch, detail::ceil_div(spec.window - 1, spec.block_size) + 1));
    }
  }
  for (int gid = 0; gid < plan.num_groups; ++gid) {
    metas[gid] = Impl::make_meta(options.ns, gid, static_cast<std::size_t>(plan.digest_size));
  }
  std::vector<ErrorKind> errors(r, ErrorKind::ok);
  std::vector<std::int64_t> bad(r, -1);
  std::atomic<std::size_t> classes{0};
  std::atomic<std::size_t> reads{0};
  std::atomic<std::size_t> probes{0};
  const int threads = detail::choose_threads(batch.digests.size(), options.num_threads, 1 << 14);
  detail::parallel_for(
      r, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(r, 1))),
      [&](std::size_t begin, std::size_t end) {
        thread_local Scratch scratch;  // reused across calls: no per-call zeroing of the memo
        std::vector<std::uint64_t> cls(words);
        std::vector<std::uint64_t> all(words);
        GroupHit hits[kMaxGroups];
        std::size_t local_classes = 0;
        std::size_t local_reads = 0;
        std::size_t local_probes = 0;
        for (std::size_t i = begin; i < end; ++i) {
          try {
            const std::int64_t off = batch.offsets[i];
            const std::int64_t n = batch.offsets[i + 1] - off;
            const bool eagle = batch.apply_eagle.empty() || batch.apply_eagle[i] != 0;
            scratch.start(static_cast<std::size_t>(plan.num_spec_groups) *
                              static_cast<std::size_t>(std::max<std::int64_t>(n, 1)),
                          words);
            ClassProbe probe{&plan, &index,   batch.digests.data() + off,
                             n,     metas,    options.tier_mask,
                             words, &scratch, scan_depth};
            // The first class: every worker.
            std::fill(all.begin(), all.end(), ~std::uint64_t{0});
            if (nw % 64 != 0) {
              all[words - 1] = (std::uint64_t{1} << (nw % 64)) - 1;
            }
            const std::shared_lock lock(index.mutex);
            if (!probe.walk_chain(batch.max_lengths[i], eagle, all.data())) {
              probe.push_class(all.data(), ChainAnswer{});
            }
            while (!scratch.stack.empty() && errors[i] == ErrorKind::ok) {
              std::copy(scratch.stack.end() - static_cast<std::ptrdiff_t>(words),
                        scratch.stack.end(), cls.begin());
              scratch.stack.resize(scratch.stack.size() - words);
              const ChainAnswer chain = scratch.stack_chain.back();
              scratch.stack_chain.pop_back();
              probe.cls = cls.data();
              probe.chain = chain;
              probe.split = false;
              std::int64_t hit_length = 0;
              const ErrorKind err = detail::find_longest_cache_hit(plan, n, batch.max_lengths[i],
                                                                   eagle, probe, hits, hit_length);
              if (probe.split) {
                // Both halves are non-empty: the class disagreed on this key.
                for (int half = 0; half < 2; ++half) {
                  for (std::size_t w = 0; w < words; ++w) {
                    const std::uint64_t m = scratch.pool[probe.split_at + w];
                    scratch.stack.push_back(cls[w] & (half == 0 ? m : ~m));
                  }
                  scratch.stack_chain.push_back(chain);
                }
                continue;
              }
              if (err != ErrorKind::ok || probe.bad_digest >= 0) {
                errors[i] = err != ErrorKind::ok ? err : ErrorKind::invalid_argument;
                bad[i] = probe.bad_digest;
                break;
              }
              ++local_classes;
              for (std::size_t w = 0; w < words; ++w) {
                for (std::uint64_t x = cls[w]; x != 0; x &= x - 1) {
                  const std::size_t worker = w * 64 + static_cast<std::size_t>(__builtin_ctzll(x));
                  const std::size_t row = i * nw + worker;
                  out.hit_lengths[row] = hit_length;
                  for (std::size_t gid = 0; gid < g; ++gid) {
                    const GroupHit& hit = hits[plan.spec_group_of[gid]];
                    out.num_blocks[row * g + gid] = hit.num_blocks;
                    out.num_placeholders[row * g + gid] = hit.num_placeholders;
                  }
                }
              }
            }
            local_reads += probe.reads;
            local_probes += probe.probes;
          } catch (const std::bad_alloc&) {
            errors[i] = ErrorKind::capacity_exceeded;
          }
        }
        classes += local_classes;
        reads += local_reads;
        probes += local_probes;
      });
  out.classes = classes.load();
  out.index_reads = reads.load();
  out.probes = probes.load();
  const auto failed =
      std::find_if(errors.begin(), errors.end(), [](ErrorKind e) { return e != ErrorKind::ok; });
  if (failed != errors.end()) {
    const auto i = static_cast<std::size_t>(failed - errors.begin());
    std::string what = to_string(*failed);
    if (bad[i] >= 0) {
      const std::string width = std::to_string(plan.digest_size);
      what = "hashes[" + std::to_string(bad[i]) + "] is not a " + width +
             "-byte digest (the coordinator's digest_size): bytes past " + width + " must be zero";
    }
    throw_error(*failed, "score_workers: request " + std::to_string(i) + ": " + what);
  }
  return out;
}

std::vector<std::int32_t> top_k_workers(const RouterScores& scores, int k,
                                        span<const double> load) {
  if (k < 1) {
    throw InvalidArgument("top_k_workers: k must be at least 1, got " + std::to_string(k));
  }
  const auto nw = static_cast<std::size_t>(scores.num_workers);
  if (!load.empty() && load.size() != nw) {
    throw InvalidArgument("top_k_workers: load has " + std::to_string(load.size()) +
                          " entries but there are " + std::to_string(nw) + " workers");
  }
  const auto kk = static_cast<std::size_t>(k);
  std::vector<std::int32_t> out(scores.num_requests * kk, -1);
  std::vector<std::int32_t> order(nw);
  for (std::size_t r = 0; r < scores.num_requests; ++r) {
    const std::int64_t* hit = scores.hit_lengths.data() + r * nw;
    std::iota(order.begin(), order.end(), 0);
    const auto better = [&](std::int32_t a, std::int32_t b) {
      if (hit[a] != hit[b]) {
        return hit[a] > hit[b];
      }
      if (!load.empty() && load[static_cast<std::size_t>(a)] != load[static_cast<std::size_t>(b)]) {
        return load[static_cast<std::size_t>(a)] < load[static_cast<std::size_t>(b)];
      }
      return a < b;
    };
    const std::size_t take = std::min(kk, nw);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      better);
    std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take),
              out.begin() + static_cast<std::ptrdiff_t>(r * kk));
  }
  return out;
}

}  // namespace prefixhit
