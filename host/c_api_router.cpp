// Router mode's part of the C ABI (include/prefixhit/prefixhit.h, "router mode").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "host/c_api_internal.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/prefixhit.h"
#include "prefixhit/router.hpp"
#include "prefixhit/router_gpu.hpp"

struct prefixhit_residency {
  explicit prefixhit_residency(const prefixhit::ResidencyOptions& options) : index(options) {}
  prefixhit::ResidencyIndex index;
};

namespace {

using prefixhit::InvalidArgument;

using prefixhit::capi::DigestInput;
using prefixhit::capi::require;

prefixhit::ResidencyIndex& residency_of(prefixhit_residency* handle) {
  require(handle, "residency");
  return handle->index;
}

const prefixhit::ResidencyIndex& residency_of(const prefixhit_residency* handle) {
  require(handle, "residency");
  return handle->index;
}

/// insert and erase: check the keys, run `op` on the index, report its count.
template <class Op>
prefixhit_status apply_keys(prefixhit_residency* residency, const uint8_t* keys, size_t num_keys,
                            size_t digest_size, size_t* count_out, Op op) {
  return prefixhit::capi::guarded_call([&] {
    prefixhit::ResidencyIndex& index = residency_of(residency);
    const DigestInput input(keys, num_keys, "keys", digest_size);
    const std::size_t count = op(index, input.view());
    if (count_out != nullptr) {
      *count_out = count;
    }
  });
}

/// The two score_workers calls: check the handles and buffers, run `score` (the CPU or the GPU
/// scorer) on the batch, copy the outputs.
template <class Score>
prefixhit_status score_into(const prefixhit_coordinator* coordinator,
                            const prefixhit_residency* residency, const uint8_t* digests,
                            size_t num_digests, const int64_t* offsets, const int64_t* max_lengths,
                            const uint8_t* apply_eagle, size_t num_requests, uint32_t ns,
                            uint32_t tier_mask, int num_threads, int64_t* hit_lengths,
                            int64_t* num_blocks, int64_t* num_placeholders, Score score) {
  return prefixhit::capi::guarded_call([&] {
    const prefixhit::Coordinator& c = prefixhit::capi::coordinator_of(coordinator);
    const prefixhit::ResidencyIndex& index = residency_of(residency);
    require(offsets, "offsets");
    if (num_requests != 0) {
      require(max_lengths, "max_lengths");
      require(hit_lengths, "hit_lengths");
    }
    const DigestInput input(digests, num_digests, "digests", c.config().digest_size);
    const prefixhit::LookupBatch batch =
        prefixhit::capi::make_batch(input, offsets, max_lengths, apply_eagle, num_requests);
    prefixhit::ScoreOptions options;
    options.ns = ns;
    options.tier_mask = tier_mask;
    options.num_threads = num_threads;
    const prefixhit::RouterScores scores = score(c, batch, index, options);
    std::copy(scores.hit_lengths.begin(), scores.hit_lengths.end(), hit_lengths);
    if (num_blocks != nullptr) {
      std::copy(scores.num_blocks.begin(), scores.num_blocks.end(), num_blocks);
    }
    if (num_placeholders != nullptr) {
      std::copy(scores.num_placeholders.begin(), scores.num_placeholders.end(), num_placeholders);
    }
  });
}

}  // namespace

extern "C" {

prefixhit_status prefixhit_residency_create(const prefixhit_residency_options* options,
                                            prefixhit_residency** out) {
  return prefixhit::capi::guarded_call([&] {
    require(out, "out");
    *out = nullptr;
    require(options, "options");
    prefixhit::ResidencyOptions o;
    o.num_workers = options->num_workers;
    o.num_tiers = options->num_tiers == 0 ? 1 : options->num_tiers;
    if (options->initial_capacity != 0) {
      o.initial_capacity = options->initial_capacity;
    }
    o.seed = options->seed;
    *out = std::make_unique<prefixhit_residency>(o).release();
  });
}

void prefixhit_residency_destroy(prefixhit_residency* residency) {
  delete residency;
}

prefixhit_status prefixhit_residency_insert(prefixhit_residency* residency, uint32_t worker,
                                            uint32_t ns, int32_t group_id, const uint8_t* keys,
                                            size_t num_keys, size_t digest_size, int32_t tier,
                                            size_t* added) {
  return apply_keys(residency, keys, num_keys, digest_size, added,
                    [&](prefixhit::ResidencyIndex& index, auto view) {
                      return index.insert(worker, ns, group_id, view, digest_size, tier);
                    });
}

prefixhit_status prefixhit_residency_erase(prefixhit_residency* residency, uint32_t worker,
                                           uint32_t ns, int32_t group_id, const uint8_t* keys,
                                           size_t num_keys, size_t digest_size, int32_t tier,
                                           size_t* removed) {
  return apply_keys(residency, keys, num_keys, digest_size, removed,
                    [&](prefixhit::ResidencyIndex& index, auto view) {
                      return index.erase(worker, ns, group_id, view, digest_size, tier);
                    });
}

prefixhit_status prefixhit_residency_clear_worker(prefixhit_residency* residency, uint32_t worker) {
  return prefixhit::capi::guarded_call([&] { residency_of(residency).clear_worker(worker); });
}

prefixhit_status prefixhit_residency_contains(const prefixhit_residency* residency, uint32_t worker,
                                              uint32_t ns, int32_t group_id, const uint8_t* key,
                                              size_t digest_size, uint32_t tier_mask, int* out) {
  return prefixhit::capi::guarded_call([&] {
    const prefixhit::ResidencyIndex& index = residency_of(residency);
    require(out, "out");
    require(key, "key");
    const DigestInput input(key, 1, "key", digest_size);
    *out = index.contains(worker, ns, group_id, input[0], digest_size, tier_mask) ? 1 : 0;
  });
}

prefixhit_status prefixhit_residency_size(const prefixhit_residency* residency, size_t* out) {
  return prefixhit::capi::guarded_call([&] {
    const prefixhit::ResidencyIndex& index = residency_of(residency);
    require(out, "out");
    *out = index.size();
  });
}

prefixhit_status prefixhit_residency_num_workers(const prefixhit_residency* residency,
                                                 int32_t* out) {
  return prefixhit::capi::guarded_call([&] {
    const prefixhit::ResidencyIndex& index = residency_of(residency);
    require(out, "out");
    *out = index.num_workers();
  });
}

prefixhit_status prefixhit_score_workers(
    const prefixhit_coordinator* coordinator, const prefixhit_residency* residency,
    const uint8_t* digests, size_t num_digests, const int64_t* offsets, const int64_t* max_lengths,
    const uint8_t* apply_eagle, size_t num_requests, uint32_t ns, uint32_t tier_mask,
    int num_threads, int64_t* hit_lengths, int64_t* num_blocks, int64_t* num_placeholders) {
  return score_into(
      coordinator, residency, digests, num_digests, offsets, max_lengths, apply_eagle, num_requests,
      ns, tier_mask, num_threads, hit_lengths, num_blocks, num_placeholders,
      [](const prefixhit::Coordinator& c, const prefixhit::LookupBatch& batch,
         const prefixhit::ResidencyIndex& index, const prefixhit::ScoreOptions& options) {
        return prefixhit::score_workers(c, batch, index, options);
      });
}

int prefixhit_router_gpu_available(void) {
  return prefixhit::gpu::device_available() ? 1 : 0;
}

prefixhit_status prefixhit_score_workers_gpu(const prefixhit_coordinator* coordinator,
                                             const prefixhit_residency* residency,
                                             const uint8_t* digests, size_t num_digests,
                                             const int64_t* offsets, const int64_t* max_lengths,
                                             const uint8_t* apply_eagle, size_t num_requests,
                                             uint32_t ns, uint32_t tier_mask, int64_t* hit_lengths,
                                             int64_t* num_blocks, int64_t* num_placeholders) {
  return score_into(
      coordinator, residency, digests, num_digests, offsets, max_lengths, apply_eagle, num_requests,
      ns, tier_mask, 0, hit_lengths, num_blocks, num_placeholders,
      [](const prefixhit::Coordinator& c, const prefixhit::LookupBatch& batch,
         const prefixhit::ResidencyIndex& index, const prefixhit::ScoreOptions& options) {
        c.validate_batch(batch);  // a bad batch says so with or without a device
        return prefixhit::gpu::score_workers(c, batch, index, options);
      });
}

prefixhit_status prefixhit_top_k_workers(const int64_t* hit_lengths, size_t num_requests,
                                         int32_t num_workers, int32_t k, const double* load,
                                         int32_t* out) {
  return prefixhit::capi::guarded_call([&] {
    if (num_workers < 0 || num_workers > prefixhit::kMaxWorkers) {
      throw InvalidArgument("num_workers must be in [0, " + std::to_string(prefixhit::kMaxWorkers) +
                            "], got " + std::to_string(num_workers));
    }
    const auto nw = static_cast<std::size_t>(num_workers);
    if (num_requests > prefixhit::capi::kMaxDigestsPerCall / (nw == 0 ? 1 : nw)) {
      throw InvalidArgument("num_requests " + std::to_string(num_requests) + " is too large");
    }
    if (num_requests != 0 && nw != 0) {
      require(hit_lengths, "hit_lengths");
    }
    if (num_requests != 0) {
      require(out, "out");
    }
    prefixhit::RouterScores scores;
    scores.num_requests = num_requests;
    scores.num_workers = num_workers;
    scores.hit_lengths.assign(hit_lengths, hit_lengths + num_requests * nw);
    std::vector<double> loads;
    if (load != nullptr) {
      loads.assign(load, load + nw);
      if (std::any_of(loads.begin(), loads.end(), [](double v) { return std::isnan(v); })) {
        throw InvalidArgument("load must not contain NaN");
      }
    }
    const std::vector<std::int32_t> best = prefixhit::top_k_workers(scores, k, loads);
    std::copy(best.begin(), best.end(), out);
  });
}

}  // extern "C"
