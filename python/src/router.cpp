// Router mode (issue 12) in Python: prefixhit.ResidencyIndex (which workers hold which keys),
// score_workers (every worker's exact hit for a batch, on the CPU or, with gpu=True, on the GPU
// scorer of router_gpu.hpp) and top_k_workers.
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/router.hpp"
#include "prefixhit/router_gpu.hpp"

namespace prefixhit::py {

namespace {

Namespace router_namespace(std::int64_t ns) {
  if (ns < 0 || ns > static_cast<std::int64_t>(kMaxNamespace)) {
    throw InvalidArgument("namespace must be in [0, " + std::to_string(kMaxNamespace) + "], got " +
                          std::to_string(ns));
  }
  return static_cast<Namespace>(ns);
}

/// A worker id checked here, so a negative Python int is an InvalidArgumentError naming the
/// worker rather than nanobind's TypeError for a uint32 argument.
WorkerId worker_id(const ResidencyIndex& index, std::int64_t worker) {
  if (worker < 0 || worker >= index.num_workers()) {
    throw InvalidArgument("worker " + std::to_string(worker) + " is out of range [0, " +
                          std::to_string(index.num_workers()) + ")");
  }
  return static_cast<WorkerId>(worker);
}

int group_id(std::int64_t gid) {
  if (gid < 0 || gid >= kMaxGroups) {
    throw InvalidArgument("group_id must be in [0, " + std::to_string(kMaxGroups) + "), got " +
                          std::to_string(gid));
  }
  return static_cast<int>(gid);
}

int tier_of(const ResidencyIndex& index, std::int64_t tier) {
  if (tier < 0 || tier >= index.num_tiers()) {
    throw InvalidArgument("tier " + std::to_string(tier) + " is out of range [0, " +
                          std::to_string(index.num_tiers()) + ")");
  }
  return static_cast<int>(tier);
}

std::uint32_t tier_mask_of(std::int64_t mask) {
  if (mask < 0 || mask > static_cast<std::int64_t>(0xFFFFFFFFLL)) {
    throw InvalidArgument("tier_mask must be in [0, 2^32), got " + std::to_string(mask));
  }
  return static_cast<std::uint32_t>(mask);
}

/// score_workers' result: numpy arrays owning their data, plus the scorer's cost counters.
struct PyRouterScores {
  std::size_t num_requests = 0;
  int num_workers = 0;
  int num_groups = 0;
  nb::object hit_lengths;
  nb::object num_blocks;
  nb::object num_placeholders;
  std::size_t classes = 0;
  std::size_t index_reads = 0;
  std::size_t probes = 0;
};

PyRouterScores to_python(RouterScores&& s) {
  PyRouterScores out;
  out.num_requests = s.num_requests;
  out.num_workers = s.num_workers;
  out.num_groups = s.num_groups;
  const auto nw = static_cast<std::size_t>(s.num_workers);
  const auto ng = static_cast<std::size_t>(s.num_groups);
  out.hit_lengths = owned_array(std::move(s.hit_lengths), {s.num_requests, nw});
  out.num_blocks = owned_array(std::move(s.num_blocks), {s.num_requests, nw, ng});
  out.num_placeholders = owned_array(std::move(s.num_placeholders), {s.num_requests, nw, ng});
  out.classes = s.classes;
  out.index_reads = s.index_reads;
  out.probes = s.probes;
  return out;
}

PyRouterScores score(const PyCoordinator& coordinator, nb::handle digests, nb::handle offsets,
                     nb::handle max_lengths, const ResidencyIndex& residency,
                     nb::handle apply_eagle, std::int64_t ns, std::int64_t tier_mask,
                     int num_threads, bool gpu) {
  const Coordinator& c = coordinator.c;
  if (gpu && !gpu::device_available()) {  // before reading any argument: a clear first error
    throw Unavailable("score_workers(gpu=True) needs a CUDA device: " + gpu::describe_device());
  }
  const Digests d(digests, "digests", DigestShape::sequence_or_flat, c.config().digest_size);
  const IntArray<std::int64_t> offs(offsets, "offsets");
  const std::size_t requests = offs.size() == 0 ? 0 : offs.size() - 1;
  const IntArray<std::int64_t> lengths(max_lengths, "max_lengths", /*allow_scalar=*/true);
  std::vector<std::int64_t> broadcast;
  span<const std::int64_t> length_view = lengths.view();
  if (lengths.scalar()) {
    broadcast.assign(requests, *lengths.scalar());
    length_view = broadcast;
  }
  const std::vector<std::uint8_t> flags = eagle_flags(apply_eagle, requests);
  LookupBatch batch;
  batch.digests = d.view();
  batch.offsets = offs.view();
  batch.max_lengths = length_view;
  batch.apply_eagle = flags;
  ScoreOptions options;
  options.ns = router_namespace(ns);
  options.tier_mask = tier_mask_of(tier_mask);
  options.num_threads = num_threads;
  RouterScores scores;
  {
    nb::gil_scoped_release release;
    // The GPU scorer builds its engine per call (device query, staging): simple, and small next
    // to a batch's transfers.
    scores = gpu ? gpu::score_workers(c, batch, residency, options)
                 : score_workers(c, batch, residency, options);
  }
  return to_python(std::move(scores));
}

/// A [R, W] integer array (or a RouterScores) as the RouterScores top_k_workers reads.
RouterScores hit_lengths_of(nb::handle obj) {
  RouterScores scores;
  nb::object array = nb::borrow(obj);
  if (nb::isinstance<PyRouterScores>(obj)) {
    array = nb::cast<const PyRouterScores&>(obj).hit_lengths;
  }
  const nb::module_ np = nb::module_::import_("numpy");
  nb::object a = np.attr("asarray")(array);
  const std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
  const auto ndim = nb::cast<std::int64_t>(a.attr("ndim"));
  if ((kind != "i" && kind != "u") || ndim != 2) {
    throw InvalidArgument("hit_lengths must be a 2-D integer array [requests, workers], got a " +
                          std::to_string(ndim) + "-D array of dtype " +
                          nb::cast<std::string>(a.attr("dtype").attr("name")));
  }
  // A private C-ordered int64 copy: the caller's array may change while the GIL is released.
  a = np.attr("array")(a, nb::arg("dtype") = np.attr("int64"), nb::arg("order") = "C");
  const auto shape = nb::cast<nb::tuple>(a.attr("shape"));
  scores.num_requests = nb::cast<std::size_t>(shape[0]);
  const auto workers = nb::cast<std::size_t>(shape[1]);
  if (workers > static_cast<std::size_t>(kMaxWorkers)) {
    throw InvalidArgument("hit_lengths has " + std::to_string(workers) + " workers, more than " +
                          std::to_string(kMaxWorkers));
  }
  scores.num_workers = static_cast<int>(workers);
  const auto view = nb::cast<nb::ndarray<const std::int64_t, nb::c_contig>>(a);
  scores.hit_lengths.assign(view.data(), view.data() + view.size());
  return scores;
}

std::vector<double> load_of(nb::handle load, int workers) {
  std::vector<double> out;
  if (load.is_none()) {
    return out;
  }
  const nb::module_ np = nb::module_::import_("numpy");
  nb::object a = np.attr("asarray")(load);
  const std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
  if ((kind != "i" && kind != "u" && kind != "f") || nb::cast<std::int64_t>(a.attr("ndim")) != 1) {
    throw InvalidArgument("load must be a 1-D numeric array with one entry per worker");
  }
  a = np.attr("array")(a, nb::arg("dtype") = np.attr("float64"), nb::arg("order") = "C");
  const auto view = nb::cast<nb::ndarray<const double, nb::c_contig>>(a);
  out.assign(view.data(), view.data() + view.size());
  if (out.size() != static_cast<std::size_t>(workers)) {
    throw InvalidArgument("load has " + std::to_string(out.size()) + " entries but there are " +
                          std::to_string(workers) + " workers");
  }
  for (const double v : out) {
    if (v != v) {  // NaN would make the ranking's order inconsistent
      throw InvalidArgument("load must not contain NaN");
    }
  }
  return out;
}

nb::dict memory_of(const ResidencyIndex& index) {
  const ResidencyMemory m = index.memory();
  nb::dict out;
  out["keys"] = m.keys;
  out["pairs"] = m.pairs;
  out["worker_sets"] = m.worker_sets;
  out["table_bytes"] = m.table_bytes;
  out["set_bytes"] = m.set_bytes;
  out["bytes_per_pair_beyond_key"] = m.bytes_per_pair_beyond_key();
  return out;
}

/// insert and erase take the same arguments: validate them all, then run `op` without the GIL.
template <class Op>
std::size_t apply_keys(ResidencyIndex& self, std::int64_t worker, std::int64_t gid, nb::handle keys,
                       std::int64_t tier, std::int64_t ns, std::size_t digest_size, Op op) {
  const WorkerId w = worker_id(self, worker);
  const Digests d(keys, "keys", DigestShape::sequence_or_flat, digest_size);
  const int g = group_id(gid);
  const Namespace space = router_namespace(ns);
  const int t = tier_of(self, tier);
  nb::gil_scoped_release release;
  return op(w, space, g, d.view(), t);
}

}  // namespace

void bind_router(nb::module_& m) {
  nb::class_<ResidencyIndex>(
      m, "ResidencyIndex",
      "Router mode: which workers (and tiers) hold which (namespace, group_id, key) entries. "
      "Keys share interned worker sets, so a key held by many workers costs one set id. "
      "Thread-safe: concurrent readers and writers; each call is atomic and a failed call "
      "applies nothing.")
      .def(
          "__init__",
          [](ResidencyIndex* self, int num_workers, int num_tiers, std::size_t initial_capacity,
             std::uint64_t seed) {
            ResidencyOptions options;
            options.num_workers = num_workers;
            options.num_tiers = num_tiers;
            options.initial_capacity = initial_capacity;
            options.seed = seed;
            new (self) ResidencyIndex(options);
          },
          nb::arg("num_workers"), nb::arg("num_tiers") = 1, nb::kw_only(),
          nb::arg("initial_capacity") = 1 << 16, nb::arg("seed") = 0,
          "num_workers: in [1, 65536]. num_tiers: in [1, 4] (e.g. 0 = GPU, 1 = CPU, 2 = "
          "storage). initial_capacity: key slots reserved up front. seed: 0 draws a random "
          "hash seed.")
      .def_prop_ro("num_workers", &ResidencyIndex::num_workers)
      .def_prop_ro("num_tiers", &ResidencyIndex::num_tiers)
      .def(
          "insert",
          [](ResidencyIndex& self, std::int64_t worker, std::int64_t gid, nb::handle keys,
             std::int64_t tier, std::int64_t ns, std::size_t digest_size) {
            return apply_keys(self, worker, gid, keys, tier, ns, digest_size,
                              [&](WorkerId w, Namespace space, int g, auto view, int t) {
                                return self.insert(w, space, g, view, digest_size, t);
                              });
          },
          nb::arg("worker"), nb::arg("group_id"), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("tier") = 0, nb::arg("namespace") = 0,
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def insert(self, worker: int, group_id: int, keys: Digests, *, tier: int = 0, "
                  "namespace: int = 0, digest_size: int = 32) -> int"),
          "The worker now holds these keys ([n, w] uint8 array, bytes of n*w, or a list of "
          "w-byte bytes; w = digest_size: 8, 16 or 32) of one group on `tier`. Returns how "
          "many (key, worker-tier) pairs were new.")
      .def(
          "erase",
          [](ResidencyIndex& self, std::int64_t worker, std::int64_t gid, nb::handle keys,
             std::int64_t tier, std::int64_t ns, std::size_t digest_size) {
            return apply_keys(self, worker, gid, keys, tier, ns, digest_size,
                              [&](WorkerId w, Namespace space, int g, auto view, int t) {
                                return self.erase(w, space, g, view, digest_size, t);
                              });
          },
          nb::arg("worker"), nb::arg("group_id"), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("tier") = 0, nb::arg("namespace") = 0,
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def erase(self, worker: int, group_id: int, keys: Digests, *, tier: int = 0, "
                  "namespace: int = 0, digest_size: int = 32) -> int"),
          "The worker no longer holds these keys on `tier` (absent ones are ignored). Returns "
          "how many pairs were removed.")
      .def(
          "contains",
          [](const ResidencyIndex& self, std::int64_t worker, std::int64_t gid, nb::handle keys,
             std::int64_t ns, std::size_t digest_size, std::int64_t tier_mask) {
            const WorkerId w = worker_id(self, worker);
            const Digests d(keys, "keys", DigestShape::sequence_or_flat, digest_size);
            const int g = group_id(gid);
            const Namespace space = router_namespace(ns);
            const std::uint32_t mask = tier_mask_of(tier_mask);
            std::vector<std::uint8_t> out(d.size());
            {
              nb::gil_scoped_release release;
              for (std::size_t i = 0; i < d.size(); ++i) {
                out[i] = self.contains(w, space, g, d.data()[i], digest_size, mask) ? 1 : 0;
              }
            }
            return owned_bool_array(std::move(out));
          },
          nb::arg("worker"), nb::arg("group_id"), nb::arg("keys").none(), nb::kw_only(),
          nb::arg("namespace") = 0, nb::arg("digest_size") = BlockDigest::kSize,
          nb::arg("tier_mask") = 0xFFFFFFFFLL,
          nb::sig("def contains(self, worker: int, group_id: int, keys: Digests, *, "
                  "namespace: int = 0, digest_size: int = 32, tier_mask: int = 0xFFFFFFFF) -> "
                  "numpy.ndarray"),
          "A bool array: whether the worker holds each key on a tier of `tier_mask` (bit t: "
          "tier t).")
      .def(
          "clear_worker",
          [](ResidencyIndex& self, std::int64_t worker) {
            const WorkerId w = worker_id(self, worker);
            nb::gil_scoped_release release;
            self.clear_worker(w);
          },
          nb::arg("worker"),
          "Drops every key of the worker on every tier, in time proportional to the distinct "
          "worker sets (not the keys).")
      .def(
          "all_blocks_cleared",
          [](ResidencyIndex& self, std::int64_t worker) {
            const WorkerId w = worker_id(self, worker);
            nb::gil_scoped_release release;
            self.all_blocks_cleared(w);
          },
          nb::arg("worker"), "The worker's AllBlocksCleared event (or it left): as clear_worker.")
      .def(
          "clear",
          [](ResidencyIndex& self) {
            nb::gil_scoped_release release;
            self.clear();
          },
          "Removes every key of every worker.")
      .def("__len__", &ResidencyIndex::size, "Live keys (held by at least one worker).")
      .def("memory", &memory_of, nb::sig("def memory(self) -> dict[str, int | float]"),
           "Memory and contents: keys, pairs ((key, worker-tier) pairs), worker_sets, "
           "table_bytes, set_bytes and bytes_per_pair_beyond_key.")
      .def("__repr__", [](const ResidencyIndex& self) {
        return "ResidencyIndex(" + std::to_string(self.num_workers()) + " workers, " +
               std::to_string(self.num_tiers()) + " tiers, " + std::to_string(self.size()) +
               " keys)";
      });

  nb::class_<PyRouterScores>(m, "RouterScores",
                             "Every worker's result for every request of score_workers. The "
                             "arrays are int64 and row-major [request][worker][group].")
      .def_ro("num_requests", &PyRouterScores::num_requests)
      .def_ro("num_workers", &PyRouterScores::num_workers)
      .def_ro("num_groups", &PyRouterScores::num_groups)
      .def_ro("hit_lengths", &PyRouterScores::hit_lengths,
              nb::sig("def hit_lengths(self) -> numpy.ndarray"),
              "int64 [R, W]: request r's hit length on worker w.")
      .def_ro("num_blocks", &PyRouterScores::num_blocks,
              nb::sig("def num_blocks(self) -> numpy.ndarray"),
              "int64 [R, W, G]: length of the block list of group g.")
      .def_ro("num_placeholders", &PyRouterScores::num_placeholders,
              nb::sig("def num_placeholders(self) -> numpy.ndarray"),
              "int64 [R, W, G]: leading placeholders of that list.")
      .def_ro("classes", &PyRouterScores::classes,
              "Distinct worker classes the scorer ended with, summed over requests.")
      .def_ro("index_reads", &PyRouterScores::index_reads,
              "Keys read from the residency index, summed over requests.")
      .def_ro("probes", &PyRouterScores::probes,
              "Existence bits answered to the finders over all classes, summed.")
      .def("__repr__", [](const PyRouterScores& s) {
        return "RouterScores(" + std::to_string(s.num_requests) + " requests, " +
               std::to_string(s.num_workers) + " workers, " + std::to_string(s.num_groups) +
               " groups)";
      });

  m.def(
      "score_workers",
      [](const PyCoordinator& coordinator, nb::handle digests, nb::handle offsets,
         nb::handle max_lengths, const ResidencyIndex& residency, nb::handle apply_eagle,
         std::int64_t ns, std::int64_t tier_mask, int num_threads, bool gpu) {
        return score(coordinator, digests, offsets, max_lengths, residency, apply_eagle, ns,
                     tier_mask, num_threads, gpu);
      },
      nb::arg("coordinator"), nb::arg("digests").none(), nb::arg("offsets").none(),
      nb::arg("max_lengths").none(), nb::arg("residency"), nb::kw_only(),
      nb::arg("apply_eagle").none() = nb::none(), nb::arg("namespace") = 0,
      nb::arg("tier_mask") = 0xFFFFFFFFLL, nb::arg("num_threads") = 0, nb::arg("gpu") = false,
      nb::sig("def score_workers(coordinator: Coordinator, digests: Digests, offsets: IntArray, "
              "max_lengths: int | IntArray, residency: ResidencyIndex, *, "
              "apply_eagle: bool | Sequence[bool] | numpy.ndarray | None = None, "
              "namespace: int = 0, tier_mask: int = 0xFFFFFFFF, num_threads: int = 0, "
              "gpu: bool = False) -> RouterScores"),
      "Every worker's exact hit for every request: result [r, w] equals "
      "coordinator.find_longest_cache_hit on worker w's own keys, computed in one pass over "
      "each request's probes. The batch arguments are those of find_longest_cache_hits. "
      "tier_mask: tiers that count as held (bit t: tier t). num_threads: 0 for every hardware "
      "thread. gpu: score on the GPU (one thread per worker class; same results and errors; "
      "num_threads unused), BackendUnavailableError without a CUDA device or CUDA build. Runs "
      "without the GIL; errors name the first failing request.");

  m.def(
      "top_k_workers",
      [](nb::handle hit_lengths, int k, nb::handle load) {
        const RouterScores scores = hit_lengths_of(hit_lengths);
        const std::vector<double> loads = load_of(load, scores.num_workers);
        std::vector<std::int32_t> best;
        {
          nb::gil_scoped_release release;
          best = top_k_workers(scores, k, loads);
        }
        return owned_array(std::move(best), {scores.num_requests, static_cast<std::size_t>(k)});
      },
      nb::arg("hit_lengths").none(), nb::arg("k"), nb::arg("load").none() = nb::none(),
      nb::sig("def top_k_workers(hit_lengths: numpy.ndarray | RouterScores, k: int, "
              "load: Sequence[float] | numpy.ndarray | None = None) -> numpy.ndarray"),
      "The k best workers per request: int32 [R, k], -1 past the last worker. Longest hit "
      "first, then lowest load[w], then lowest worker id. hit_lengths: an integer [R, W] "
      "array or score_workers' result; load: one number per worker, or None.");
}

}  // namespace prefixhit::py
