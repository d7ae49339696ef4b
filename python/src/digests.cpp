// Digest conversion for the bindings: bytes, lists, numpy arrays and lazily read sequences.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {
// ---- Digests -----------------------------------------------------------------------------------

namespace {

/// One reusable lazy-digest scratch buffer per thread.
struct ThreadScratch {
  void* buffer = nullptr;
  std::size_t capacity = 0;
  void* items = nullptr;
  std::size_t items_capacity = 0;
  bool busy = false;
  ThreadScratch() = default;
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  ~ThreadScratch() {
    std::free(buffer);
    std::free(items);
  }
};

/// Grows `buffer` (uninitialised contents) to at least `bytes`.
void* reserve(void*& buffer, std::size_t& capacity, std::size_t bytes) {
  if (capacity < bytes) {
    void* raw = std::malloc(bytes);
    if (raw == nullptr) {
      throw std::bad_alloc();
    }
    std::free(buffer);
    buffer = raw;
    capacity = bytes;
  }
  return buffer;
}

ThreadScratch& thread_scratch() {
  thread_local ThreadScratch scratch;
  return scratch;
}

}  // namespace

// ---- (digest conversion)
// --------------------------------------------------------------------------------

Digests::Digests(nb::handle obj, const char* name, DigestShape shape, std::size_t width, bool lazy,
                 bool hold_items)
    : width_(width), hold_items_(hold_items) {
  check_digest_size(width, name);
  PyObject* o = obj.ptr();
  if (PyList_Check(o) || PyTuple_Check(o)) {
    if (lazy) {
      lazy_sequence(obj, name);
    } else {
      from_sequence(obj, name);
    }
    return;
  }
  if ((PyBytes_Check(o) || PyByteArray_Check(o)) && shape == DigestShape::sequence) {
    type_error(std::string(name) + " must be a sequence of " + std::to_string(width_) +
               "-byte digests (a list of bytes or a [n, " + std::to_string(width_) +
               "] uint8 array), got a single " + py_type_name(obj));
  }
  if (is_cuda_array(obj)) {
    type_error(std::string(name) +
               " is a CUDA array; this call takes host memory (only the batch API "
               "find_longest_cache_hits accepts device arrays)");
  }
  keep_ = nb::borrow(obj);
  if (!buffer_.acquire(keep_)) {
    if (PyObject_CheckBuffer(o) || looks_like_array(obj)) {
      keep_ = contiguous_host_copy(obj);
      if (!buffer_.acquire(keep_)) {
        type_error(std::string(name) + ": cannot read " + py_type_name(obj) + " as uint8 digests");
      }
    } else {
      from_sequence(obj, name);  // any other iterable of bytes
      return;
    }
  }
  if (buffer_.format_char() == 'O') {  // a numpy object array of bytes: treat as a sequence
    buffer_.release();
    from_sequence(obj, name);
    return;
  }
  from_buffer(name, shape);
}

void Digests::from_buffer(const char* name, DigestShape shape) {
  const Py_buffer& v = buffer_.view();
  const std::size_t k = width_;
  const char f = buffer_.format_char();
  const bool bytes_items = v.itemsize == 1 && (f == 'B' || f == 'b' || f == 'c');
  if (v.ndim == 2 && bytes_items && v.shape[1] == static_cast<Py_ssize_t>(k)) {
    size_ = static_cast<std::size_t>(v.shape[0]);
  } else if (v.ndim == 1 && buffer_.is_fixed_bytes(k)) {
    size_ = static_cast<std::size_t>(v.shape[0]);  // numpy dtype "S32"
  } else if (v.ndim == 1 && bytes_items && shape == DigestShape::sequence_or_flat) {
    if (v.len % static_cast<Py_ssize_t>(k) != 0) {
      value_error(std::string(name) + " has " + std::to_string(v.len) +
                  " bytes, which is not a whole number of " + std::to_string(k) + "-byte digests");
    }
    size_ = static_cast<std::size_t>(v.len) / k;
  } else if (!bytes_items && !buffer_.is_fixed_bytes(k) && v.ndim >= 1) {
    type_error(std::string(name) + " must hold uint8 digests, got an array of format '" +
               (v.format ? v.format : "B") + "' (itemsize " + std::to_string(v.itemsize) + ")");
  } else {
    std::string dims;
    for (int d = 0; d < v.ndim; ++d) {
      dims += (d ? ", " : "") + std::to_string(v.shape[d]);
    }
    value_error(std::string(name) + " must have shape [n, " + std::to_string(k) +
                "] (uint8), got [" + dims + "]");
  }
  // Borrow when the memory is suitably aligned (numpy and bytes always are); else copy.
  // Narrower digests are widened (zero-padded) into a copy.
  if (k != BlockDigest::kSize) {
    owned_.assign(size_, BlockDigest{});
    for (std::size_t i = 0; i < size_; ++i) {
      std::memcpy(owned_[i].bytes.data(), static_cast<const std::uint8_t*>(v.buf) + i * k, k);
    }
    data_ = owned_.data();
  } else if (reinterpret_cast<std::uintptr_t>(v.buf) % alignof(BlockDigest) == 0) {
    data_ = static_cast<const BlockDigest*>(v.buf);
  } else {
    owned_.resize(size_);
    if (size_ != 0) {
      std::memcpy(owned_.data(), v.buf, size_ * k);
    }
    data_ = owned_.data();
  }
}

void Digests::from_sequence(nb::handle obj, const char* name) {
  PyObject* fast = PySequence_Fast(obj.ptr(), "");
  if (fast == nullptr) {
    PyErr_Clear();
    type_error(std::string(name) + " must be a sequence of " + std::to_string(width_) +
               "-byte digests, got " + py_type_name(obj));
  }
  keep_ = nb::steal(fast);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  // Into this thread's reusable buffer (a long prompt's digests are 1 MiB: a new one per call
  // would fault its pages in again every time).
  BlockDigest* const digests = take_scratch(static_cast<std::size_t>(n));
  items_.assign(hold_items_ ? static_cast<std::size_t>(n) : 0, nullptr);
  bool all_bytes = hold_items_;
  const auto k = static_cast<Py_ssize_t>(width_);
  // A throwing constructor runs no destructor: drop the references taken so far ourselves.
  struct Unwind {
    std::vector<PyObject*>& items;
    bool armed = true;
    ~Unwind() {
      if (armed) {
        for (PyObject*& item : items) {
          Py_XDECREF(item);
          item = nullptr;
        }
      }
    }
  } unwind{items_};
  // The items of a long list are scattered objects: each is a cache miss, so start the loads
  // of the items a few iterations ahead.
  constexpr Py_ssize_t kAhead = 8;
  for (Py_ssize_t i = 0; i < std::min(n, kAhead); ++i) {
    __builtin_prefetch(items[i]);
    __builtin_prefetch(reinterpret_cast<const char*>(items[i]) + offsetof(PyBytesObject, ob_sval));
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const char* ahead = reinterpret_cast<const char*>(items[i + kAhead]);
      __builtin_prefetch(ahead);
      __builtin_prefetch(ahead + offsetof(PyBytesObject, ob_sval));
    }
    PyObject* item = items[i];
    auto* out = digests[i].bytes.data();
    Py_ssize_t len = -1;
    if (PyBytes_Check(item)) {
      len = PyBytes_GET_SIZE(item);
      if (len == static_cast<Py_ssize_t>(BlockDigest::kSize) && k == len) {
        std::memcpy(out, PyBytes_AS_STRING(item), BlockDigest::kSize);  // a fixed-size copy
      } else if (len == k) {
        std::memcpy(out, PyBytes_AS_STRING(item), k);
        std::memset(out + k, 0, BlockDigest::kSize - static_cast<std::size_t>(k));
      }
      if (hold_items_) {
        Py_INCREF(item);  // owned: a store's Python code may drop the caller's list entries
        items_[static_cast<std::size_t>(i)] = item;
      }
    } else {
      all_bytes = false;
      Buffer b;
      if (PyUnicode_Check(item) || !b.acquire(item)) {
        type_error(std::string(name) + "[" + std::to_string(i) + "] must be a " +
                   std::to_string(k) + "-byte bytes object, got " + py_type_name(item));
      }
      len = b.view().len;
      if (len == k) {
        std::memcpy(out, b.view().buf, k);
        std::memset(out + k, 0, BlockDigest::kSize - static_cast<std::size_t>(k));
      }
    }
    if (len != k) {
      value_error(std::string(name) + "[" + std::to_string(i) + "] must be " + std::to_string(k) +
                  " bytes, got " + std::to_string(len));
    }
  }
  if (!all_bytes) {  // keep the references only when every item is a bytes object
    for (PyObject* item : items_) {
      Py_XDECREF(item);
    }
    items_.clear();
  }
  unwind.armed = false;
  data_ = digests;
  size_ = static_cast<std::size_t>(n);
}

BlockDigest* Digests::take_scratch(std::size_t n) {
  if (n == 0) {
    return nullptr;
  }
  // Uninitialised on purpose: every entry is written before it is read. Reuse one buffer per
  // thread (a nested call, from a store's Python code, gets its own).
  ThreadScratch& mine = thread_scratch();
  const std::size_t bytes = n * sizeof(BlockDigest);
  if (!mine.busy) {
    scratch_ = static_cast<BlockDigest*>(reserve(mine.buffer, mine.capacity, bytes));
    mine.busy = true;
    thread_scratch_ = true;
  } else {
    void* raw = std::malloc(bytes);
    if (raw == nullptr) {
      throw std::bad_alloc();
    }
    own_scratch_.reset(static_cast<BlockDigest*>(raw));
    scratch_ = own_scratch_.get();
  }
  return scratch_;
}

void Digests::lazy_sequence(nb::handle obj, const char* name) {
  keep_ = nb::borrow(obj);  // the list itself: its entries are read (and checked) under the GIL
  lazy_ = true;
  name_ = name;
  size_ = static_cast<std::size_t>(PySequence_Fast_GET_SIZE(obj.ptr()));
  if (size_ == 0) {
    return;
  }
  fetched_.assign((size_ + 63) / 64, 0);
  // Only the entries a lookup probes are ever written or read.
  data_ = take_scratch(size_);
}

void Digests::keep_items() {
  if (!lazy_ || lazy_items_ != nullptr || size_ == 0) {
    return;
  }
  // Uninitialised like the digest scratch: entry i is written by fetch(i) before any read.
  const std::size_t bytes = size_ * sizeof(PyObject*);
  if (thread_scratch_) {
    ThreadScratch& mine = thread_scratch();
    lazy_items_ = static_cast<PyObject**>(reserve(mine.items, mine.items_capacity, bytes));
  } else {
    void* raw = std::malloc(bytes);
    if (raw == nullptr) {
      throw std::bad_alloc();
    }
    own_items_.reset(static_cast<PyObject**>(raw));
    lazy_items_ = own_items_.get();
  }
}

void Digests::prefetch(std::int64_t first, std::int64_t step, int count) const noexcept {
  PyObject* seq = keep_.ptr();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** slots = PySequence_Fast_ITEMS(seq);
  for (int k = 0; k < count; ++k) {
    const std::int64_t i = first + k * step;
    if (i >= 0 && i < n) {
      __builtin_prefetch(&slots[i]);
    }
  }
  for (int k = 0; k < count; ++k) {
    const std::int64_t i = first + k * step;
    if (i >= 0 && i < n &&
        (fetched_[static_cast<std::size_t>(i) / 64] &
         (std::uint64_t{1} << (static_cast<std::size_t>(i) % 64))) == 0) {
      const char* object = reinterpret_cast<const char*>(slots[i]);
      __builtin_prefetch(object);
      __builtin_prefetch(object + offsetof(PyBytesObject, ob_sval));
      __builtin_prefetch(&scratch_[i], 1);
    }
  }
}

bool Digests::gather(std::int64_t first, std::int64_t step, int count, BlockDigest* out) const {
  PyObject* seq = keep_.ptr();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** slots = PySequence_Fast_ITEMS(seq);
  const auto k = static_cast<Py_ssize_t>(width_);
  // Start every miss of the run before waiting on any (list slots, then the objects).
  for (int j = 0; j < count; ++j) {
    const std::int64_t i = first + j * step;
    if (i >= 0 && i < n) {
      __builtin_prefetch(&slots[i]);
    }
  }
  for (int j = 0; j < count; ++j) {
    const std::int64_t i = first + j * step;
    if (i >= 0 && i < n) {
      const char* object = reinterpret_cast<const char*>(slots[i]);
      __builtin_prefetch(object);
      __builtin_prefetch(object + offsetof(PyBytesObject, ob_sval));
    }
  }
  for (int j = 0; j < count; ++j) {
    const std::int64_t i = first + j * step;
    // No Python code runs while a native store is probed (the GIL is held throughout), so
    // the list cannot change under this loop: the bytes are copied without a reference.
    PyObject* item = i >= 0 && i < n ? slots[i] : nullptr;
    if (item != nullptr && PyBytes_Check(item) && PyBytes_GET_SIZE(item) == k) {
      std::memcpy(out[j].bytes.data(), PyBytes_AS_STRING(item), static_cast<std::size_t>(k));
      if (static_cast<std::size_t>(k) < BlockDigest::kSize) {
        std::memset(out[j].bytes.data() + k, 0, BlockDigest::kSize - static_cast<std::size_t>(k));
      }
      continue;
    }
    // Anything else (another bytes-like object, a bad item, an index past the end) takes the
    // checked path, which converts it or sets the error.
    if (i < 0 || !fetch(static_cast<std::size_t>(i))) {
      if (i < 0) {
        PyErr_SetString(PyExc_IndexError, "negative digest index");
      }
      return false;
    }
    out[j] = scratch_[i];
  }
  return true;
}

PyObject* Digests::raw_bytes_item(std::size_t i) const noexcept {
  PyObject* seq = keep_.ptr();
  // Re-read the length: a store's Python code may have shrunk the caller's list meanwhile.
  if (static_cast<Py_ssize_t>(i) >= PySequence_Fast_GET_SIZE(seq)) {
    return nullptr;
  }
  PyObject* item = PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i));
  return PyBytes_Check(item) && static_cast<std::size_t>(PyBytes_GET_SIZE(item)) == width_
             ? item
             : nullptr;
}

bool Digests::fetch(std::size_t i) const {
  std::uint64_t& word = fetched_[i / 64];
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if ((word & bit) != 0) {
    return true;
  }
  PyObject* seq = keep_.ptr();
  // Re-read the length: a store's Python code may have shrunk the caller's list since the start.
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (static_cast<Py_ssize_t>(i) >= n) {
    PyErr_Format(PyExc_RuntimeError,
                 "%s changed size during the lookup (%zd items left, item %zu "
                 "needed)",
                 name_.c_str(), n, i);
    return false;
  }
  PyObject* item = PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i));
  // The coordinator's digest width (a narrower digest is stored zero-padded in its slot).
  const auto k = static_cast<Py_ssize_t>(width_);
  auto* out = scratch_[i].bytes.data();
  auto where = [&] { return name_ + "[" + std::to_string(i) + "]"; };
  try {
    Py_ssize_t len = -1;
    const void* src = nullptr;
    Buffer b;
    if (PyBytes_Check(item)) {
      len = PyBytes_GET_SIZE(item);
      src = PyBytes_AS_STRING(item);
    } else {
      if (PyUnicode_Check(item) || !b.acquire(item)) {
        type_error(where() + " must be a " + std::to_string(k) + "-byte bytes object, got " +
                   py_type_name(item));
      }
      len = b.view().len;
      src = b.view().buf;
    }
    if (len != k) {
      value_error(where() + " must be " + std::to_string(k) + " bytes, got " + std::to_string(len));
    }
    std::memcpy(out, src, static_cast<std::size_t>(k));
    if (static_cast<std::size_t>(k) < BlockDigest::kSize) {
      std::memset(out + k, 0, BlockDigest::kSize - static_cast<std::size_t>(k));
    }
  } catch (nb::python_error& e) {
    e.restore();
    return false;
  }
  Py_INCREF(item);
  held_.push_back(item);
  if (lazy_items_ != nullptr) {
    lazy_items_[i] = PyBytes_Check(item) ? item : nullptr;
  }
  word |= bit;
  return true;
}

Digests::~Digests() {
  if (thread_scratch_) {
    thread_scratch().busy = false;
  }
  if (lazy_) {
    for (PyObject* item : held_) {
      Py_DECREF(item);
    }
  } else {
    for (PyObject* item : items_) {
      Py_XDECREF(item);
    }
  }
}

}  // namespace prefixhit::py
