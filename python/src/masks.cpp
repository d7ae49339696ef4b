// prefixhit.Mask: a read-only sequence of bools that stands in for the reference's mask lists
// without building them. A lookup's block mask is [False] * placeholders + [True] * loaded (two
// integers); a store/lookup chunk mask keeps the engine's byte vector. Either expands to Python
// objects only for the elements a caller reads, and compares equal to the plain list.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

namespace prefixhit::py {

namespace {

std::int64_t normalise_index(const PyMask& self, std::int64_t i) {
  const std::int64_t n = self.size();
  if (i < 0) {
    i += n;
  }
  if (i < 0 || i >= n) {
    PyErr_SetString(PyExc_IndexError, "mask index out of range");
    throw nb::python_error();
  }
  return i;
}

PyObject* as_bool(bool value) {
  return value ? Py_True : Py_False;
}

nb::list to_list(const PyMask& self) {
  const std::int64_t n = self.size();
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(n));
  if (list == nullptr) {
    throw nb::python_error();
  }
  for (std::int64_t i = 0; i < n; ++i) {
    PyObject* value = as_bool(self.at(i));
    Py_INCREF(value);
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), value);
  }
  return nb::steal<nb::list>(list);
}

/// -1: not comparable (NotImplemented), 0: different, 1: equal.
int equals(const PyMask& self, nb::handle other) {
  if (nb::isinstance<PyMask>(other)) {
    const PyMask& o = nb::cast<const PyMask&>(other);
    if (o.size() != self.size()) {
      return 0;
    }
    for (std::int64_t i = 0; i < self.size(); ++i) {
      if (o.at(i) != self.at(i)) {
        return 0;
      }
    }
    return 1;
  }
  PyObject* seq = other.ptr();
  // Like list.__eq__, equal only to lists (and, for the tuples vLLM sometimes builds, tuples).
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
    return -1;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n != static_cast<Py_ssize_t>(self.size())) {
    return 0;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    // Hold the element: comparing may run Python code that mutates the caller's list.
    if (i >= PySequence_Fast_GET_SIZE(seq)) {
      return 0;
    }
    nb::object item = nb::borrow(PySequence_Fast_GET_ITEM(seq, i));
    PyObject* mine = as_bool(self.at(static_cast<std::int64_t>(i)));
    if (item.ptr() == mine) {
      continue;
    }
    if (item.ptr() == Py_True || item.ptr() == Py_False) {
      return 0;
    }
    const int r = PyObject_RichCompareBool(item.ptr(), mine, Py_EQ);
    if (r < 0) {
      throw nb::python_error();
    }
    if (r == 0) {
      return 0;
    }
  }
  return 1;
}

}  // namespace

bool PyMask::at(std::int64_t i) const noexcept {
  return bytes ? (*bytes)[static_cast<std::size_t>(i)] != 0 : i >= num_placeholders;
}

nb::object make_run_mask(std::int64_t num_blocks, std::int64_t num_placeholders) {
  PyMask mask;
  mask.num_blocks = num_blocks;
  mask.num_placeholders = num_placeholders;
  return nb::cast(std::move(mask));
}

nb::object make_byte_mask(std::vector<std::uint8_t>&& values) {
  PyMask mask;
  mask.bytes = std::make_shared<const std::vector<std::uint8_t>>(std::move(values));
  mask.num_blocks = static_cast<std::int64_t>(mask.bytes->size());
  return nb::cast(std::move(mask));
}

nb::tuple lazy_lookup_masks(const LookupResult& result) {
  nb::tuple out = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(result.groups.size())));
  if (!out.is_valid()) {
    throw nb::python_error();
  }
  for (std::size_t g = 0; g < result.groups.size(); ++g) {
    const GroupHit& hit = result.groups[g];
    PyTuple_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(g),
                     make_run_mask(hit.num_blocks, hit.num_placeholders).release().ptr());
  }
  return out;
}

nb::tuple lazy_chunk_masks(std::vector<ChunkMask>&& masks) {
  nb::tuple out = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(masks.size())));
  if (!out.is_valid()) {
    throw nb::python_error();
  }
  for (std::size_t g = 0; g < masks.size(); ++g) {
    nb::object item = masks[g].is_all() ? nb::none() : make_byte_mask(std::move(*masks[g].keep));
    PyTuple_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(g), item.release().ptr());
  }
  return out;
}

void bind_masks(nb::module_& m) {
  nb::class_<PyMask>(m, "Mask",
                     "A read-only sequence of bools, equal to the reference's mask list, built "
                     "without creating a Python object per element. Indexing, slicing (a "
                     "list), iteration, len(), count(), index(), `in` and == against lists "
                     "behave as on the list; list(mask) or mask.tolist() expands it. Not "
                     "hashable, like a list.")
      .def("__len__", [](const PyMask& self) { return self.size(); })
      .def("__getitem__",
           [](const PyMask& self, std::int64_t i) {
             return nb::borrow<nb::bool_>(as_bool(self.at(normalise_index(self, i))));
           })
      .def("__getitem__",
           [](const PyMask& self, nb::slice slice) {
             const auto [start, stop, step, count] =
                 slice.compute(static_cast<std::size_t>(self.size()));
             nb::list out;
             Py_ssize_t i = start;
             for (std::size_t k = 0; k < count; ++k, i += step) {
               out.append(nb::borrow(as_bool(self.at(static_cast<std::int64_t>(i)))));
             }
             (void)stop;
             return out;
           })
      .def("__iter__", [](const PyMask& self) { return nb::iter(to_list(self)); })
      .def("__reversed__",
           [](const PyMask& self) {
             nb::list items = to_list(self);
             PyList_Reverse(items.ptr());
             return nb::iter(items);
           })
      .def("__contains__",
           [](const PyMask& self, nb::handle value) {
             const int truth = PyObject_IsTrue(value.ptr());
             if (truth < 0 || !(PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
               PyErr_Clear();
               return false;
             }
             for (std::int64_t i = 0; i < self.size(); ++i) {
               if (self.at(i) == (truth == 1)) {
                 return true;
               }
             }
             return false;
           })
      .def("count",
           [](const PyMask& self, nb::handle value) {
             std::int64_t trues = 0;
             if (self.bytes) {
               for (std::uint8_t b : *self.bytes) {
                 trues += b != 0 ? 1 : 0;
               }
             } else {
               trues = self.num_blocks - self.num_placeholders;
             }
             if (value.ptr() == Py_True ||
                 (PyLong_Check(value.ptr()) && nb::cast<long>(value) == 1)) {
               return trues;
             }
             if (value.ptr() == Py_False ||
                 (PyLong_Check(value.ptr()) && nb::cast<long>(value) == 0)) {
               return self.size() - trues;
             }
             return std::int64_t{0};
           })
      .def("index",
           [](const PyMask& self, nb::handle value) {
             const int truth = PyObject_IsTrue(value.ptr());
             if (truth >= 0 && (PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
               for (std::int64_t i = 0; i < self.size(); ++i) {
                 if (self.at(i) == (truth == 1)) {
                   return i;
                 }
               }
             }
             PyErr_Clear();
             PyErr_SetString(PyExc_ValueError, "value is not in the mask");
             throw nb::python_error();
           })
      .def("tolist", &to_list, "The mask as a plain list of bools.")
      .def(
          "__reduce__",
          [](const PyMask& self) {
            // Pickles (and copies) as the plain list it stands for.
            return nb::make_tuple(nb::module_::import_("builtins").attr("list"),
                                  nb::make_tuple(to_list(self)));
          },
          "Pickled and copied as a plain list.")
      .def("__eq__",
           [](const PyMask& self, nb::handle other) -> nb::object {
             const int r = equals(self, other);
             if (r < 0) {
               return nb::borrow(Py_NotImplemented);
             }
             return nb::bool_(r == 1);
           })
      .def("__ne__",
           [](const PyMask& self, nb::handle other) -> nb::object {
             const int r = equals(self, other);
             if (r < 0) {
               return nb::borrow(Py_NotImplemented);
             }
             return nb::bool_(r == 0);
           })
      .def("__repr__", [](const PyMask& self) { return nb::repr(to_list(self)); });
  // Unhashable, as the list it stands for (and __eq__ is defined).
  nb::handle cls = m.attr("Mask");
  PyObject_SetAttrString(cls.ptr(), "__hash__", Py_None);
}

}  // namespace prefixhit::py
