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
//    and splits the class into "holds it" and "does not"; both halves re-run, answered up to 32
//    memoised keys per finder refill where the class agrees (class_probe.hpp). Workers of a final
//    class saw identical existence bits on every probe, so the deterministic finders give each
//    the same result as its own single-store lookup.
// Cost: index reads grow with the distinct probed keys; bit work with the window probes of the
// final classes (short scans near each class's bound), not with probes x workers.
#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "host/checks.hpp"
#include "host/parallel.hpp"
#include "host/router/class_probe.hpp"
#include "host/router/residency_impl.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit {

using router_detail::ChainAnswer;
using router_detail::ClassProbe;
using router_detail::Scratch;
using Impl = ResidencyIndex::Impl;

RouterScores score_workers(const Coordinator& coordinator, const LookupBatch& batch,
                           const ResidencyIndex& residency, const ScoreOptions& options) {
  coordinator.validate_batch(batch);
  detail::check_namespace(options.ns, "score_workers");
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
  int scan_depth[kMaxGroups];
  detail::scan_prefetch_depths(plan, ClassProbe::kPrefetch, scan_depth);
  for (int gid = 0; gid < plan.num_groups; ++gid) {
    metas[gid] = Impl::make_meta(options.ns, gid, static_cast<std::size_t>(plan.digest_size));
  }
  std::vector<ErrorKind> errors(r, ErrorKind::ok);
  std::vector<std::int64_t> bad(r, -1);
  std::atomic<std::size_t> classes{0};
  std::atomic<std::size_t> runs{0};
  std::atomic<std::size_t> reads{0};
  std::atomic<std::size_t> probes{0};
  const int threads = detail::choose_threads(batch.digests.size(), options.num_threads, 1 << 14);
  detail::parallel_for(
      r, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(r, 1))),
      [&](std::size_t begin, std::size_t end) {
        // Reused across requests and calls: nothing is allocated per request once it has grown,
        // and the memo is never zeroed (epoch-tagged).
        thread_local Scratch scratch;
        GroupHit hits[kMaxGroups];
        std::size_t local_classes = 0;
        std::size_t local_runs = 0;
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
            std::vector<std::uint64_t>& cls = scratch.cls;
            std::vector<std::uint64_t>& all = scratch.all;
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
              ++local_runs;
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
              // The class's row once, then copied to each member (the output arrays may alias
              // nothing the loop reads, so the copies are plain stores).
              std::int64_t blocks[kMaxGroups];
              std::int64_t placeholders[kMaxGroups];
              for (std::size_t gid = 0; gid < g; ++gid) {
                const GroupHit& hit = hits[plan.spec_group_of[gid]];
                blocks[gid] = hit.num_blocks;
                placeholders[gid] = hit.num_placeholders;
              }
              std::int64_t* const out_hit = out.hit_lengths.data() + i * nw;
              std::int64_t* const out_blocks = out.num_blocks.data() + i * nw * g;
              std::int64_t* const out_placeholders = out.num_placeholders.data() + i * nw * g;
              for (std::size_t w = 0; w < words; ++w) {
                for (std::uint64_t x = cls[w]; x != 0; x &= x - 1) {
                  const std::size_t worker = w * 64 + static_cast<std::size_t>(__builtin_ctzll(x));
                  out_hit[worker] = hit_length;
                  std::copy(blocks, blocks + g, out_blocks + worker * g);
                  std::copy(placeholders, placeholders + g, out_placeholders + worker * g);
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
        runs += local_runs;
        reads += local_reads;
        probes += local_probes;
      });
  out.classes = classes.load();
  out.runs = runs.load();
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

}  // namespace prefixhit
