// Stores as the engines see them: a Python container probed key by key, a lazy digest source,
// and the resolution of a store argument.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {
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

}  // namespace prefixhit::py
