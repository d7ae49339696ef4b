// The batch API: many lookups in one call, arrays in and arrays out, no per-request Python.
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

/// apply_eagle as find_longest_cache_hits takes it: None/True (empty: apply everywhere), False,
/// or one flag per request.
std::vector<std::uint8_t> eagle_flags(nb::handle apply_eagle, std::size_t requests) {
  std::vector<std::uint8_t> flags;
  if (apply_eagle.is_none() || apply_eagle.ptr() == Py_True) {
    return flags;
  }
  if (apply_eagle.ptr() == Py_False) {
    flags.assign(requests, 0);
    return flags;
  }
  const IntArray<std::int64_t> values(apply_eagle, "apply_eagle");
  if (values.size() != requests) {
    throw InvalidArgument("apply_eagle has " + std::to_string(values.size()) + " entries for " +
                          std::to_string(requests) + " requests");
  }
  flags.resize(requests);
  for (std::size_t i = 0; i < requests; ++i) {
    flags[i] = values.view()[i] != 0 ? 1 : 0;
  }
  return flags;
}

namespace {

/// A read-only numpy view of `data` kept alive by the result object `owner`.
nb::object view_of(const std::vector<std::int64_t>& data, std::initializer_list<std::size_t> shape,
                   nb::handle owner) {
  return nb::ndarray<nb::numpy, const std::int64_t>(data.data(), shape, owner).cast();
}

std::size_t checked_request(const PyBatchResult& self, std::int64_t r) {
  const auto n = static_cast<std::int64_t>(self.result.num_requests);
  if (r < 0) {
    r += n;  // Python-style negative indices
  }
  if (r < 0 || r >= n) {
    PyErr_Format(PyExc_IndexError, "request %lld is out of range (batch of %lld)",
                 static_cast<long long>(r), static_cast<long long>(n));
    throw nb::python_error();
  }
  return static_cast<std::size_t>(r);
}

Namespace batch_namespace(nb::handle value) {
  const std::int64_t ns = to_int64(value, "namespace");
  if (ns < 0 || ns > static_cast<std::int64_t>(kMaxNamespace)) {
    throw InvalidArgument("namespace must be in [0, " + std::to_string(kMaxNamespace) + "], got " +
                          std::to_string(ns));
  }
  return static_cast<Namespace>(ns);
}

/// Device arrays are answered by the GPU engine from a device-resident index; other stores
/// live in host memory, so the arrays would have to come back first. Say which piece is
/// missing rather than copying behind the caller's back.
[[noreturn]] void device_batch_unavailable(nb::handle store) {
  if (!gpu::device_available()) {
    throw Unavailable(
        "find_longest_cache_hits got CUDA arrays, but the GPU engine is not available (" +
        gpu::describe_device() + "); pass host arrays (numpy) to use the CPU engine");
  }
  throw InvalidArgument(
      "CUDA arrays are looked up on the GPU against a BlockIndex(device='cuda'); this store is "
      "a " +
      std::string(Py_TYPE(store.ptr())->tp_name) +
      " in host memory (pass host arrays "
      "for it)");
}

PyBatchResult host_batch(const Coordinator& c, nb::handle digests, nb::handle offsets,
                         nb::handle max_lengths, nb::handle store, nb::handle apply_eagle,
                         nb::handle ns, int num_threads) {
  Digests d(digests, "digests", DigestShape::sequence_or_flat, c.config().digest_size);
  const IntArray<std::int64_t> offs(offsets, "offsets");
  const std::size_t requests = offs.size() == 0 ? 0 : offs.size() - 1;
  const IntArray<std::int64_t> lengths(max_lengths, "max_lengths", /*allow_scalar=*/true);
  std::vector<std::int64_t> broadcast_lengths;
  span<const std::int64_t> length_view = lengths.view();
  if (lengths.scalar()) {
    broadcast_lengths.assign(requests, *lengths.scalar());
    length_view = broadcast_lengths;
  }
  const std::vector<std::uint8_t> flags = eagle_flags(apply_eagle, requests);
  LookupBatch batch;
  batch.digests = d.view();
  batch.offsets = offs.view();
  batch.max_lengths = length_view;
  batch.apply_eagle = flags;
  if (nb::isinstance<PyPlanAnswers>(store) && requests != 1) {
    // A KeyPlan's answers index one request's hashes; spread over several requests they would
    // answer the wrong keys.
    throw InvalidArgument("PlanAnswers answer one request's key plan; a batch of " +
                          std::to_string(requests) +
                          " requests needs a KeySet, a BlockIndex or a set as its store");
  }
  const ResolvedStore resolved(store, batch_namespace(ns), d);
  BatchOptions options;
  options.num_threads = num_threads;
  PyBatchResult out;
  if (resolved.needs_gil()) {
    options.num_threads = 1;  // a Python container is probed on this thread, holding the GIL
    try {
      out.result = c.find_longest_cache_hits(batch, resolved.source(), options);
    } catch (...) {
      resolved.check();
      throw;
    }
    resolved.check();
  } else {
    nb::gil_scoped_release release;
    out.result = c.find_longest_cache_hits(batch, resolved.source(), options);
  }
  return out;
}

}  // namespace

void bind_batch(nb::class_<PyCoordinator>& coordinator, nb::module_& m) {
  nb::class_<PyBatchResult>(m, "BatchLookupResult",
                            "Results of find_longest_cache_hits. Arrays are read-only views "
                            "that keep this object alive.")
      .def_prop_ro("num_requests", [](const PyBatchResult& s) { return s.result.num_requests; })
      .def_prop_ro("num_groups", [](const PyBatchResult& s) { return s.result.num_groups; })
      .def_prop_ro(
          "hit_lengths",
          [](nb::handle self) {
            const PyBatchResult& s = nb::cast<const PyBatchResult&>(self);
            return view_of(s.result.hit_lengths, {s.result.num_requests}, self);
          },
          nb::sig("def hit_lengths(self) -> numpy.ndarray"), "int64 [R]: hit length per request.")
      .def_prop_ro(
          "num_blocks",
          [](nb::handle self) {
            const PyBatchResult& s = nb::cast<const PyBatchResult&>(self);
            return view_of(s.result.num_blocks,
                           {s.result.num_requests, static_cast<std::size_t>(s.result.num_groups)},
                           self);
          },
          nb::sig("def num_blocks(self) -> numpy.ndarray"),
          "int64 [R, G]: length of request r's block list for group g.")
      .def_prop_ro(
          "num_placeholders",
          [](nb::handle self) {
            const PyBatchResult& s = nb::cast<const PyBatchResult&>(self);
            return view_of(s.result.num_placeholders,
                           {s.result.num_requests, static_cast<std::size_t>(s.result.num_groups)},
                           self);
          },
          nb::sig("def num_placeholders(self) -> numpy.ndarray"),
          "int64 [R, G]: leading placeholders (False entries) of that list; the rest are "
          "blocks to load.")
      .def(
          "masks",
          [](const PyBatchResult& s, std::int64_t r) {
            return lookup_masks(s.result.request(checked_request(s, r)));
          },
          nb::arg("r"), nb::sig("def masks(self, r: int) -> list[list[bool]]"),
          "Request r's masks, as find_longest_cache_hit returns them.")
      .def("__len__", [](const PyBatchResult& s) { return s.result.num_requests; })
      .def(
          "__getitem__",
          [](const PyBatchResult& s, std::int64_t r) {
            const std::size_t i = checked_request(s, r);
            return nb::make_tuple(lookup_masks(s.result.request(i)), s.result.hit_lengths[i]);
          },
          nb::arg("r"), nb::sig("def __getitem__(self, r: int) -> tuple[list[list[bool]], int]"),
          "(masks, hit_length) of request r, equal to the one-by-one call.")
      .def("__repr__", [](const PyBatchResult& s) {
        return "BatchLookupResult(" + std::to_string(s.result.num_requests) + " requests, " +
               std::to_string(s.result.num_groups) + " groups)";
      });

  coordinator.def(
      "find_longest_cache_hits",
      [](PyCoordinator& self, nb::handle digests, nb::handle offsets, nb::handle max_lengths,
         nb::handle store, nb::handle apply_eagle, nb::handle ns, nb::handle stream,
         int num_threads) {
        if (is_block_index(store) && as_block_index(store).gpu) {
          if (self.c.config().digest_size != BlockDigest::kSize) {
            throw InvalidArgument(
                "a 'cuda' BlockIndex serves only coordinators of digest_size 32 from Python, "
                "this one has " +
                std::to_string(self.c.config().digest_size));
          }
          return gpu_batch(self, digests, offsets, max_lengths, apply_eagle, as_block_index(store),
                           batch_namespace(ns), stream);
        }
        if (is_cuda_array(digests) || is_cuda_array(offsets) || is_cuda_array(max_lengths)) {
          device_batch_unavailable(store);
        }
        return host_batch(self.c, digests, offsets, max_lengths, store, apply_eagle, ns,
                          num_threads);
      },
      nb::arg("digests").none(), nb::arg("offsets").none(), nb::arg("max_lengths").none(),
      nb::arg("store").none(), nb::kw_only(), nb::arg("apply_eagle").none() = nb::none(),
      nb::arg("namespace").none() = 0, nb::arg("stream").none() = nb::none(),
      nb::arg("num_threads") = 0,
      nb::sig("def find_longest_cache_hits(self, digests: Digests, offsets: IntArray, "
              "max_lengths: int | IntArray, store: Store, *, "
              "apply_eagle: bool | Sequence[bool] | numpy.ndarray | None = None, "
              "namespace: int = 0, stream: int | None = None, num_threads: int = 0) "
              "-> BatchLookupResult"),
      "Many lookups in one call; each request's answer equals find_longest_cache_hit's.\n\n"
      "digests: every request's digests back to back: uint8 [n, 32] (numpy, or a CUDA "
      "tensor through DLPack), bytes of n*32, or a list of bytes.\n"
      "offsets: int64 [R + 1]; request r owns digests[offsets[r]:offsets[r + 1]].\n"
      "max_lengths: int64 [R] (or one int for all).\n"
      "store: as for find_longest_cache_hit. KeySet and BlockIndex stores run on all cores "
      "without the GIL; a Python set is probed on the calling thread.\n"
      "apply_eagle: None or True (every request), False, or one flag per request.\n"
      "stream: the caller's CUDA stream (an int handle, or a torch/cupy stream object) for the "
      "GPU engine (device arrays, or a BlockIndex('cuda') store); the CPU engine ignores it.\n"
      "num_threads: at most this many threads (0: every hardware thread, 1: the calling thread "
      "only); workers start only when the first requests show the rest is worth them.\n\n"
      "Errors name the first failing request. Device arrays need the GPU engine and raise "
      "BackendUnavailableError in a build without it.");
}

}  // namespace prefixhit::py
