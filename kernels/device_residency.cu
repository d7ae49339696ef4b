// The device residency index (router_gpu.hpp): a snapshot of the CPU ResidencyIndex's live keys
// in an open-addressing table on the device, its worker sets as bitsets, and the kernel that
// builds a batch's worker-set table from it (the device twin of build_worker_set_table).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/nvtx.hpp"
#include "kernels/router_score.cuh"
#include "prefixhit/detail/hd.hpp"
#include "prefixhit/detail/residency_table.hpp"
#include "prefixhit/detail/worker_set_probe.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit {
namespace kernels {

namespace {

struct TableArgs {
  const BlockDigest* digests;
  const std::int64_t* offsets;
  std::int64_t num_requests;
  std::int64_t num_digests;  ///< offsets[num_requests]
  std::uint32_t metas[kMaxGroups];
  gpu::DeviceResidencyRef index;
  std::uint32_t* set_ids;  ///< [G * num_digests]
};

/// One thread per (digest, group id): the entry of build_worker_set_table's every-probe fill, or 0
/// where no finder can read.
__global__ void __launch_bounds__(kScoreThreads)
    worker_set_table_kernel(const __grid_constant__ detail::LookupPlan plan,
                            const __grid_constant__ TableArgs args) {
  const std::int64_t groups = plan.num_groups;
  const std::int64_t total = args.num_digests * groups;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const std::int64_t d = t / groups;
    const int g = static_cast<int>(t - d * groups);
    // The request holding digest d: the first r with offsets[r + 1] > d.
    std::int64_t lo = 0;
    std::int64_t hi = args.num_requests - 1;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (args.offsets[mid + 1] > d) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const std::int64_t offset = args.offsets[lo];
    const std::int64_t n = args.offsets[lo + 1] - offset;
    const std::int64_t i = d - offset;
    const int sg = plan.spec_group_of[g];
    std::uint32_t id = 0;
    if (sg < plan.num_spec_groups && detail::probed_by_finders(plan, sg, i)) {
      std::uint64_t w[4];
      const auto* src = reinterpret_cast<const std::uint64_t*>(args.digests + d);
      std::uint64_t tail = 0;
      for (int k = 0; k < 4; ++k) {
        w[k] = src[k];
        if (k * 8 >= plan.digest_size) {
          tail |= w[k];
        }
      }
      id =
          tail != 0 ? gpu::kBadDigestSet : detail::residency_find_set(args.index, w, args.metas[g]);
    }
    args.set_ids[groups * offset + g * n + i] = id;
  }
}

}  // namespace

}  // namespace kernels

namespace gpu {

using scoring::check;
using scoring::copy_async;

struct DeviceResidencyIndex::Impl {
  int num_workers = 1;
  int num_tiers = 1;
  std::size_t keys = 0;
  std::size_t sets = 0;
  std::size_t bytes = 0;
  std::uint64_t refreshes = 0;
  DeviceResidencyRef ref;
  scoring::Staging<std::uint64_t> d_keys;
  scoring::Staging<std::uint32_t> d_metas;
  scoring::Staging<std::uint32_t> d_slot_sets;
  scoring::Staging<std::uint64_t> d_sets;
};

DeviceResidencyIndex::DeviceResidencyIndex(const ResidencyIndex& residency, cudaStream_t stream) {
  if (!device_available()) {
    throw Unavailable("GPU residency index: " + describe_device());
  }
  impl_ = std::make_unique<Impl>();
  refresh(residency, stream);
}

DeviceResidencyIndex::~DeviceResidencyIndex() = default;
DeviceResidencyIndex::DeviceResidencyIndex(DeviceResidencyIndex&&) noexcept = default;
DeviceResidencyIndex& DeviceResidencyIndex::operator=(DeviceResidencyIndex&&) noexcept = default;

void DeviceResidencyIndex::refresh(const ResidencyIndex& residency, cudaStream_t stream) {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::DeviceResidencyIndex::refresh");
  Impl& impl = *impl_;
  ++impl.refreshes;
  const ResidencySnapshot snap = snapshot_residency(
      residency, detail::residency_mix(reinterpret_cast<std::uintptr_t>(this) + impl.refreshes));
  DeviceResidencyRef ref;
  ref.keys = impl.d_keys.upload(snap.keys, stream, "cudaMemcpyAsync(residency keys)");
  ref.metas = impl.d_metas.upload(snap.metas, stream, "cudaMemcpyAsync(residency metas)");
  ref.slot_sets =
      impl.d_slot_sets.upload(snap.slot_sets, stream, "cudaMemcpyAsync(residency slots)");
  ref.sets = impl.d_sets.upload(snap.sets, stream, "cudaMemcpyAsync(residency sets)");
  check(cudaStreamSynchronize(stream), "residency upload");
  ref.mask = snap.mask;
  ref.seed = snap.seed;
  ref.num_sets = static_cast<std::int64_t>(snap.sets.size() / snap.words);
  ref.words = static_cast<std::int64_t>(snap.words);
  ref.num_workers = snap.num_workers;
  ref.num_tiers = snap.num_tiers;
  impl.ref = ref;
  impl.num_workers = snap.num_workers;
  impl.num_tiers = snap.num_tiers;
  impl.keys = snap.live_keys;
  impl.sets = static_cast<std::size_t>(ref.num_sets) - 1;
  impl.bytes = snap.keys.size() * 8 + snap.metas.size() * 4 + snap.slot_sets.size() * 4 +
               snap.sets.size() * 8;
}

int DeviceResidencyIndex::num_workers() const noexcept {
  return impl_->num_workers;
}
int DeviceResidencyIndex::num_tiers() const noexcept {
  return impl_->num_tiers;
}
std::size_t DeviceResidencyIndex::size() const noexcept {
  return impl_->keys;
}
std::size_t DeviceResidencyIndex::worker_sets() const noexcept {
  return impl_->sets;
}
std::size_t DeviceResidencyIndex::device_bytes() const noexcept {
  return impl_->bytes;
}
DeviceResidencyRef DeviceResidencyIndex::ref() const noexcept {
  return impl_->ref;
}

namespace {

/// The error of a failed request without the CPU index: finder errors and bad lengths do not
/// depend on the keys, so the CPU scorer over an empty index gives their message; otherwise the
/// request read a misfit hash.
[[noreturn]] void throw_device_request_error(const Coordinator& coordinator,
                                             const LookupBatch& batch, const ScoreOptions& options,
                                             std::size_t r, ErrorKind kind) {
  const std::string prefix = scoring::request_prefix(r);
  scoring::rethrow_cpu_request_error(coordinator, batch,
                                     ResidencyIndex(ResidencyOptions{1, 1, 16, 1}), options, r);
  if (kind == ErrorKind::invalid_argument) {
    const std::string width = std::to_string(coordinator.config().digest_size);
    throw InvalidArgument(prefix + "a hash the lookup reads is not a " + width +
                          "-byte digest (the coordinator's digest_size): bytes past " + width +
                          " must be zero");
  }
  throw_error(kind, prefix + to_string(kind));
}

}  // namespace

RouterScores RouterScoreEngine::score_workers(const LookupBatch& batch,
                                              const DeviceResidencyIndex& residency,
                                              const ScoreOptions& options, cudaStream_t stream,
                                              LookupTiming* timing) const {
  PREFIXHIT_NVTX_RANGE("prefixhit::gpu::score_workers(device residency)");
  Impl& impl = *impl_;
  impl.coordinator.validate_batch(batch);
  if (options.ns > kMaxNamespace) {
    throw InvalidArgument("score_workers: namespace " + std::to_string(options.ns) + " is above " +
                          std::to_string(kMaxNamespace));
  }
  const detail::LookupPlan& plan = impl.plan;
  const DeviceResidencyRef index = residency.ref();
  RouterScores scores =
      scoring::empty_scores(batch.num_requests(), index.num_workers, plan.num_groups);
  if (scores.hit_lengths.empty()) {
    return scores;
  }
  const std::int64_t digests = batch.offsets[batch.num_requests()];
  const auto g = static_cast<std::size_t>(plan.num_groups);
  std::vector<ErrorKind> status;
  {
    const std::lock_guard<std::mutex> lock(impl.mutex);
    const DeviceBatch d = impl.stage(batch, stream);
    kernels::TableArgs args{};
    BlockDigest* const staged =
        impl.digests.reserve(static_cast<std::size_t>(digests), "cudaMalloc(digests)");
    args.digests = staged;
    copy_async(staged, batch.digests.data(),
               static_cast<std::size_t>(digests) * sizeof(BlockDigest), cudaMemcpyHostToDevice,
               stream, "cudaMemcpyAsync(digests)");
    args.offsets = d.offsets;
    args.num_requests = d.num_requests;
    args.num_digests = digests;
    for (int gid = 0; gid < plan.num_groups; ++gid) {
      args.metas[gid] =
          residency_key_meta(options.ns, gid, static_cast<std::size_t>(plan.digest_size));
    }
    args.index = index;
    args.set_ids =
        impl.set_ids.reserve(g * static_cast<std::size_t>(digests), "cudaMalloc(set_ids)");
    if (digests > 0) {
      const std::int64_t items = digests * plan.num_groups;
      PREFIXHIT_LAUNCH(kernels::worker_set_table_kernel,
                       kernels::score_grid(items, impl.resident_blocks), kernels::kScoreThreads, 0,
                       stream)
      (plan, args);
      check(cudaGetLastError(), "worker_set_table_kernel launch");
    }
    DeviceWorkerSets sets;
    sets.set_ids = args.set_ids;
    sets.sets = index.sets;
    sets.num_sets = index.num_sets;
    sets.num_workers = index.num_workers;
    sets.num_tiers = index.num_tiers;
    sets.tier_mask = options.tier_mask;
    status = impl.run(*this, d, sets, scores, stream, timing);
  }
  const auto nw = static_cast<std::size_t>(index.num_workers);
  for (std::size_t row = 0; row < status.size(); ++row) {
    if (status[row] != ErrorKind::ok) {
      throw_device_request_error(impl.coordinator, batch, options, row / nw, status[row]);
    }
  }
  return scores;
}

}  // namespace gpu
}  // namespace prefixhit
