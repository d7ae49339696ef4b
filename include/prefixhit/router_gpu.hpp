// The GPU path of router scoring (issue 12): every worker's exact prefix hit for a batch of
// requests, running the shared finders (detail/finders.hpp) that the CPU engine and the batch
// lookup kernel run: one CUDA thread per (request, worker class), or per (request, worker).
//
// How: a host pass reads, for each request, the keys its finders reach from the CPU
// ResidencyIndex once, and writes each key's worker set as a small id into a table laid out like
// gpu.hpp's presence table (request r's block at G*offsets[r], entry (g, i) at G*offsets[r] +
// g*n_r + i). To know what the finders reach without reading every key they might probe, the pass
// runs the shared finders over classes of workers, as the CPU scorer does: a class's run reads a
// key (filling its entry) and goes on while every member answers alike, and splits where they
// differ, so the entries read are exactly those some worker's own lookup reads. The distinct
// worker sets the batch touches go to the device as bitsets of W bits (tiers already folded by
// the tier mask). The pass's runs end with classes of workers that answer alike every key their
// lookups read (build_worker_classes gives finer ones from any table); thread (r, c) runs
// the finders for class c's representative worker with an existence functor that tests its bit
// of the probed key's set (detail/worker_set_probe.hpp), and writes the result to every member.
//
// A DeviceResidencyIndex (a device snapshot of the CPU index) lets a kernel build the same
// table from the batch's digests instead.
//
// Plain C++17 (no CUDA headers), like gpu.hpp. Without CUDA every GPU entry point throws
// Unavailable; build_worker_set_table works in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "prefixhit/coordinator.hpp"
#include "prefixhit/error_kind.hpp"
#include "prefixhit/gpu.hpp"
#include "prefixhit/router.hpp"

namespace prefixhit::gpu {

/// A table entry whose hash is not of Config::digest_size's width (a nonzero byte past it): a
/// worker whose lookup reads it fails with invalid_argument, as the CPU score_workers does.
inline constexpr std::uint32_t kBadDigestSet = 0xFFFFFFFFU;
/// A table entry the host pass did not read (no worker's lookup reaches it). Like any id past the
/// table's sets, a lookup that reads it fails with invalid_argument (a malformed table), so a
/// table that missed an entry can never give a silent wrong score.
inline constexpr std::uint32_t kUnreadSet = 0xFFFFFFFEU;

/// Which entries build_worker_set_table reads from the residency index.
enum class TableFill : std::uint8_t {
  /// Only the keys some worker's lookup reads (the default; about the CPU scorer's reads).
  reached,
  /// Every key a finder may probe: each spec group's block keys up to the request's end, every
  /// hash of a fine-grained group (the old pass; for tests and benchmarks to compare).
  every_probe,
};

/// The host side of a GPU scoring pass: which worker set each probed key has.
struct WorkerSetTable {
  int num_workers = 0;
  int num_groups = 0;
  std::size_t words = 0;  ///< 64-bit words per worker set: ceil(num_workers / 64)
  /// [num_groups * batch digests], the presence table's layout; entries the pass did not read
  /// are kUnreadSet.
  std::vector<std::uint32_t> set_ids;
  /// [num_sets * words]: set id k's workers (bit w of word w/64). Set 0 is the empty set.
  std::vector<std::uint64_t> sets;
  std::size_t index_reads = 0;  ///< keys read from the residency index (one per group and hash)
  /// TableFill::reached: runs of the finders the pass made (one per class it tried, summed over
  /// requests; a run that split counts too). 0 for every_probe.
  std::size_t finder_runs = 0;

  std::size_t num_sets() const noexcept { return words == 0 ? 0 : sets.size() / words; }
};

/// Request r's workers split into classes whose members answer alike every key their lookups
/// read, so they end alike: build_worker_classes' agree on every set id r's table entries name,
/// build_worker_set_table's (reached) on the keys its runs read. Class c belongs to request
/// requests[c];
/// its workers are members[member_offsets[c] .. member_offsets[c+1]), ascending, the first being
/// its representative. Classes run request by request, by representative.
struct WorkerClasses {
  std::vector<std::uint32_t> requests;       ///< [C]
  std::vector<std::int64_t> member_offsets;  ///< [C + 1]
  std::vector<std::int32_t> members;         ///< [R * W]
  /// Classes split off by the bit check from workers of one signature (signature collisions).
  std::size_t collisions = 0;

  std::size_t num_classes() const noexcept { return requests.size(); }
};

/// Builds the table for a batch under `options.ns` and `options.tier_mask` (num_threads is not
/// used: the pass is single-threaded). Holds the residency index's reader lock while it runs.
/// Cost (reached): the keys the workers' lookups read, each once per request, plus the finder
/// runs over the pass's classes (like the CPU scorer), not every hash of the request.
/// `classes`, when given, receives the classes for the kernel: with TableFill::reached the ones
/// the pass's runs ended with (members agree on every key their own lookups read: about the CPU
/// scorer's classes, never more than build_worker_classes gives for the same table, which splits
/// on every entry of the request); with every_probe, build_worker_classes'.
/// Throws InvalidArgument for a bad batch (Coordinator::validate_batch) or namespace.
WorkerSetTable build_worker_set_table(const Coordinator& coordinator, const LookupBatch& batch,
                                      const ResidencyIndex& residency,
                                      const ScoreOptions& options = {},
                                      TableFill fill = TableFill::reached,
                                      WorkerClasses* classes = nullptr);

/// Groups each request's workers by the bits of the set ids its block of `table` names. A
/// signature per worker (the XOR of a random word per set that holds it) finds candidates; every
/// member is then compared bit by bit with its representative, so a signature collision splits a
/// class and never merges workers that differ. Cost: the sets' members plus W per distinct set
/// per request, not probes x W. `signature_mask` narrows the signatures (tests use it to force
/// collisions). `offsets` as LookupBatch::offsets, already validated.
WorkerClasses build_worker_classes(const WorkerSetTable& table, span<const std::int64_t> offsets,
                                   std::uint64_t signature_mask = ~std::uint64_t{0});

/// A WorkerSetTable in device memory. Sets may keep tiers apart: num_tiers columns per worker
/// (column w * num_tiers + t); worker w holds a key when a column of a tier in tier_mask is set.
struct DeviceWorkerSets {
  const std::uint32_t* set_ids = nullptr;  ///< [G * digests]
  const std::uint64_t* sets = nullptr;     ///< [num_sets * ceil(num_workers * num_tiers / 64)]
  std::int64_t num_sets = 0;  ///< ids at or past it (but kBadDigestSet) give invalid_argument
  int num_workers = 0;
  int num_tiers = 1;  ///< in [1, kMaxTiers]
  std::uint32_t tier_mask = ~0U;
};

/// The host half of a DeviceResidencyIndex: the live keys of a ResidencyIndex in the device
/// table's layout (detail/residency_table.hpp), taken under the index's reader lock, with its
/// non-empty worker sets renumbered from 1 (set 0 is empty). For the device index and tests.
struct ResidencySnapshot {
  std::vector<std::uint64_t> keys;       ///< [capacity * 4]
  std::vector<std::uint32_t> metas;      ///< [capacity]
  std::vector<std::uint32_t> slot_sets;  ///< [capacity]; 0xFFFFFFFF: free
  std::vector<std::uint64_t> sets;       ///< [num_sets * words] worker x tier columns
  std::uint64_t mask = 0;
  std::uint64_t seed = 0;
  std::size_t live_keys = 0;
  std::size_t words = 1;
  int num_workers = 1;
  int num_tiers = 1;
};
ResidencySnapshot snapshot_residency(const ResidencyIndex& residency, std::uint64_t seed);

/// The packed (namespace, group id, width) word of a residency key, as both tables store it.
std::uint32_t residency_key_meta(Namespace ns, int group_id, std::size_t digest_size);

/// The plain view of a DeviceResidencyIndex that kernels take (device pointers).
struct DeviceResidencyRef {
  const std::uint64_t* keys = nullptr;       ///< [capacity * 4] digest words
  const std::uint32_t* metas = nullptr;      ///< [capacity] (namespace, group id, width) packed
  const std::uint32_t* slot_sets = nullptr;  ///< [capacity] set id; 0xFFFFFFFF: a free slot
  std::uint64_t mask = 0;                    ///< capacity - 1 (a power of two, at most half full)
  std::uint64_t seed = 0;
  const std::uint64_t* sets = nullptr;  ///< [num_sets * words] worker x tier columns; 0: empty
  std::int64_t num_sets = 0;
  std::int64_t words = 0;
  int num_workers = 0;
  int num_tiers = 1;
};

/// A residency index resident on the device: the keys of a CPU ResidencyIndex with their
/// worker-set ids, and the sets (worker x tier columns), so that scoring reads no host memory
/// per request. A snapshot: built from the CPU index (under its reader lock) and rebuilt by
/// refresh(); the CPU index stays the one the event mirror updates.
class DeviceResidencyIndex {
 public:
  /// Throws Unavailable without CUDA or a device, CudaError when allocation or copy fails.
  explicit DeviceResidencyIndex(const ResidencyIndex& residency, cudaStream_t stream = nullptr);
  ~DeviceResidencyIndex();
  DeviceResidencyIndex(DeviceResidencyIndex&&) noexcept;
  DeviceResidencyIndex& operator=(DeviceResidencyIndex&&) noexcept;
  DeviceResidencyIndex(const DeviceResidencyIndex&) = delete;
  DeviceResidencyIndex& operator=(const DeviceResidencyIndex&) = delete;

  /// Replaces the snapshot with the index's current keys (synchronises `stream`).
  void refresh(const ResidencyIndex& residency, cudaStream_t stream = nullptr);
  int num_workers() const noexcept;
  int num_tiers() const noexcept;
  std::size_t size() const noexcept;          ///< live keys
  std::size_t worker_sets() const noexcept;   ///< distinct non-empty sets
  std::size_t device_bytes() const noexcept;  ///< device memory held
  DeviceResidencyRef ref() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A WorkerClasses in device memory.
struct DeviceWorkerClasses {
  std::int64_t num_classes = 0;
  const std::uint32_t* requests = nullptr;       ///< [num_classes]
  const std::int64_t* member_offsets = nullptr;  ///< [num_classes + 1]
  const std::int32_t* members = nullptr;         ///< worker ids; ids outside [0, W) are skipped
};

/// Where the scores go, in device memory: RouterScores' layout, row = r * W + w.
struct DeviceScoreOutput {
  std::int64_t* hit_lengths = nullptr;       ///< [R * W]
  std::int64_t* num_blocks = nullptr;        ///< [R * W * G]
  std::int64_t* num_placeholders = nullptr;  ///< [R * W * G]
  ErrorKind* status = nullptr;               ///< [R * W]: ok, or why (r, w) failed (row zeroed)
};

/// Per-worker exact scoring on the GPU; the results equal the CPU score_workers bit for bit.
///
/// Thread safety: device-array calls may run concurrently from several threads and streams; the
/// host overload serialises on the engine. A moved-from engine may only be destroyed or assigned.
class RouterScoreEngine {
 public:
  /// Copies the coordinator's configuration and plan. Throws Unavailable without CUDA or a
  /// device, CudaError when the device cannot be queried.
  explicit RouterScoreEngine(const Coordinator& coordinator);
  ~RouterScoreEngine();
  RouterScoreEngine(RouterScoreEngine&&) noexcept;
  RouterScoreEngine& operator=(RouterScoreEngine&&) noexcept;
  RouterScoreEngine(const RouterScoreEngine&) = delete;
  RouterScoreEngine& operator=(const RouterScoreEngine&) = delete;

  const Coordinator& coordinator() const noexcept;

  // ---- device arrays in, device arrays out ---------------------------------------------------
  // `batch` as gpu.hpp's DeviceBatch (digests are not read: the table stands for them). Errors
  // of a (request, worker) go to status. Throws InvalidArgument for missing pointers or negative
  // counts, CudaError when the launch fails. An empty batch launches nothing.
  // This form runs one thread per (request, worker); the next, one per class.
  void score_workers_async(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                           const DeviceScoreOutput& out, cudaStream_t stream) const;
  /// One thread per class of `classes` (from build_worker_set_table or build_worker_classes, for
  /// the same table): each
  /// scores its representative and writes every member's row. Rows of workers in no class are
  /// not written. Throws InvalidArgument for missing class arrays.
  void score_workers_async(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                           const DeviceWorkerClasses& classes, const DeviceScoreOutput& out,
                           cudaStream_t stream) const;
  void score_workers(const DeviceBatch& batch, const DeviceWorkerSets& sets,
                     const DeviceScoreOutput& out, cudaStream_t stream,
                     LookupTiming* timing = nullptr) const;

  // ---- host arrays in, host result out ---------------------------------------------------------
  /// The CPU score_workers' contract: same RouterScores (hit_lengths, num_blocks,
  /// num_placeholders; index_reads counts the host pass's reads; classes counts the host pass's
  /// classes, one GPU thread each; probes is 0), same errors and messages
  /// ("score_workers: request <r>: ...").
  RouterScores score_workers(const LookupBatch& batch, const ResidencyIndex& residency,
                             const ScoreOptions& options = {}, cudaStream_t stream = nullptr,
                             LookupTiming* timing = nullptr) const;

  /// The same over a device residency index: the digests go to the device and a kernel builds
  /// the table from `residency` (no host pass), so no classes: one thread per (request, worker)
  /// and classes is 0. Errors have the CPU scorer's kinds; a finder
  /// error or bad length has its message too, a misfit hash names the request and the width.
  /// `residency` must not be refreshed concurrently.
  RouterScores score_workers(const LookupBatch& batch, const DeviceResidencyIndex& residency,
                             const ScoreOptions& options = {}, cudaStream_t stream = nullptr,
                             LookupTiming* timing = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One-shot form of RouterScoreEngine::score_workers (builds an engine per call).
RouterScores score_workers(const Coordinator& coordinator, const LookupBatch& batch,
                           const ResidencyIndex& residency, const ScoreOptions& options = {},
                           cudaStream_t stream = nullptr);

}  // namespace prefixhit::gpu
