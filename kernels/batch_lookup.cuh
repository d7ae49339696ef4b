// Kernels of the GPU batch lookup (gpu.hpp): one warp per request, grid-stride over requests.
//
// Each warp runs the shared coordinator lookup (finders.hpp) for its request with a WarpProbe
// (warp_probe.hpp) over one of the existence sources below, then writes the request's row of the
// outputs. Launchers return cudaError_t; the public API in batch_lookup.cu turns failures into
// exceptions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "prefixhit/block_index.hpp"
#include "prefixhit/detail/lookup_plan.hpp"
#include "prefixhit/detail/warp_probe.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/error_kind.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::kernels {

/// Threads per block of the lookup kernels: four warps, four requests at a time. Small blocks
/// spread a batch of a few hundred requests over every SM; each warp's finder state lives in
/// registers and local memory, so a block needs no shared memory.
inline constexpr int kLookupThreads = 128;
inline constexpr int kLookupWarpsPerBlock = kLookupThreads / detail::kWarpSize;

/// A batch as the kernels see it (gpu.hpp's DeviceBatch and DeviceLookupOutput, flattened).
struct BatchKernelArgs {
  const BlockDigest* digests;
  const std::int64_t* offsets;
  const std::int64_t* max_lengths;
  const std::uint8_t* apply_eagle;  ///< null: true for every request
  std::int64_t num_requests;
  detail::RequestOutputs out;
};

/// Blocks to launch for `num_requests` requests: one warp each, capped at `resident_blocks`
/// (the blocks the device holds at once), beyond which warps loop over requests.
inline int lookup_grid(std::int64_t num_requests, int resident_blocks) {
  const std::int64_t wanted = (num_requests + kLookupWarpsPerBlock - 1) / kLookupWarpsPerBlock;
  const std::int64_t cap = resident_blocks > 0 ? resident_blocks : 1;
  return static_cast<int>(wanted < cap ? wanted : cap);
}

/// The warps of the grid walk the requests; `make_source(offset, n)` gives the existence source
/// of the request whose digests start at `offset`.
template <int Lookahead, class MakeSource>
__device__ __forceinline__ void lookup_requests_warp_per_request(const detail::LookupPlan& plan,
                                                                 const BatchKernelArgs& args,
                                                                 const MakeSource& make_source) {
  const int lane = static_cast<int>(threadIdx.x) & (detail::kWarpSize - 1);
  const std::int64_t warp =
      (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / detail::kWarpSize;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / detail::kWarpSize;
  // r is warp-uniform, so the whole warp stays converged through the lookup.
  for (std::int64_t r = warp; r < args.num_requests; r += warps) {
    const std::int64_t offset = args.offsets[r];
    const std::int64_t n = args.offsets[r + 1] - offset;
    const std::int64_t max_length = args.max_lengths[r];
    const bool apply_eagle = args.apply_eagle == nullptr || args.apply_eagle[r] != 0;
    using Source = decltype(make_source(offset, n));
    const detail::KernelWarpProbe<Source, Lookahead> probe{&plan, make_source(offset, n), n};
    detail::lookup_request(plan, n, max_length, apply_eagle, probe, r, lane, detail::kWarpSize,
                           args.out);
  }
}

/// Existence from the resident device index: key (g, hashes[i]) under namespace ns, at the
/// coordinator's digest width.
template <class IndexRef>
struct DeviceIndexSource {
  IndexRef ref;
  Namespace ns;
  const BlockDigest* hashes;  ///< the request's digests
  std::size_t digest_size;    ///< Config::digest_size: part of every key

  /// Starts the load of digest `index` into L1 ahead of its probe (has_prefetch): the round's
  /// digest loads then overlap, and each probe's chain starts from a cached digest.
  __device__ __forceinline__ void prefetch([[maybe_unused]] std::int64_t index) const {
    PREFIXHIT_PTX("prefetch.global.L1 [%0];" ::"l"(hashes + index));
  }

  __device__ __forceinline__ bool contains(int group_id, std::int64_t index) const {
    // Bring the digest into registers with wide read-only loads (two 16-byte loads where the
    // array allows, as cudaMalloc'd digest arrays do), so the index hashes and compares a
    // register copy instead of re-reading global memory byte by byte.
    BlockDigest key;
    auto* words = reinterpret_cast<std::uint64_t*>(&key);
    const BlockDigest* src = hashes + index;
    if ((reinterpret_cast<std::uintptr_t>(src) & 15U) == 0) {
      const auto* wide = reinterpret_cast<const ulonglong2*>(src);
      const ulonglong2 lo = __ldg(wide);
      const ulonglong2 hi = __ldg(wide + 1);
      words[0] = lo.x;
      words[1] = lo.y;
      words[2] = hi.x;
      words[3] = hi.y;
    } else {
      const auto* narrow = reinterpret_cast<const unsigned long long*>(src);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        words[w] = __ldg(narrow + w);
      }
    }
    return ref.contains(ns, group_id, key, digest_size);
  }
};

/// Lookups over the resident device index, namespace `ns`.
cudaError_t launch_batch_lookup_index(const detail::LookupPlan& plan, const BatchKernelArgs& args,
                                      const DeviceBlockIndexRef& index, Namespace ns, int grid,
                                      cudaStream_t stream);
/// Blocks of the index kernel the current device holds at once.
cudaError_t batch_lookup_index_resident_blocks(int* blocks);

/// Lookups over a caller's presence table (gpu.hpp's layout).
cudaError_t launch_batch_lookup_presence(const detail::LookupPlan& plan,
                                         const BatchKernelArgs& args, const std::uint8_t* presence,
                                         int grid, cudaStream_t stream);
/// Blocks of the presence kernel the current device holds at once.
cudaError_t batch_lookup_presence_resident_blocks(int* blocks);

/// first_failed[0] = the smallest r with status[r] != ok, else num_requests (a CUB reduction;
/// its temporary storage is allocated and freed in stream order).
cudaError_t launch_first_failed(const ErrorKind* status, std::int64_t num_requests,
                                std::int64_t* first_failed, cudaStream_t stream);

}  // namespace prefixhit::kernels
