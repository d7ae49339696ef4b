// Input conversion for the bindings: digests, integer arrays, stores, and result lists.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

std::string py_type_name(nb::handle obj) {
  return Py_TYPE(obj.ptr())->tp_name;
}

[[noreturn]] void type_error(const std::string& message) {
  PyErr_SetString(PyExc_TypeError, message.c_str());
  throw nb::python_error();
}

[[noreturn]] void value_error(const std::string& message) {
  raise_error(ErrorKind::invalid_argument, message);
}

/// numpy, imported once per call site that needs it (cheap after the first import).
nb::module_ numpy() {
  return nb::module_::import_("numpy");
}

/// A contiguous host copy of an array-like that exports no contiguous buffer: a strided numpy
/// view, a CPU torch tensor (DLPack), anything numpy.asarray understands.
nb::object contiguous_host_copy(nb::handle obj) {
  return numpy().attr("ascontiguousarray")(obj);
}

bool looks_like_array(nb::handle obj) {
  return nb::hasattr(obj, "__array__") || nb::hasattr(obj, "__dlpack__") ||
         nb::hasattr(obj, "__array_interface__");
}

bool is_signed_format(char c) {
  return std::strchr("bhilqn", c) != nullptr;
}
bool is_unsigned_format(char c) {
  return std::strchr("BHILQN?", c) != nullptr;
}

/// Whether a buffer's struct format names the other byte order than this machine's
/// (numpy ">i8" exports ">q"; '=' and '@' are native, '<' little and '>' / '!' big).
bool foreign_byte_order(const char* format) {
  if (format == nullptr) {
    return false;
  }
  const std::uint16_t probe = 1;
  std::uint8_t first = 0;
  std::memcpy(&first, &probe, 1);
  const bool little = first == 1;
  return (*format == '<' && !little) || ((*format == '>' || *format == '!') && little);
}

template <class U>
U maybe_swap(U v, bool swap) {
  if (!swap) {
    return v;
  }
  U out = 0;
  for (std::size_t b = 0; b < sizeof(U); ++b) {
    out = static_cast<U>((out << 8) | ((v >> (8 * b)) & 0xFF));
  }
  return out;
}

/// Reads element i of an integer buffer as int64 (unsigned values above INT64_MAX saturate so
/// the range check rejects them). `swap`: the buffer is in the other byte order.
std::int64_t read_int(const Py_buffer& view, bool is_signed, std::size_t i, bool swap) {
  const auto* p =
      static_cast<const std::uint8_t*>(view.buf) + i * static_cast<std::size_t>(view.itemsize);
  switch (view.itemsize) {
    case 1: {
      std::uint8_t v;
      std::memcpy(&v, p, 1);
      return is_signed ? static_cast<std::int8_t>(v) : v;
    }
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      v = maybe_swap(v, swap);
      return is_signed ? static_cast<std::int16_t>(v) : v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      v = maybe_swap(v, swap);
      return is_signed ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      v = maybe_swap(v, swap);
      if (is_signed) {
        return static_cast<std::int64_t>(v);
      }
      return v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                 ? std::numeric_limits<std::int64_t>::max()
                 : static_cast<std::int64_t>(v);
    }
  }
}

}  // namespace

// ---- Buffer -----------------------------------------------------------------------------------

bool Buffer::acquire(nb::handle obj) {
  release();
  if (!PyObject_CheckBuffer(obj.ptr())) {
    return false;
  }
  if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    return false;
  }
  held_ = true;
  return true;
}

void Buffer::release() noexcept {
  if (held_) {
    PyBuffer_Release(&view_);
    held_ = false;
  }
}

char Buffer::format_char() const noexcept {
  const char* f = view_.format;
  if (f == nullptr) {
    return 'B';
  }
  while (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!') {
    ++f;
  }
  return *f;
}

bool Buffer::is_fixed_bytes(std::size_t size) const {
  if (view_.format == nullptr || static_cast<std::size_t>(view_.itemsize) != size) {
    return false;
  }
  std::string f = view_.format;
  f.erase(0, f.find_first_not_of("@=<>!"));
  return f == std::to_string(size) + "s";
}

// ---- scalars -----------------------------------------------------------------------------------

std::int64_t to_int64(nb::handle obj, const char* name) {
  if (PyLong_Check(obj.ptr()) || (!PyFloat_Check(obj.ptr()) && PyIndex_Check(obj.ptr()))) {
    nb::object index = nb::steal(PyNumber_Index(obj.ptr()));
    if (!index.is_valid()) {
      throw nb::python_error();
    }
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0) {
      value_error(std::string(name) + " is out of the 64-bit integer range");
    }
    if (value == -1 && PyErr_Occurred()) {
      throw nb::python_error();
    }
    return static_cast<std::int64_t>(value);
  }
  type_error(std::string(name) + " must be an int, got " + py_type_name(obj));
}

nb::bytes digest_bytes(const BlockDigest& digest, std::size_t width) {
  return nb::bytes(reinterpret_cast<const char*>(digest.bytes.data()), width);
}

bool is_cuda_array(nb::handle obj) {
  PyObject* o = obj.ptr();
  if (PyList_Check(o) || PyTuple_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) ||
      PyLong_Check(o) || o == Py_None) {
    return false;
  }
  // Buffer exporters (numpy, bytes, array.array) are host memory: skip the DLPack query, which
  // costs a Python call per argument on the batch path.
  if (PyObject_CheckBuffer(o) || !nb::hasattr(obj, "__dlpack_device__")) {
    return false;
  }
  nb::object device = obj.attr("__dlpack_device__")();
  const auto type = nb::cast<std::int64_t>(device[0]);
  constexpr std::int64_t kDLCUDA = 2;
  constexpr std::int64_t kDLCUDAManaged = 13;
  return type == kDLCUDA || type == kDLCUDAManaged;
}

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

// ---- IntArray ----------------------------------------------------------------------------------

template <class T>
IntArray<T>::IntArray(nb::handle obj, const char* name, bool allow_scalar) {
  PyObject* o = obj.ptr();
  auto check = [&](std::int64_t value, std::size_t i, bool indexed) -> T {
    if (value < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        (std::is_same_v<T, std::int64_t>
             ? false
             : value > static_cast<std::int64_t>(std::numeric_limits<T>::max()))) {
      value_error(std::string(name) + (indexed ? "[" + std::to_string(i) + "]" : "") + " = " +
                  std::to_string(value) + " is out of range");
    }
    return static_cast<T>(value);
  };
  const bool is_scalar_like = PyLong_Check(o) || (!PyFloat_Check(o) && !PyObject_CheckBuffer(o) &&
                                                  !PySequence_Check(o) && PyIndex_Check(o));
  if (is_scalar_like) {
    if (!allow_scalar) {
      type_error(std::string(name) + " must be a 1-D integer array or a sequence of ints, got " +
                 py_type_name(obj));
    }
    scalar_ = check(to_int64(obj, name), 0, false);
    return;
  }
  if (PyFloat_Check(o) || PyUnicode_Check(o) || o == Py_None) {
    type_error(std::string(name) + " must be " + (allow_scalar ? "an int or " : "") +
               "a 1-D integer array, got " + py_type_name(obj));
  }
  if (is_cuda_array(obj)) {
    type_error(std::string(name) + " is a CUDA array, but the other arguments are host arrays");
  }
  if (!PyList_Check(o) && !PyTuple_Check(o)) {
    // The buffer is held only while its values are copied (issue 13: the caller's array may be
    // written by another thread once the GIL is released, so nothing reads it after this).
    nb::object keep = nb::borrow(obj);
    Buffer buffer;
    bool have = buffer.acquire(keep);
    if (!have && (PyObject_CheckBuffer(o) || looks_like_array(obj))) {
      keep = contiguous_host_copy(obj);
      have = buffer.acquire(keep);
    }
    if (have) {
      const Py_buffer& v = buffer.view();
      const char f = buffer.format_char();
      const bool is_signed = is_signed_format(f);
      const bool swap = foreign_byte_order(v.format);
      if (!is_signed && !is_unsigned_format(f)) {
        type_error(std::string(name) + " must hold integers, got an array of format '" +
                   (v.format ? v.format : "?") + "'");
      }
      if (v.ndim == 0) {
        if (!allow_scalar) {
          type_error(std::string(name) + " must be a 1-D integer array, got a scalar");
        }
        scalar_ = check(read_int(v, is_signed, 0, swap), 0, false);
        return;
      }
      if (v.ndim != 1) {
        value_error(std::string(name) + " must be 1-D, got " + std::to_string(v.ndim) +
                    " dimensions");
      }
      size_ = static_cast<std::size_t>(v.shape[0]);
      owned_.resize(size_);
      if (v.itemsize == static_cast<Py_ssize_t>(sizeof(T)) && is_signed == std::is_signed_v<T> &&
          f != '?' && !swap) {
        if (size_ != 0) {
          std::memcpy(owned_.data(), v.buf, size_ * sizeof(T));
        }
        data_ = owned_.data();
        return;
      }
      for (std::size_t i = 0; i < size_; ++i) {
        owned_[i] = check(read_int(v, is_signed, i, swap), i, true);
      }
      data_ = owned_.data();
      return;
    }
  }
  PyObject* fast = PySequence_Fast(o, "");
  if (fast == nullptr) {
    PyErr_Clear();
    type_error(std::string(name) + " must be a 1-D integer array or a sequence of ints, got " +
               py_type_name(obj));
  }
  nb::object hold = nb::steal(fast);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  owned_.resize(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    // A plain int in range is read directly: the item's name is built only for an error (a
    // store's answer list has one item per key, tens of thousands).
    int overflow = 0;
    const long long plain =
        PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
    std::int64_t value = plain;
    if (!PyLong_CheckExact(item) || overflow != 0) {
      const std::string item_name = std::string(name) + "[" + std::to_string(i) + "]";
      value = to_int64(item, item_name.c_str());
    }
    owned_[static_cast<std::size_t>(i)] = check(value, static_cast<std::size_t>(i), true);
  }
  data_ = owned_.data();
  size_ = owned_.size();
}

template class IntArray<std::int64_t>;
template class IntArray<std::int32_t>;

// ---- stores ------------------------------------------------------------------------------------

PyContainsSource::PyContainsSource(nb::handle container, const Digests& digests)
    : container_(container.ptr()),
      is_set_(PyAnySet_CheckExact(container.ptr())),
      digests_(digests) {}

PyContainsSource::~PyContainsSource() {
  for (PyObject*& id : group_ids_) {
    Py_XDECREF(id);
  }
  Py_XDECREF(pair_);
}

PyObject* PyContainsSource::pair(int group_id, PyObject* key) const {
  PyObject*& id = group_ids_[group_id];
  if (id == nullptr && (id = PyLong_FromLong(group_id)) == nullptr) {
    return nullptr;
  }
#if PY_VERSION_HEX < 0x030E0000
  // One tuple for every probe, its items swapped in place: a set probe then allocates nothing
  // (a new tuple per probe also ran the cyclic GC every few hundred probes). Only while this
  // source holds the only reference (a container's Python code may keep the pair it was asked
  // about), and only where tuples do not cache their hash (they do from Python 3.14 on).
  if (pair_ != nullptr && Py_REFCNT(pair_) == 1) {
    PyObject* old_id = PyTuple_GET_ITEM(pair_, 0);
    PyObject* old_key = PyTuple_GET_ITEM(pair_, 1);
    Py_INCREF(id);
    Py_INCREF(key);
    PyTuple_SET_ITEM(pair_, 0, id);
    PyTuple_SET_ITEM(pair_, 1, key);
    Py_DECREF(old_id);
    Py_DECREF(old_key);
    Py_INCREF(pair_);
    return pair_;
  }
  Py_CLEAR(pair_);
  pair_ = PyTuple_Pack(2, id, key);
  Py_XINCREF(pair_);
  return pair_;
#else
  return PyTuple_Pack(2, id, key);
#endif
}

std::uint64_t PyContainsSource::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                                      std::int64_t step, int count) const {
  if (failed_ || group_id < 0 || group_id >= kMaxGroups) {
    return 0;
  }
  // Index of hashes[first] in the whole digest input (a batch passes a request's sub-range).
  const std::int64_t base = hashes - digests_.data();
  if (digests_.is_lazy() && count > 1) {
    digests_.prefetch(base + first, step, count);
  }
  std::uint64_t bits = 0;
  for (int k = 0; k < count; ++k) {
    const std::int64_t i = first + k * step;
    const auto index = static_cast<std::size_t>(base + i);
    // The caller's own bytes object: the container hashes it (its hash is cached by CPython
    // after the first use) and compares it, as the reference's `(group, hash) in set` does.
    // A lazy list's bytes item of the right width is used as it is (no conversion; the pair
    // holds a reference while the container runs); anything else is fetched (converted, or
    // reported) and then held by `digests_` for the whole call.
    PyObject* key = digests_.is_lazy() ? digests_.raw_bytes_item(index) : nullptr;
    if (key != nullptr) {
      Py_INCREF(key);
    } else {
      if (digests_.is_lazy() && !digests_.fetch(index)) {
        failed_ = true;  // the Python error stays set; check() raises it
        return 0;
      }
      key = digests_.has_items() ? digests_.item(index) : nullptr;
      if (key != nullptr) {
        Py_INCREF(key);
      } else {
        key = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(hashes[i].bytes.data()),
                                        static_cast<Py_ssize_t>(digests_.width()));
      }
    }
    PyObject* probe_pair = key == nullptr ? nullptr : pair(group_id, key);
    Py_XDECREF(key);
    const int found = probe_pair == nullptr ? -1
                      : is_set_             ? PySet_Contains(container_, probe_pair)
                                            : PySequence_Contains(container_, probe_pair);
    Py_XDECREF(probe_pair);
    if (found < 0) {
      failed_ = true;  // the Python error stays set; check() raises it
      return 0;
    }
    if (found != 0) {
      bits |= std::uint64_t{1} << k;
    }
  }
  return bits;
}

void PyContainsSource::check() const {
  if (failed_) {
    throw nb::python_error();
  }
}

void fill_key_set(KeySet& set, nb::handle iterable, const char* name) {
  nb::object it = nb::steal(PyObject_GetIter(iterable.ptr()));
  if (!it.is_valid()) {
    PyErr_Clear();
    type_error(std::string(name) + " must be an iterable of (group_id, key) pairs, got " +
               py_type_name(iterable));
  }
  std::size_t index = 0;
  while (true) {
    nb::object entry = nb::steal(PyIter_Next(it.ptr()));
    if (!entry.is_valid()) {
      if (PyErr_Occurred()) {
        throw nb::python_error();
      }
      break;
    }
    const std::string where = std::string(name) + " entry " + std::to_string(index);
    if (!(PyTuple_Check(entry.ptr()) || PyList_Check(entry.ptr())) || nb::len(entry) != 2) {
      type_error(where + " must be a (group_id, key) pair, got " + py_type_name(entry));
    }
    const std::int64_t gid = to_int64(entry[0], (where + " group_id").c_str());
    Digests key(nb::make_tuple(entry[1]), where.c_str(), DigestShape::sequence, set.digest_size());
    // Ids that fit no configuration can never match; the reference accepts them, so do we.
    if (gid >= std::numeric_limits<int>::min() && gid <= std::numeric_limits<int>::max()) {
      set.insert(static_cast<int>(gid), key.data()[0]);
    }
    ++index;
  }
}

namespace {

bool is_abc_instance(nb::handle obj, const char* abc_name) {
  static PyObject* abc_module = nullptr;  // kept for the process lifetime, as CPython's own are
  if (abc_module == nullptr) {
    abc_module = PyImport_ImportModule("collections.abc");
    if (abc_module == nullptr) {
      throw nb::python_error();
    }
  }
  nb::object cls = nb::steal(PyObject_GetAttrString(abc_module, abc_name));
  if (!cls.is_valid()) {
    throw nb::python_error();
  }
  const int r = PyObject_IsInstance(obj.ptr(), cls.ptr());
  if (r < 0) {
    throw nb::python_error();
  }
  return r == 1;
}

}  // namespace

std::uint64_t LazyDigestSource::probe(int group_id, const BlockDigest* hashes, std::int64_t first,
                                      std::int64_t step, int count) const {
  if (failed_) {
    return 0;
  }
  if (positional_) {
    const std::int64_t base = hashes - digests_.data();
    for (int k = 0; k < count; ++k) {
      if (!digests_.fetch(static_cast<std::size_t>(base + first + k * step))) {
        failed_ = true;  // the Python error stays set; check() raises it
        return 0;
      }
    }
    return inner_.probe(group_id, hashes, first, step, count);
  }
  // The probe's digests, gathered into a contiguous run: a native store reads only the keys
  // it is asked about, so asking for run[0..count) with step 1 gives the same answer.
  BlockDigest run[64];
  if (count <= 0 || count > 64 ||
      !digests_.gather(hashes - digests_.data() + first, step, count, run)) {
    failed_ = count > 0;  // the Python error stays set; check() raises it
    return 0;
  }
  return inner_.probe(group_id, run, 0, 1, count);
}

void LazyDigestSource::check() const {
  if (failed_) {
    throw nb::python_error();
  }
}

ResolvedStore::ResolvedStore(nb::handle store, Namespace ns, Digests& digests) {
  PyObject* o = store.ptr();
  auto no_namespace = [&](const char* what) {
    if (ns != 0) {
      value_error(std::string("namespace applies only to a BlockIndex store, not to ") + what);
    }
  };
  if (nb::isinstance<PyKeySet>(store)) {
    no_namespace("a KeySet");
    source_ = &nb::cast<PyKeySet&>(store).set;
  } else if (is_block_index(store)) {
    source_ = cpu_view(as_block_index(store), ns, view_, digests.width());
  } else if (nb::isinstance<PyPlanAnswers>(store)) {
    no_namespace("PlanAnswers");
    const PyPlanAnswers& answers = nb::cast<const PyPlanAnswers&>(store);
    if (answers.num_hashes != static_cast<std::int64_t>(digests.size())) {
      value_error("these PlanAnswers belong to a key plan of " +
                  std::to_string(answers.num_hashes) + " hashes, but the lookup has " +
                  std::to_string(digests.size()));
    }
    source_ = answers.answers.get();
  } else if (PyAnySet_Check(o) ||
             (!PyList_Check(o) && !PyTuple_Check(o) &&
              (is_abc_instance(store, "Set") || is_abc_instance(store, "Mapping")))) {
    // Probe the caller's container in place: its size does not matter, only the keys asked.
    no_namespace("a Python set");
    digests.keep_items();
    contains_.emplace(store, digests);
    source_ = &*contains_;
  } else if (o != Py_None && !PyUnicode_Check(o) && !PyBytes_Check(o) &&
             (PyList_Check(o) || PyTuple_Check(o) || PyIter_Check(o) ||
              is_abc_instance(store, "Iterable"))) {
    no_namespace("an iterable of pairs");
    built_.emplace(digests.width());
    fill_key_set(*built_, store, "store");
    source_ = &*built_;
  } else {
    type_error(
        "store must be a set of (group_id, key) pairs, a KeySet, a BlockIndex or "
        "PlanAnswers, got " +
        py_type_name(store));
  }
  // A lazily read hash list is converted as the native store probes it (PlanAnswers too: they
  // compare each probed hash with their plan's key); a Python container fetches its own keys.
  if (digests.is_lazy() && !contains_) {
    lazy_.emplace(*source_, digests, nb::isinstance<PyPlanAnswers>(store));
    source_ = &*lazy_;
  }
}

// ---- results -----------------------------------------------------------------------------------

nb::list lookup_masks(const LookupResult& result) {
  PyObject* outer = PyList_New(static_cast<Py_ssize_t>(result.groups.size()));
  if (outer == nullptr) {
    throw nb::python_error();
  }
  nb::list out = nb::steal<nb::list>(outer);
  for (std::size_t g = 0; g < result.groups.size(); ++g) {
    const GroupHit& hit = result.groups[g];
    PyObject* inner = PyList_New(static_cast<Py_ssize_t>(hit.num_blocks));
    if (inner == nullptr) {
      throw nb::python_error();
    }
    for (std::int64_t i = 0; i < hit.num_blocks; ++i) {
      PyObject* value = i >= hit.num_placeholders ? Py_True : Py_False;
      Py_INCREF(value);
      PyList_SET_ITEM(inner, static_cast<Py_ssize_t>(i), value);
    }
    PyList_SET_ITEM(outer, static_cast<Py_ssize_t>(g), inner);
  }
  return out;
}

nb::list chunk_masks(const std::vector<ChunkMask>& masks) {
  nb::list out;
  for (const ChunkMask& mask : masks) {
    if (mask.is_all()) {
      out.append(nb::none());
      continue;
    }
    PyObject* inner = PyList_New(static_cast<Py_ssize_t>(mask.keep->size()));
    if (inner == nullptr) {
      throw nb::python_error();
    }
    for (std::size_t i = 0; i < mask.keep->size(); ++i) {
      PyObject* value = (*mask.keep)[i] != 0 ? Py_True : Py_False;
      Py_INCREF(value);
      PyList_SET_ITEM(inner, static_cast<Py_ssize_t>(i), value);
    }
    out.append(nb::steal(inner));
  }
  return out;
}

template <class T>
nb::object owned_array(std::vector<T>&& values, std::initializer_list<std::size_t> shape) {
  auto* heap = new std::vector<T>(std::move(values));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape, owner).cast();
}

template nb::object owned_array(std::vector<std::int64_t>&&, std::initializer_list<std::size_t>);
template nb::object owned_array(std::vector<std::int32_t>&&, std::initializer_list<std::size_t>);
template nb::object owned_array(std::vector<std::uint8_t>&&, std::initializer_list<std::size_t>);

nb::object owned_bool_array(std::vector<std::uint8_t>&& values) {
  static_assert(sizeof(bool) == 1, "numpy bool arrays are one byte per element");
  auto* heap = new std::vector<std::uint8_t>(std::move(values));
  nb::capsule owner(heap,
                    [](void* p) noexcept { delete static_cast<std::vector<std::uint8_t>*>(p); });
  return nb::ndarray<nb::numpy, bool>(reinterpret_cast<bool*>(heap->data()), {heap->size()}, owner)
      .cast();
}

}  // namespace prefixhit::py
