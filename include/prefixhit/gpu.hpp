// The GPU batch lookup engine: a whole scheduler step's prefix-hit lookups in one kernel launch.
//
// This header is plain C++17 (it does not include cuda_runtime.h), so runtimes and builds without
// CUDA can include it. In a build without CUDA every entry point throws Unavailable and
// device_available() returns false.
//
// Layout of a batch on the device (all arrays in device memory, R requests, G groups):
//   digests           [offsets[R]]  request r owns digests [offsets[r], offsets[r+1])
//   offsets           [R+1]         offsets[0] == 0, non-decreasing, offsets[R] <= digests
//                                   (a decreasing pair gives status invalid_argument; offsets
//                                   past the digest array are the caller's to avoid)
//   max_lengths       [R]           0 <= max_lengths[r] < (n_r+1)*H, else status invalid_argument
//   apply_eagle       [R] or null   null means "true" for every request
// Results (device memory, row r, column g = group id; the CPU BatchLookupResult's layout):
//   hit_lengths       [R]
//   num_blocks        [R*G]         request r's list for group g has num_blocks entries,
//   num_placeholders  [R*G]         the first num_placeholders of them placeholders (GroupHit)
//   status            [R]           ErrorKind::ok, or the error that aborted request r (its row
//                                   of results is then all zeros)
//   first_failed      [1], optional the smallest r with a nonzero status, or R when none
//
// Existence sources:
//   * the resident DeviceBlockIndex, probed under one namespace;
//   * a presence table from the caller, one byte per (request, group id, hash index): request r's
//     block starts at G*offsets[r] and entry (g, i) is at G*offsets[r] + g*n_r + i, nonzero when
//     (g, hashes[i]) is in the store. This is a remote store's answer to the requests' KeyPlans
//     (Coordinator::key_plan) scattered into place (see scatter_plan_answers); entries outside the
//     plan must be zero, which is how PlanAnswers treats them. Bytes rather than packed bits,
//     so that a runtime can scatter answers from many threads without atomics.
//
// Stream ordering: every call enqueues its work on the given stream and reads its inputs and
// writes its outputs in stream order. `_async` calls return once the work is enqueued; the
// others synchronise the stream before they return. Host overloads (LookupBatch in,
// BatchLookupResult out) stage through buffers owned by the engine and are serialised per engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/error_kind.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/types.hpp"

// CUDA's own typedef (driver_types.h), repeated so that this header needs no CUDA headers.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace prefixhit {

class DeviceBlockIndex;      // prefixhit/device_block_index.hpp
struct DeviceBlockIndexRef;  // prefixhit/device_block_index.hpp

namespace gpu {

/// Whether this build has CUDA and at least one device can be used (cudaGetDeviceCount
/// succeeds and reports one or more). Never throws.
bool device_available() noexcept;

/// One line about the device the engine would use, or why there is none ("built without
/// CUDA", "no CUDA device: ..."). Never throws.
std::string describe_device() noexcept;

/// A batch whose arrays live in device memory (see the layout above).
struct DeviceBatch {
  const BlockDigest* digests = nullptr;
  const std::int64_t* offsets = nullptr;
  const std::int64_t* max_lengths = nullptr;
  const std::uint8_t* apply_eagle = nullptr;  ///< null: apply the EAGLE drop for every request
  std::int64_t num_requests = 0;
};

/// Where a batch's results go, in device memory (see the layout above).
struct DeviceLookupOutput {
  std::int64_t* hit_lengths = nullptr;
  std::int64_t* num_blocks = nullptr;
  std::int64_t* num_placeholders = nullptr;
  ErrorKind* status = nullptr;
  std::int64_t* first_failed = nullptr;  ///< optional (one more launch: a CUB reduction)
};

/// Device time of a synchronous call, measured with CUDA events around its kernels on the
/// call's stream (staging copies of the host overloads are not included).
struct LookupTiming {
  double device_us = 0;
};

/// Scatters one request's KeyPlan answers into its block of a presence table: `table` points
/// at G*offsets[r] and has G*plan.num_hashes bytes; present[i] answers plan entry i. Entries the
/// plan does not name are left as they are (zero them first).
inline void scatter_plan_answers(const KeyPlan& plan, span<const std::uint8_t> present,
                                 int num_groups, std::uint8_t* table) {
  if (present.size() != plan.size()) {
    throw InvalidArgument("scatter_plan_answers: " + std::to_string(present.size()) +
                          " answers for a plan of " + std::to_string(plan.size()) + " keys");
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::int32_t g = plan.group_ids[i];
    const std::int64_t idx = plan.hash_indices[i];
    if (g < 0 || g >= num_groups || idx < 0 || idx >= plan.num_hashes) {
      throw InvalidArgument("scatter_plan_answers: entry " + std::to_string(i) +
                            " names a group or hash index outside the plan");
    }
    table[g * plan.num_hashes + idx] = present[i] != 0 ? 1 : 0;
  }
}

/// Device copies of a host batch and device arrays for its results, owned together: for callers
/// that hold a batch on the host but want the device-array calls (to time them, to repeat them,
/// to poison the outputs first) without CUDA headers: tools, tests and benchmarks.
class DeviceBatchBuffers {
 public:
  /// Allocates and uploads `batch` (not validated here; the engine's device-array calls report
  /// bad requests in status) for a configuration of `num_groups` groups; synchronises `stream`.
  /// Throws Unavailable without CUDA or a device, CudaError when allocation or copy fails.
  DeviceBatchBuffers(const LookupBatch& batch, int num_groups, cudaStream_t stream = nullptr);
  ~DeviceBatchBuffers();
  DeviceBatchBuffers(DeviceBatchBuffers&&) noexcept;
  DeviceBatchBuffers& operator=(DeviceBatchBuffers&&) noexcept;
  DeviceBatchBuffers(const DeviceBatchBuffers&) = delete;
  DeviceBatchBuffers& operator=(const DeviceBatchBuffers&) = delete;

  const DeviceBatch& batch() const noexcept;
  /// Every output array, first_failed included.
  const DeviceLookupOutput& output() const noexcept;
  /// Uploads a presence table (num_groups * digests bytes, gpu.hpp's layout), kept here;
  /// returns its device address. Synchronises `stream`.
  const std::uint8_t* upload_presence(span<const std::uint8_t> presence,
                                      cudaStream_t stream = nullptr);
  /// Sets every byte of every output array to `byte` (poison, so unwritten results show).
  void fill_outputs(std::uint8_t byte, cudaStream_t stream = nullptr);
  /// Copies the results back; synchronises `stream`.
  BatchLookupResult download(cudaStream_t stream = nullptr) const;
  std::vector<ErrorKind> download_status(cudaStream_t stream = nullptr) const;
  std::int64_t download_first_failed(cudaStream_t stream = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Copies host keys (of `digest_size` bytes, as DeviceBlockIndex::insert) to the device and
/// inserts them into `index` for one group (synchronous); returns how many were new. For tools,
/// tests and warm-up: a runtime whose keys already live on the device calls
/// DeviceBlockIndex::insert directly.
std::size_t insert_host_keys(DeviceBlockIndex& index, Namespace ns, int group_id,
                             span<const BlockDigest> keys, cudaStream_t stream = nullptr,
                             std::size_t digest_size = BlockDigest::kSize);

/// Batched longest-prefix lookups on the GPU, bit for bit the CPU engine's answers
/// (Coordinator::find_longest_cache_hits). The configuration-only part (the LookupPlan) is
/// planned once on the host at construction; each batch is one kernel launch (plus one CUB
/// reduction when first_failed is asked for).
///
/// Thread safety: device-array calls may run concurrently from several threads and streams
/// (they share nothing but the read-only plan). Host overloads serialise on the engine. A
/// moved-from engine may only be destroyed or assigned to.
class BatchLookupEngine {
 public:
  /// Copies the coordinator's configuration and plan. Throws Unavailable without CUDA or a
  /// device, CudaError when the device cannot be queried.
  explicit BatchLookupEngine(const Coordinator& coordinator);
  ~BatchLookupEngine();
  BatchLookupEngine(BatchLookupEngine&&) noexcept;
  BatchLookupEngine& operator=(BatchLookupEngine&&) noexcept;
  BatchLookupEngine(const BatchLookupEngine&) = delete;
  BatchLookupEngine& operator=(const BatchLookupEngine&) = delete;

  const Coordinator& coordinator() const noexcept;
  int num_groups() const noexcept;

  // ---- device arrays in, device arrays out ---------------------------------------------------
  // Request errors (bad max_length, finder errors) are reported in `status`, not thrown. Throws
  // InvalidArgument for missing pointers or a negative request count, CudaError when a launch
  // fails. num_requests == 0 launches nothing (first_failed, if given, is set to 0).

  /// Existence from the resident device index (DeviceBlockIndex::ref()), namespace `ns`: keys of
  /// the coordinator's Config::digest_size (a digest with a nonzero byte past that width is
  /// never present). The index must not be modified until the lookup has run (order both on
  /// one stream).
  void lookup_async(const DeviceBatch& batch, const DeviceBlockIndexRef& index, Namespace ns,
                    const DeviceLookupOutput& out, cudaStream_t stream) const;
  void lookup(const DeviceBatch& batch, const DeviceBlockIndexRef& index, Namespace ns,
              const DeviceLookupOutput& out, cudaStream_t stream,
              LookupTiming* timing = nullptr) const;

  /// Existence from a caller's presence table (device memory, layout above; required whenever
  /// num_requests > 0).
  void lookup_async(const DeviceBatch& batch, const std::uint8_t* presence,
                    const DeviceLookupOutput& out, cudaStream_t stream) const;
  void lookup(const DeviceBatch& batch, const std::uint8_t* presence, const DeviceLookupOutput& out,
              cudaStream_t stream, LookupTiming* timing = nullptr) const;

  // ---- host arrays in, host result out ---------------------------------------------------------
  // Same contract as Coordinator::find_longest_cache_hits: the batch is checked with
  // Coordinator::validate_batch first (and every digest against the coordinator's digest_size),
  // and the first failing request's error is thrown as its typed exception,
  // "request <r>: <reason>".

  /// Existence from the resident device index, namespace `ns`.
  BatchLookupResult find_longest_cache_hits(const LookupBatch& batch, const DeviceBlockIndex& index,
                                            Namespace ns, cudaStream_t stream = nullptr,
                                            LookupTiming* timing = nullptr) const;
  /// Existence from a host presence table (layout above; G * batch.digests.size() bytes).
  BatchLookupResult find_longest_cache_hits(const LookupBatch& batch,
                                            span<const std::uint8_t> presence,
                                            cudaStream_t stream = nullptr,
                                            LookupTiming* timing = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpu
}  // namespace prefixhit
