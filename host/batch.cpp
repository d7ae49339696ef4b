// Batch lookups, key plans and plan answers.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "host/checks.hpp"
#include "host/nvtx.hpp"
#include "host/parallel.hpp"
#include "host/probes.hpp"
#include "host/worker_pool.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/detail/finders.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit {

using detail::floor_div;

void Coordinator::validate_batch(const LookupBatch& batch) const {
  if (batch.offsets.empty()) {
    throw InvalidArgument("batch offsets must have num_requests + 1 entries, got none");
  }
  const std::size_t r = batch.num_requests();
  if (batch.offsets[0] != 0) {
    throw InvalidArgument("batch offsets[0] must be 0, got " + std::to_string(batch.offsets[0]));
  }
  for (std::size_t i = 0; i < r; ++i) {
    if (batch.offsets[i + 1] < batch.offsets[i]) {
      throw InvalidArgument("batch offsets must not decrease: offsets[" + std::to_string(i + 1) +
                            "] = " + std::to_string(batch.offsets[i + 1]) + " < offsets[" +
                            std::to_string(i) + "] = " + std::to_string(batch.offsets[i]));
    }
  }
  if (static_cast<std::size_t>(batch.offsets[r]) != batch.digests.size()) {
    throw InvalidArgument("batch offsets end at " + std::to_string(batch.offsets[r]) + " but " +
                          std::to_string(batch.digests.size()) + " digests were given");
  }
  if (batch.max_lengths.size() != r) {
    throw InvalidArgument("batch has " + std::to_string(r) + " requests but " +
                          std::to_string(batch.max_lengths.size()) + " max_lengths");
  }
  if (!batch.apply_eagle.empty() && batch.apply_eagle.size() != r) {
    throw InvalidArgument("batch has " + std::to_string(r) + " requests but " +
                          std::to_string(batch.apply_eagle.size()) +
                          " apply_eagle flags (give one per request, or none)");
  }
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t n = batch.offsets[i + 1] - batch.offsets[i];
    if (!detail::max_length_in_range(n, batch.max_lengths[i])) {
      throw InvalidArgument("request " + std::to_string(i) + ": " +
                            detail::max_length_message("max_length", batch.max_lengths[i]));
    }
  }
}

BatchLookupResult Coordinator::find_longest_cache_hits(const LookupBatch& batch,
                                                       const ExistenceSource& store,
                                                       const BatchOptions& options) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::find_longest_cache_hits");
  validate_batch(batch);
  if (!std::isfinite(options.min_seconds_per_worker) || options.min_seconds_per_worker < 0) {
    throw InvalidArgument(
        "BatchOptions::min_seconds_per_worker must be a finite number of "
        "seconds >= 0, got " +
        std::to_string(options.min_seconds_per_worker));
  }
  if (options.num_threads != 1) {
    // Read before any lookup, so that a bad PREFIXHIT_WORKER_SPIN_US fails every batch that may
    // use workers with the same error, not only those whose pace starts one.
    (void)detail::pool_idle_spin();
  }
  detail::check_store_width(store, config_.digest_size);
  const std::size_t r = batch.num_requests();
  const auto g = static_cast<std::size_t>(plan_.num_groups);
  BatchLookupResult out;
  out.num_requests = r;
  out.num_groups = plan_.num_groups;
  out.hit_lengths.assign(r, 0);
  out.num_blocks.assign(r * g, 0);
  out.num_placeholders.assign(r * g, 0);
  std::vector<ErrorKind> errors(r, ErrorKind::ok);

  // Small batches stay on the calling thread, where waking or starting a worker (5-70 us)
  // would cost more than the lookups. A lookup's work follows its probes, not its length
  // (dsv4-flash: about 600 probes, 10-60 us, for 32768 hashes), so a worker gets at least 8
  // requests, or 2^20 hashes of a few very long ones.
  const int threads =
      std::max(detail::choose_threads(r, options.num_threads, 8),
               detail::choose_threads(batch.digests.size(), options.num_threads, 1 << 20));
  // A chunk of up to 64 requests shares one probe_many call, so their cache misses overlap.
  // With workers, chunks are smaller (at most about a quarter of a thread's share, at least one
  // request) and claimed from a shared counter, shorter towards the end, so that a worker that
  // starts late takes only what is left and the threads finish together; workers start only if
  // earlier batches' pace, or else the first requests' time, says the work is worth them
  // (parallel_ranges_paced).
  constexpr std::size_t kChunk = 64;
  const int workers = std::min<int>(threads, static_cast<int>(std::max<std::size_t>(r, 1)));
  const std::size_t chunk =
      workers <= 1
          ? kChunk
          : std::clamp<std::size_t>(r / (4 * static_cast<std::size_t>(workers)), 1, kChunk);
  const auto run_chunk = [&](std::size_t start, std::size_t end) {
    GroupHit spec_hits[kChunk][kMaxGroups];
    detail::PlannedLookup lookups[kChunk];
    std::int64_t bad_digests[kChunk];
    const std::size_t count = end - start;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = start + k;
      const std::int64_t off = batch.offsets[i];
      lookups[k] = detail::PlannedLookup{batch.digests.data() + off,
                                         batch.offsets[i + 1] - off,
                                         batch.max_lengths[i],
                                         batch.apply_eagle.empty() || batch.apply_eagle[i] != 0,
                                         spec_hits[k],
                                         &out.hit_lengths[i],
                                         &errors[i],
                                         &bad_digests[k]};
      bad_digests[k] = -1;
    }
    detail::run_planned_lookups(plan_, store, lookups, count);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = start + k;
      for (std::size_t gid = 0; gid < g; ++gid) {
        const GroupHit& hit = spec_hits[k][plan_.spec_group_of[gid]];
        out.num_blocks[i * g + gid] = hit.num_blocks;
        out.num_placeholders[i * g + gid] = hit.num_placeholders;
      }
    }
  };
  // Batches arrive again and again (a runtime's waiting requests, each scheduler step), so the
  // pace of earlier ones (thread seconds per hash, process-wide) decides at once whether this one
  // is worth workers, instead of timing its first requests alone first. A throwing probe
  // (PlanAnswers of another request) is rethrown here.
  static detail::Pace pace;
  detail::parallel_ranges_paced(r, static_cast<double>(batch.digests.size()), chunk, kChunk,
                                workers, options.min_seconds_per_worker, pace, run_chunk);
  const auto failed =
      std::find_if(errors.begin(), errors.end(), [](ErrorKind e) { return e != ErrorKind::ok; });
  if (failed != errors.end()) {
    const auto index = static_cast<std::size_t>(failed - errors.begin());
    // Re-run the failing request alone for its full message (errors are rare and config-bound).
    try {
      const std::int64_t off = batch.offsets[index];
      find_longest_cache_hit(
          batch.digests.subspan(static_cast<std::size_t>(off),
                                static_cast<std::size_t>(batch.offsets[index + 1] - off)),
          batch.max_lengths[index], store,
          batch.apply_eagle.empty() || batch.apply_eagle[index] != 0);
    } catch (const Error& e) {
      throw_error(e.kind(), "request " + std::to_string(index) + ": " + e.what());
    }
    throw_error(*failed, "request " + std::to_string(index) + ": " + to_string(*failed));
  }
  return out;
}

LookupResult BatchLookupResult::request(std::size_t r) const {
  if (r >= num_requests) {
    throw InvalidArgument("request " + std::to_string(r) + " is out of range (batch of " +
                          std::to_string(num_requests) + ")");
  }
  const auto g = static_cast<std::size_t>(num_groups);
  LookupResult result;
  result.hit_length = hit_lengths[r];
  result.groups.resize(g);
  for (std::size_t gid = 0; gid < g; ++gid) {
    result.groups[gid] = GroupHit{num_blocks[r * g + gid], num_placeholders[r * g + gid]};
  }
  return result;
}

KeyPlan Coordinator::key_plan(span<const BlockDigest> hashes, std::int64_t max_length) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::key_plan");
  const auto n = static_cast<std::int64_t>(hashes.size());
  if (!detail::max_length_in_range(n, max_length)) {
    throw InvalidArgument(detail::max_length_message("key_plan: max_length", max_length));
  }
  KeyPlan plan;
  plan.num_hashes = n;
  plan.digest_size = config_.digest_size;
  const std::int64_t h = plan_.hash_block_size;
  const std::int64_t a = plan_.alignment;
  auto add = [&](int group_id, std::int64_t index) {
    plan.group_ids.push_back(group_id);
    plan.hash_indices.push_back(index);
    plan.keys.push_back(hashes[static_cast<std::size_t>(index)]);
  };
  for (int k = 0; k < plan_.num_spec_groups; ++k) {
    const detail::SpecGroupPlan& sg = plan_.spec_groups[k];
    const std::int64_t b = sg.block_size;
    const std::int64_t s = b / h;
    // Fine-grained probes (partial hits) read every raw hash below the bound.
    const bool fine =
        a < b && (sg.finder == FinderKind::full_attention || sg.finder == FinderKind::mamba);
    // vllm-0.33 lets an EAGLE group's bound pass max_length by one margin, up to n*H (11.6).
    std::int64_t reach = max_length;
    if (plan_.eagle_bound_by_hashes && sg.use_eagle && sg.finder != FinderKind::mamba) {
      const bool fine_margin = plan_.partial && sg.finder == FinderKind::full_attention && b > h;
      reach = std::max(
          reach, std::min(max_length + (fine_margin ? h : b), detail::hashed_tokens(plan_, n)));
    }
    const std::int64_t blocks = std::min(floor_div(reach, b), n / s);
    // Every block below the bound: in the fixed point a finder may be re-run with any shorter
    // bound, so even chunked local attention can read blocks before max_length's chunk.
    // A window group reads only its lookup mask's chunks (R = null: segments of S). Every member
    // of a spec group has the spec group's EAGLE flag, so the pattern is the spec group's.
    const bool window = sg.finder == FinderKind::sliding_window;
    const std::int64_t shift = window && sg.use_eagle ? 1 : 0;
    const std::int64_t need = window ? detail::ceil_div(sg.window - 1, b) + shift : 0;
    const std::int64_t per = window ? floor_div(plan_.scheduler_block_size, b) : 0;
    for (int m = 0; m < sg.num_members; ++m) {
      const int gid = plan_.members[sg.first_member + m];
      if (fine) {
        const std::int64_t top = std::min(floor_div(reach, a), n);
        for (std::int64_t f = 0; f < top; ++f) {
          add(gid, f);
        }
        continue;
      }
      for (std::int64_t j = 0; j < blocks; ++j) {
        if (per > 0 && need < per &&
            (j < shift || detail::floor_mod(j - shift, per) < per - need)) {
          continue;
        }
        add(gid, (j + 1) * s - 1);
      }
    }
  }
  check_digests(plan.keys, config_.digest_size, "key_plan: hashes");
  return plan;
}

PlanAnswers::PlanAnswers(const KeyPlan& plan, span<const std::uint8_t> present, int num_groups)
    : num_hashes_(plan.num_hashes), num_groups_(num_groups), digest_size_(plan.digest_size) {
  if (present.size() != plan.size()) {
    throw InvalidArgument("plan answers: " + std::to_string(present.size()) +
                          " answers for a plan of " + std::to_string(plan.size()) + " keys");
  }
  if (num_groups <= 0 || num_groups > kMaxGroups) {
    throw InvalidArgument("plan answers: num_groups must be in [1, " + std::to_string(kMaxGroups) +
                          "]");
  }
  if (plan.group_ids.size() != plan.size() || plan.hash_indices.size() != plan.size()) {
    throw InvalidArgument(
        "plan answers: the key plan's group_ids, hash_indices and keys differ "
        "in length");
  }
  if (num_hashes_ < 0) {
    throw InvalidArgument("plan answers: the key plan has a negative num_hashes");
  }
  const auto hashes = static_cast<std::size_t>(num_hashes_);
  table_.assign(static_cast<std::size_t>(num_groups) * hashes, 0);
  keys_.assign(hashes, BlockDigest{});
  planned_.assign(hashes, 0);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::int32_t gid = plan.group_ids[i];
    const std::int64_t idx = plan.hash_indices[i];
    if (gid < 0 || gid >= num_groups || idx < 0 || idx >= num_hashes_) {
      throw InvalidArgument("plan answers: entry " + std::to_string(i) +
                            " names group or hash index outside the plan");
    }
    const auto at = static_cast<std::size_t>(idx);
    if (planned_[at] != 0 && !(keys_[at] == plan.keys[i])) {
      throw InvalidArgument("plan answers: entries for hash index " + std::to_string(idx) +
                            " carry different keys");
    }
    keys_[at] = plan.keys[i];
    planned_[at] = 1;
    table_[static_cast<std::size_t>(gid) * hashes + at] = present[i] != 0 ? 1 : 0;
  }
}

std::uint64_t PlanAnswers::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                                 std::int64_t step, int count) const {
  if (group_id < 0 || group_id >= num_groups_) {
    return 0;
  }
  std::uint64_t bits = 0;
  const std::uint8_t* row = table_.data() + static_cast<std::ptrdiff_t>(group_id) * num_hashes_;
  for (int k = 0; k < count; ++k) {
    const std::int64_t idx = first + k * step;
    if (idx < 0 || idx >= num_hashes_) {
      continue;
    }
    const auto at = static_cast<std::size_t>(idx);
    // Answers are bound to their plan's keys: the same length is not the same request.
    if (planned_[at] != 0 && !(hashes[idx] == keys_[at])) {
      throw InvalidArgument("plan answers: hash " + std::to_string(idx) +
                            " of this request differs from the key plan's; these answers belong "
                            "to another request");
    }
    if (row[at] != 0) {
      bits |= std::uint64_t{1} << k;
    }
  }
  return bits;
}

}  // namespace prefixhit
