// C++ exceptions -> the Python exception classes of prefixhit.errors.
//
// The classes live in Python (prefixhit/errors.py) so that they can inherit from both
// PrefixhitError and the matching builtin (ValueError, RuntimeError, OSError) and carry
// docstrings; the translator only looks them up by kind.
#include <new>
#include <string>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

/// Sets the Python error for `kind` without throwing. Falls back to RuntimeError if the
/// errors module cannot be imported (a broken install), so the message is never lost.
void set_error(ErrorKind kind, const char* message) noexcept {
  PyObject* module = PyImport_ImportModule("prefixhit.errors");
  if (module == nullptr) {
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeError, "%s: %s", to_string(kind), message);
    return;
  }
  PyObject* instance = PyObject_CallMethod(module, "_from_kind", "ss", to_string(kind), message);
  Py_DECREF(module);
  if (instance == nullptr) {
    return;  // the call's own error is more useful than a generic one
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance)), instance);
  Py_DECREF(instance);
}

}  // namespace

void raise_error(ErrorKind kind, const std::string& message) {
  set_error(kind, message.c_str());
  throw nb::python_error();
}

void register_error_translation() {
  nb::register_exception_translator([](const std::exception_ptr& p, void* /*payload*/) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      set_error(e.kind(), e.what());
    }
    // Anything else propagates to nanobind's own translator (bad_alloc -> MemoryError, ...).
  });
}

}  // namespace prefixhit::py
