// Shared pieces of the Python bindings: input conversion (digests, integer arrays, stores),
// the error translation and the numpy result helpers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prefixhit/block_index.hpp"
#include "prefixhit/coordinator.hpp"
#include "prefixhit/device_block_index.hpp"
#include "prefixhit/existence.hpp"
#include "prefixhit/gpu.hpp"
#include "prefixhit/types.hpp"

namespace prefixhit::py {

namespace nb = nanobind;

/// Raises the prefixhit.errors exception class for `kind` (with `.kind` set).
[[noreturn]] void raise_error(ErrorKind kind, const std::string& message);

// Conversion helpers shared by the binding's sources (convert.cpp).
std::string py_type_name(nb::handle obj);
/// Raises Python's TypeError (a wrong type, as Python's own functions do).
[[noreturn]] void type_error(const std::string& message);
/// Raises prefixhit's InvalidArgumentError (a right type with a bad value).
[[noreturn]] void value_error(const std::string& message);
/// numpy, imported once per call site that needs it (cheap after the first import).
nb::module_ numpy();
/// A contiguous host copy of an array-like that exports no contiguous buffer: a strided numpy
/// view, a CPU torch tensor (DLPack), anything numpy.asarray understands.
nb::object contiguous_host_copy(nb::handle obj);
bool looks_like_array(nb::handle obj);
/// Registers the C++ -> Python exception translation. Called once at import.
void register_error_translation();

/// A Python object holding a read-only buffer; released on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  /// Requests a C-contiguous buffer with format information. Returns false (Python error
  /// cleared) when the object exports none or not a contiguous one.
  bool acquire(nb::handle obj);
  void release() noexcept;
  const Py_buffer& view() const noexcept { return view_; }
  /// The struct format character, without byte-order prefix ('B' when the exporter gave none).
  char format_char() const noexcept;
  /// Whether the format names a multi-byte string of `size` bytes, e.g. numpy "S32" -> "32s".
  bool is_fixed_bytes(std::size_t size) const;

 private:
  Py_buffer view_{};
  bool held_ = false;
};

/// How a digest argument may be shaped.
enum class DigestShape {
  /// A sequence of 32-byte bytes-like items, or a [n, 32] uint8 array (one request's hashes).
  sequence,
  /// Also a flat bytes-like object of n*32 bytes (batch and index arguments).
  sequence_or_flat,
};

/// Digests taken from Python: borrowed when the input is a suitable buffer (the buffer export
/// keeps it alive and unresizable), else copied while the GIL is held.
///
/// A list or tuple of `bytes` is read one of two ways:
///  - eagerly (the default): every digest is copied now, and `item(i)` gives the original
///    `bytes` objects (strong references held here, so a store cannot free them under us);
///  - lazily (`lazy = true`, single lookups): nothing is read up front. `data()` is a scratch
///    array whose entry i is filled by `fetch(i)`, which must be called with the GIL held before
///    entry i is read. Only the digests a lookup probes are ever converted (a few hundred of the
///    32768 of a long prompt), and each one read is kept referenced until the end of the call.
class Digests {
 public:
  /// `width`: the digest size in bytes (8, 16 or 32); items must be exactly that long, arrays
  /// [n, width]; narrower digests are zero-padded into BlockDigest's 32-byte form.
  /// `hold_items = false` (eager mode): copy the digests only, keeping no references to the
  /// items (item() is then unavailable): for callers that run no Python code while they use
  /// the digests, which then skip a pass over every item.
  Digests(nb::handle obj, const char* name, DigestShape shape,
          std::size_t width = BlockDigest::kSize, bool lazy = false, bool hold_items = true);
  ~Digests();
  Digests(const Digests&) = delete;
  Digests& operator=(const Digests&) = delete;
  span<const BlockDigest> view() const noexcept { return {data_, size_}; }
  std::size_t width() const noexcept { return width_; }
  std::size_t size() const noexcept { return size_; }
  const BlockDigest* data() const noexcept { return data_; }
  bool is_lazy() const noexcept { return lazy_; }
  /// Whether `item(i)` can give the original `bytes` objects: an eager list/tuple of bytes, or
  /// a lazy one after keep_items().
  bool has_items() const noexcept { return lazy_items_ != nullptr || !items_.empty(); }
  /// The original `bytes` object of digest i (a reference held by this object), or nullptr when
  /// that item was another bytes-like object. Lazy mode: only after fetch(i).
  PyObject* item(std::size_t i) const noexcept {
    return lazy_items_ != nullptr ? lazy_items_[i] : items_[i];
  }
  /// Lazy mode: the caller's own item i when it is a `bytes` object of the digest width, read
  /// without converting or holding it (borrowed: valid until Python code next runs); else null
  /// (an index past the end, another type or length: fetch() converts it or reports it).
  PyObject* raw_bytes_item(std::size_t i) const noexcept;
  /// Lazy mode: also remember each fetched item's object, for item() (a Python-set store
  /// probes with the caller's own `bytes`, whose hash is cached).
  void keep_items();
  /// Lazy mode: converts digest i into the scratch array if not done yet (GIL held). False,
  /// with a Python error set, for a bad item or when the sequence shrank below i during the
  /// call (a store that mutates the request's hash list).
  bool fetch(std::size_t i) const;
  /// Lazy mode: hints the CPU to load the list slots and objects of digests first,
  /// first+step, ... (count of them) so that their cache misses overlap instead of queueing up
  /// one fetch at a time. Reads nothing it could fault on (GIL held).
  void prefetch(std::int64_t first, std::int64_t step, int count) const noexcept;
  /// Lazy mode, native stores: copies digests first, first+step, ... (count of them) into
  /// out[0..count), holding the GIL, prefetching the run first. False with a Python error set
  /// for a bad item.
  bool gather(std::int64_t first, std::int64_t step, int count, BlockDigest* out) const;

 private:
  void from_buffer(const char* name, DigestShape shape);
  void from_sequence(nb::handle obj, const char* name);
  void lazy_sequence(nb::handle obj, const char* name);
  /// An uninitialised array of n digests: this thread's reusable buffer when free, else a new
  /// one; becomes scratch_.
  BlockDigest* take_scratch(std::size_t n);

  std::size_t width_ = BlockDigest::kSize;
  bool hold_items_ = true;

  Buffer buffer_;
  nb::object keep_;
  std::vector<BlockDigest> owned_;
  mutable std::vector<PyObject*> items_;  // strong references (eager), or borrowed from held_
  const BlockDigest* data_ = nullptr;
  std::size_t size_ = 0;
  // Lazy mode.
  bool lazy_ = false;
  std::string name_;
  struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<BlockDigest, FreeDeleter> own_scratch_;  // when the thread's buffer is busy
  BlockDigest* scratch_ = nullptr;  // uninitialised; entry i valid once fetched
  bool thread_scratch_ = false;     // scratch_ is this thread's reusable buffer (released in dtor)
  std::unique_ptr<PyObject*, FreeDeleter> own_items_;
  PyObject** lazy_items_ =
      nullptr;  // keep_items(): entry i valid once fetched (borrowed from held_)
  mutable std::vector<std::uint64_t> fetched_;  // bitmap over the n digests
  mutable std::vector<PyObject*> held_;         // strong references to the items read
};

/// A 1-D integer argument, always copied (with range checks) while the GIL is held: another
/// thread may write the caller's array during a call that has released the GIL, and the small
/// offset/length arrays are validated once and then trusted. Accepts buffers (numpy arrays,
/// array.array), sequences of ints and, when `allow_scalar`, a single int (broadcast later by the
/// caller; see `scalar()`).
template <class T>
class IntArray {
 public:
  IntArray(nb::handle obj, const char* name, bool allow_scalar = false);
  span<const T> view() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::optional<T>& scalar() const noexcept { return scalar_; }

 private:
  std::vector<T> owned_;
  std::optional<T> scalar_;
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Converts a Python int (or an object with __index__, such as numpy integers) to int64 with a
/// TypeError naming the argument for anything else (float, str, None).
std::int64_t to_int64(nb::handle obj, const char* name);

/// A Python `bytes` copy of one digest of `width` bytes.
nb::bytes digest_bytes(const BlockDigest& digest, std::size_t width = BlockDigest::kSize);

/// Whether `obj` is a DLPack-capable array that lives on a CUDA device (tensor or managed
/// memory). Host arrays (numpy, CPU tensors, pinned host memory) return false.
bool is_cuda_array(nb::handle obj);

/// The Python Coordinator: the C++ one plus its GPU engine, made on the first device batch
/// (the GIL serialises that creation).
struct PyCoordinator {
  explicit PyCoordinator(Config config) : c(std::move(config)) {}
  Coordinator c;
  std::unique_ptr<gpu::BatchLookupEngine> engine;
};

// ---- stores ------------------------------------------------------------------------------------

/// The Python-side KeySet class: the C++ KeySet.
struct PyKeySet {
  KeySet set;
};

/// The Python-side BlockIndex class: "cpu" wraps the resident index; "cuda" the device index
/// (in a CUDA build with a device).
struct PyBlockIndex {
  std::string device;
  std::unique_ptr<BlockIndex> cpu;
  std::unique_ptr<DeviceBlockIndex> gpu;
};
/// A lookup's view of a PyBlockIndex in one namespace (CPU indexes only).
const ExistenceSource* cpu_view(const PyBlockIndex& index, Namespace ns,
                                std::optional<BlockIndex::View>& storage,
                                std::size_t digest_size = BlockDigest::kSize);
bool is_block_index(nb::handle obj);
PyBlockIndex& as_block_index(nb::handle obj);
void bind_block_index(nb::module_& m);

/// A KeyPlan plus the number of groups of the coordinator that made it.
struct PyKeyPlan {
  KeyPlan plan;
  int num_groups = 0;
};
/// A remote store's answers to a KeyPlan, usable as a lookup store.
struct PyPlanAnswers {
  std::unique_ptr<PlanAnswers> answers;
  std::int64_t num_hashes = 0;
};

/// Probes a Python container with `(group_id, key) in store`, holding the GIL. A Python error
/// raised by the container stops further probing and is re-raised by `check()`.
class PyContainsSource final : public ExistenceSource {
 public:
  PyContainsSource(nb::handle container, const Digests& digests);
  ~PyContainsSource() override;
  PyContainsSource(const PyContainsSource&) = delete;
  PyContainsSource& operator=(const PyContainsSource&) = delete;
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override;
  /// The container holds keys as `bytes` of the lookup's width.
  std::size_t digest_size() const noexcept override { return digests_.width(); }
  /// A lazily read list is converted (and its items' lengths checked) as probes read it.
  bool checks_hash_widths() const noexcept override { return digests_.is_lazy(); }
  /// Re-raises a Python error a probe met, if any.
  void check() const;

 private:
  PyObject* container_;
  bool is_set_;
  const Digests& digests_;
  /// The (group_id, key) tuple a probe asks about, reused while only this source holds it.
  PyObject* pair(int group_id, PyObject* key) const;

  mutable PyObject* group_ids_[kMaxGroups] = {};
  mutable PyObject* pair_ = nullptr;
  mutable bool failed_ = false;
};

/// A native store probed with a lazily read hash list: fetches (converts) every digest a probe
/// asks for, holding the GIL, then asks the store. A bad item stops further probing; `check()`
/// re-raises its Python error. It keeps the default run_lookup: the store's lock is taken per
/// probe, never held while a conversion may run Python code (KeySet.add waits for the lock
/// holding the GIL, so holding it here could deadlock).
class LazyDigestSource final : public ExistenceSource {
 public:
  /// `positional`: the store reads hashes by their index in the request (PlanAnswers), so each
  /// probed digest is converted in place instead of gathered into a run.
  LazyDigestSource(const ExistenceSource& inner, const Digests& digests, bool positional = false)
      : inner_(inner), digests_(digests), positional_(positional) {}
  std::uint64_t probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                      std::int64_t step, int count) const override;
  std::size_t digest_size() const noexcept override { return inner_.digest_size(); }
  /// Every digest is converted (and its length checked) by fetch() before the store sees it.
  bool checks_hash_widths() const noexcept override { return true; }
  void check() const;

 private:
  const ExistenceSource& inner_;
  const Digests& digests_;
  bool positional_;
  mutable bool failed_ = false;
};

/// Whatever store argument a lookup was given, as an ExistenceSource.
class ResolvedStore {
 public:
  ResolvedStore(nb::handle store, Namespace ns, Digests& digests);
  const ExistenceSource& source() const noexcept { return *source_; }
  /// True when the source touches Python objects (the GIL must stay held, one thread): a
  /// Python container, or a hash list read lazily.
  bool needs_gil() const noexcept { return contains_.has_value() || lazy_.has_value(); }
  /// Re-raises a Python error met while probing.
  void check() const {
    if (contains_) {
      contains_->check();
    }
    if (lazy_) {
      lazy_->check();
    }
  }

 private:
  const ExistenceSource* source_ = nullptr;
  std::optional<KeySet> built_;
  std::optional<PyContainsSource> contains_;
  std::optional<LazyDigestSource> lazy_;
  std::optional<BlockIndex::View> view_;
};

/// Fills a KeySet from an iterable of (group_id, digest) pairs; TypeError/ValueError naming the
/// first bad entry.
void fill_key_set(KeySet& set, nb::handle iterable, const char* name);

/// The result of find_longest_cache_hits (host arrays, whatever engine produced them).
struct PyBatchResult {
  BatchLookupResult result;
};

// ---- GPU paths (gpu.cpp) -------------------------------------------------------------------
// Host-array calls go through the C++ engine's host overloads; device arrays (DLPack, CUDA)
// need this module to be built with CUDA (PREFIXHIT_PY_WITH_CUDA) and throw Unavailable
// otherwise. Streams are ints (cudaStream_t values), torch/cupy stream objects, or None.

cudaStream_t to_stream(nb::handle stream);
/// The coordinator's GPU engine, made on first use; Unavailable without CUDA or a device.
gpu::BatchLookupEngine& engine_of(PyCoordinator& self);
std::unique_ptr<DeviceBlockIndex> make_device_index(const DeviceBlockIndexOptions& options,
                                                    nb::handle stream);
/// insert (erase = false) or erase on a device index; keys and group ids host or device.
std::size_t device_index_update(DeviceBlockIndex& index, Namespace ns, nb::handle group_ids,
                                nb::handle keys, nb::handle stream, bool erase);
/// A host numpy bool array: whether each (group_id, key) is in the device index.
nb::object device_index_contains(const DeviceBlockIndex& index, Namespace ns, nb::handle group_ids,
                                 nb::handle keys, nb::handle stream);
/// apply_eagle as find_longest_cache_hits takes it: None/True (empty: apply everywhere), False,
/// or one flag per request.
std::vector<std::uint8_t> eagle_flags(nb::handle apply_eagle, std::size_t requests);

/// A batch against a device index: host arrays or device arrays (then `stream` orders it).
PyBatchResult gpu_batch(PyCoordinator& self, nb::handle digests, nb::handle offsets,
                        nb::handle max_lengths, nb::handle apply_eagle, const PyBlockIndex& store,
                        Namespace ns, nb::handle stream);

// ---- results ----------------------------------------------------------------------------------

/// [[False] * placeholders + [True] * loaded, ...] per group id.
nb::list lookup_masks(const LookupResult& result);
/// [None | [bool, ...], ...] per group id.
nb::list chunk_masks(const std::vector<ChunkMask>& masks);

/// A numpy array that owns `values` (moved into a capsule).
template <class T>
nb::object owned_array(std::vector<T>&& values, std::initializer_list<std::size_t> shape);
/// A 1-D numpy bool array that owns `values` (0 or 1 each).
nb::object owned_bool_array(std::vector<std::uint8_t>&& values);

/// prefixhit.Mask (masks.cpp): a lazily expanded list of bools. Either a run of `num_blocks`
/// entries whose first `num_placeholders` are False (a lookup's block mask), or `bytes`.
struct PyMask {
  std::int64_t num_blocks = 0;
  std::int64_t num_placeholders = 0;
  std::shared_ptr<const std::vector<std::uint8_t>> bytes;
  std::int64_t size() const noexcept { return num_blocks; }
  bool at(std::int64_t i) const noexcept;
};
/// A tuple of Mask, one per group id, for a lookup result.
nb::tuple lazy_lookup_masks(const LookupResult& result);
/// A tuple of (None | Mask), one per group id, for store/lookup masks (moves the bytes).
nb::tuple lazy_chunk_masks(std::vector<ChunkMask>&& masks);
void bind_masks(nb::module_& m);

// ---- specs ------------------------------------------------------------------------------------

/// A GroupSpec from a prefixhit.GroupSpec or a dict shaped like the vectors' group objects.
/// `where` names the argument in messages, e.g. "groups[2]".
GroupSpec spec_from_object(nb::handle obj, const std::string& where);
/// "pr49069" / "vllm-0.33" -> Semantics; TypeError for a non-str, InvalidConfigError otherwise.
Semantics semantics_from(nb::handle value);
/// Compact, key-sorted JSON text of a dict of extra spec fields (GroupSpec::identity).
std::string canonical_identity(nb::handle fields, const std::string& where);
/// The vector-style dict of a spec (fields that are unset are left out).
nb::dict spec_to_dict(const GroupSpec& spec);

// ---- module pieces ----------------------------------------------------------------------------

void bind_specs(nb::module_& m);
void bind_coordinator(nb::module_& m);
void bind_stores(nb::module_& m);
void bind_batch(nb::class_<PyCoordinator>& coordinator, nb::module_& m);
void bind_gpu_info(nb::module_& m);
void bind_hashing(nb::module_& m);

}  // namespace prefixhit::py
