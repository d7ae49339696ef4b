// Input conversion for the bindings: buffers, scalars, integer arrays and result lists (digests:
// digests.cpp; stores: store_sources.cpp).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

// Declared in common.hpp: digests.cpp, store_sources.cpp and specs.cpp use them too.
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

nb::module_ numpy() {
  return nb::module_::import_("numpy");
}

nb::object contiguous_host_copy(nb::handle obj) {
  return numpy().attr("ascontiguousarray")(obj);
}

bool looks_like_array(nb::handle obj) {
  return nb::hasattr(obj, "__array__") || nb::hasattr(obj, "__dlpack__") ||
         nb::hasattr(obj, "__array_interface__");
}

namespace {

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
