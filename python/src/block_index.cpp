// prefixhit.BlockIndex: the resident index of (namespace, group id, digest) keys.
// device="cpu" wraps prefixhit::BlockIndex; device="cuda" needs the device index and a CUDA
// build, and raises BackendUnavailableError otherwise.
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

Namespace to_namespace(std::int64_t ns) {
  if (ns < 0 || ns > static_cast<std::int64_t>(kMaxNamespace)) {
    throw InvalidArgument("namespace must be in [0, " + std::to_string(kMaxNamespace) + "], got " +
                          std::to_string(ns));
  }
  return static_cast<Namespace>(ns);
}

/// Per-key group ids, or one id for every key (`single`).
struct GroupIds {
  std::optional<int> single;
  std::vector<std::int32_t> per_key;
};

GroupIds group_ids_for(nb::handle group_ids, std::size_t n) {
  const IntArray<std::int32_t> ids(group_ids, "group_ids", /*allow_scalar=*/true);
  GroupIds out;
  if (ids.scalar()) {
    out.single = *ids.scalar();
    return out;
  }
  if (ids.size() != n) {
    throw InvalidArgument("group_ids has " + std::to_string(ids.size()) +
                          " entries but there are " + std::to_string(n) + " keys");
  }
  out.per_key.assign(ids.view().begin(), ids.view().end());
  return out;
}

BlockIndex& cpu_index(PyBlockIndex& self) {
  if (!self.cpu) {
    throw Unavailable("this BlockIndex has no CPU index");
  }
  return *self.cpu;
}

std::size_t index_size(PyBlockIndex& self) {
  return self.gpu ? self.gpu->size() : cpu_index(self).size();
}

}  // namespace

bool is_block_index(nb::handle obj) {
  return nb::isinstance<PyBlockIndex>(obj);
}

PyBlockIndex& as_block_index(nb::handle obj) {
  return nb::cast<PyBlockIndex&>(obj);
}

const ExistenceSource* cpu_view(const PyBlockIndex& index, Namespace ns,
                                std::optional<BlockIndex::View>& storage, std::size_t digest_size) {
  if (!index.cpu) {
    throw Unavailable("a '" + index.device +
                      "' BlockIndex cannot serve host lookups; use a 'cpu' index");
  }
  storage.emplace(*index.cpu, ns, digest_size);
  return &*storage;
}

namespace {

/// The Python bindings move keys to a 'cuda' index as 32-byte digests only.
void require_gpu_width(std::size_t digest_size) {
  if (digest_size != BlockDigest::kSize) {
    throw InvalidArgument("digest_size " + std::to_string(digest_size) +
                          " is not supported for a 'cuda' BlockIndex from Python (only 32); the "
                          "C++ DeviceBlockIndex takes every width");
  }
}

}  // namespace

void bind_block_index(nb::module_& m) {
  nb::class_<PyBlockIndex>(
      m, "BlockIndex",
      "A resident set of (namespace, group_id, key) entries, keys of 8, 16 or 32 bytes, the store "
      "of "
      "find_longest_cache_hit(s) for a runtime that keeps its store's key directory in "
      "process. Thread-safe: concurrent readers and writers; each bulk call is atomic.\n\n"
      "device='cpu' is the host index. device='cuda' is the GPU-resident index; it needs a "
      "CUDA build with the device index and raises BackendUnavailableError otherwise.")
      .def(
          "__init__",
          [](PyBlockIndex* self, const std::string& device, std::size_t initial_capacity,
             double max_load_factor, std::size_t max_capacity, std::uint64_t seed) {
            if (device != "cpu" && device != "cuda") {
              throw InvalidArgument("device must be 'cpu' or 'cuda', got '" + device + "'");
            }
            if (device == "cuda") {
              DeviceBlockIndexOptions options;
              if (initial_capacity != 0) {
                options.initial_capacity = initial_capacity;
              }
              options.max_load_factor = max_load_factor;
              options.max_capacity = max_capacity;
              options.seed = seed;
              auto index = make_device_index(options, nb::none());
              new (self) PyBlockIndex{device, nullptr, std::move(index)};
              return;
            }
            BlockIndexOptions options;
            options.initial_capacity = initial_capacity;
            options.max_load_factor = max_load_factor;
            options.max_capacity = max_capacity;
            options.seed = seed;
            auto index = std::make_unique<BlockIndex>(options);
            new (self) PyBlockIndex{device, std::move(index), nullptr};
          },
          nb::arg("device") = "cpu", nb::kw_only(), nb::arg("initial_capacity") = 1 << 16,
          nb::arg("max_load_factor") = 0.8, nb::arg("max_capacity") = 0, nb::arg("seed") = 0,
          "device: 'cpu' (host memory) or 'cuda' (the current CUDA device). "
          "initial_capacity: slots reserved up front. max_load_factor: grow past this load. "
          "max_capacity: 0 for unbounded, else inserts that would not fit raise "
          "CapacityExceededError and insert nothing. seed: 0 draws a random hash seed.")
      .def_ro("device", &PyBlockIndex::device)
      .def(
          "insert",
          [](PyBlockIndex& self, nb::handle group_ids, nb::handle keys, std::int64_t ns,
             nb::handle stream, std::size_t digest_size) {
            const Namespace space = to_namespace(ns);
            if (self.gpu) {
              require_gpu_width(digest_size);
              return device_index_update(*self.gpu, space, group_ids, keys, stream, false);
            }
            const Digests d(keys, "keys", DigestShape::sequence_or_flat, digest_size);
            const GroupIds ids = group_ids_for(group_ids, d.size());
            BlockIndex& index = cpu_index(self);
            nb::gil_scoped_release release;
            return ids.single ? index.insert(space, *ids.single, d.view(), digest_size)
                              : index.insert(space, span<const std::int32_t>(ids.per_key), d.view(),
                                             digest_size);
          },
          nb::arg("group_ids").none(), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("namespace") = 0, nb::arg("stream").none() = nb::none(),
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def insert(self, group_ids: int | IntArray, keys: Digests, *, "
                  "namespace: int = 0, stream: int | None = None, digest_size: int = 32) -> int"),
          "Inserts keys ([n, w] uint8 array, bytes of n*w, or a list of w-byte bytes, w = "
          "digest_size: 8, 16 or 32) for one group id or one id per key. Returns how many were "
          "new. The width is part of the key: the same bytes at two widths are two keys.")
      .def(
          "erase",
          [](PyBlockIndex& self, nb::handle group_ids, nb::handle keys, std::int64_t ns,
             nb::handle stream, std::size_t digest_size) {
            const Namespace space = to_namespace(ns);
            if (self.gpu) {
              require_gpu_width(digest_size);
              return device_index_update(*self.gpu, space, group_ids, keys, stream, true);
            }
            const Digests d(keys, "keys", DigestShape::sequence_or_flat, digest_size);
            const GroupIds ids = group_ids_for(group_ids, d.size());
            BlockIndex& index = cpu_index(self);
            nb::gil_scoped_release release;
            return ids.single ? index.erase(space, *ids.single, d.view(), digest_size)
                              : index.erase(space, span<const std::int32_t>(ids.per_key), d.view(),
                                            digest_size);
          },
          nb::arg("group_ids").none(), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("namespace") = 0, nb::arg("stream").none() = nb::none(),
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def erase(self, group_ids: int | IntArray, keys: Digests, *, "
                  "namespace: int = 0, stream: int | None = None, digest_size: int = 32) -> int"),
          "Erases keys (absent ones are ignored). Returns how many were removed.")
      .def(
          "contains",
          [](PyBlockIndex& self, nb::handle group_ids, nb::handle keys, std::int64_t ns,
             nb::handle stream, std::size_t digest_size) {
            const Namespace space = to_namespace(ns);
            if (self.gpu) {
              require_gpu_width(digest_size);
              return device_index_contains(*self.gpu, space, group_ids, keys, stream);
            }
            const Digests d(keys, "keys", DigestShape::sequence_or_flat, digest_size);
            const GroupIds ids = group_ids_for(group_ids, d.size());
            BlockIndex& index = cpu_index(self);
            std::vector<std::uint8_t> out(d.size());
            {
              nb::gil_scoped_release release;
              if (ids.single) {
                index.contains(space, *ids.single, d.view(), out.data(), digest_size);
              } else {
                index.contains(space, span<const std::int32_t>(ids.per_key), d.view(), out.data(),
                               digest_size);
              }
            }
            return owned_bool_array(std::move(out));
          },
          nb::arg("group_ids").none(), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("namespace") = 0, nb::arg("stream").none() = nb::none(),
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def contains(self, group_ids: int | IntArray, keys: Digests, *, "
                  "namespace: int = 0, stream: int | None = None, digest_size: int = 32) -> "
                  "numpy.ndarray"),
          "A bool array: whether each (group_id, key) is present.")
      .def(
          "__contains__",
          [](PyBlockIndex& self, nb::handle pair) {
            if (!(PyTuple_Check(pair.ptr()) || PyList_Check(pair.ptr())) || nb::len(pair) != 2) {
              return false;
            }
            const std::int64_t gid = to_int64(pair[0], "group_id");
            // The key's own length is its width (8, 16 or 32 bytes).
            const Py_ssize_t len = PyObject_Length(pair[1].ptr());
            if (len < 0) {
              PyErr_Clear();
            }
            const std::size_t width = BlockDigest::valid_size(static_cast<std::size_t>(len))
                                          ? static_cast<std::size_t>(len)
                                          : BlockDigest::kSize;
            const Digests d(nb::make_tuple(pair[1]), "key", DigestShape::sequence, width);
            if (gid < 0 || gid >= kMaxGroups) {
              return false;
            }
            if (self.gpu) {
              require_gpu_width(width);
              nb::object found = device_index_contains(*self.gpu, 0, nb::int_(gid),
                                                       nb::make_tuple(pair[1]), nb::none());
              return nb::cast<bool>(found[nb::int_(0)]);
            }
            return cpu_index(self).contains(0, static_cast<int>(gid), d.data()[0], width);
          },
          nb::arg("pair").none(), "(group_id, key) in index: membership in namespace 0.")
      .def(
          "__len__", [](PyBlockIndex& self) { return index_size(self); },
          "Number of keys, over all namespaces.")
      .def_prop_ro(
          "capacity",
          [](PyBlockIndex& self) {
            return self.gpu ? self.gpu->capacity() : cpu_index(self).capacity();
          },
          "Slots currently allocated.")
      .def(
          "clear",
          [](PyBlockIndex& self) {
            if (self.gpu) {
              self.gpu->clear();
            } else {
              cpu_index(self).clear();
            }
          },
          "Removes every key.")
      .def("__repr__", [](PyBlockIndex& self) {
        return "BlockIndex(device='" + self.device + "', " + std::to_string(index_size(self)) +
               " keys)";
      });
}

}  // namespace prefixhit::py
