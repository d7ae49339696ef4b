// prefixhit._core store bindings: vLLM's Mooncake store keys and remote mode (RemoteLookup),
// driven from Python by prefixhit.store with any object that has batch_is_exist.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"
#include "prefixhit/remote.hpp"
#include "prefixhit/store_keys.hpp"

namespace prefixhit::py {

namespace {

int to_int(nb::handle obj, const char* name) {
  const std::int64_t v = to_int64(obj, name);
  if (v < 0 || v > (1 << 30)) {
    throw InvalidArgument(std::string(name) + " must be in [0, 2^30], got " + std::to_string(v));
  }
  return static_cast<int>(v);
}

RankNamespace namespace_from(nb::handle obj, const std::string& where) {
  if (!nb::isinstance<nb::sequence>(obj) || nb::len(obj) != 4) {
    throw InvalidArgument(where + " must be a (tp_rank, pcp_rank, dcp_rank, pp_rank) tuple");
  }
  return RankNamespace{
      to_int(obj[0], (where + "[0]").c_str()), to_int(obj[1], (where + "[1]").c_str()),
      to_int(obj[2], (where + "[2]").c_str()), to_int(obj[3], (where + "[3]").c_str())};
}

nb::tuple namespace_tuple(const RankNamespace& ns) {
  return nb::make_tuple(ns.tp_rank, ns.pcp_rank, ns.dcp_rank, ns.pp_rank);
}

/// One digest from bytes-like input of 32 bytes.
BlockDigest one_digest(nb::handle obj) {
  const Digests d(nb::make_tuple(obj), "digest", DigestShape::sequence);
  return d.data()[0];
}

/// A str from a key: ASCII keys (digests in hex, rank fields, and in practice the model name)
/// are copied straight into a new compact str, skipping the UTF-8 decoder; any other key is
/// decoded as UTF-8. A new reference, or null with a Python error set.
PyObject* ascii_str(const std::string& key) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(key.data());
  const std::size_t n = key.size();
  std::uint64_t high = 0;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes + i, 8);
    high |= word;
  }
  for (; i < n; ++i) {
    high |= bytes[i];
  }
  if ((high & 0x8080808080808080ULL) != 0) {
    return PyUnicode_FromStringAndSize(key.data(), static_cast<Py_ssize_t>(n));
  }
  PyObject* str = PyUnicode_New(static_cast<Py_ssize_t>(n), 127);
  if (str != nullptr && n != 0) {
    std::memcpy(PyUnicode_1BYTE_DATA(str), bytes, n);
  }
  return str;
}

struct PyRemoteLookup {
  nb::object coordinator;  // keeps the PyCoordinator (and its GPU engine) alive
  std::optional<RemoteLookup> lookup;
};

RemoteOptions options_of(bool multi_round, int max_rounds) {
  return RemoteOptions{multi_round ? RemotePlan::multi_round : RemotePlan::one_round, max_rounds};
}

nb::dict stats_dict(const RemoteStats& s) {
  nb::dict d;
  d["rounds"] = s.rounds;
  d["keys_asked"] = s.keys_asked;
  d["candidates_asked"] = s.candidates_asked;
  d["candidates_total"] = s.candidates_total;
  nb::list per_round;
  for (std::int64_t k : s.keys_per_round) {
    per_round.append(k);
  }
  d["keys_per_round"] = per_round;
  return d;
}

}  // namespace

void bind_store(nb::module_& m) {
  nb::class_<StoreLayout>(m, "StoreLayout",
                          "How a deployment names its Mooncake store keys: cache prefix, model "
                          "name and, per KV-cache group, the rank namespaces a block must be in.")
      .def(
          "__init__",
          [](StoreLayout* self, const PyCoordinator& coordinator, const std::string& model_name,
             const std::string& cache_prefix, int tp_size, int pcp_size, int dcp_size, int pp_size,
             int num_kv_heads, nb::handle namespaces) {
            const ParallelLayout parallel{tp_size, pcp_size, dcp_size, pp_size, num_kv_heads};
            StoreLayout layout = StoreLayout::for_parallel(coordinator.c.config(),
                                                           {cache_prefix, model_name}, parallel);
            if (!namespaces.is_none()) {
              const std::size_t groups = layout.namespaces.size();
              if (!nb::isinstance<nb::sequence>(namespaces) || nb::len(namespaces) != groups) {
                throw InvalidArgument(
                    "namespaces must hold one list of (tp, pcp, dcp, pp) "
                    "tuples per group (" +
                    std::to_string(groups) + " groups)");
              }
              for (std::size_t g = 0; g < groups; ++g) {
                layout.namespaces[g].clear();
                const std::string where = "namespaces[" + std::to_string(g) + "]";
                for (nb::handle ns : nb::borrow<nb::sequence>(namespaces[g])) {
                  layout.namespaces[g].push_back(namespace_from(ns, where));
                }
                if (layout.namespaces[g].empty()) {
                  throw InvalidArgument(where + " is empty");
                }
              }
            }
            if (model_name.empty()) {
              throw InvalidArgument("model_name must not be empty");
            }
            new (self) StoreLayout(std::move(layout));
          },
          nb::arg("coordinator"), nb::arg("model_name"), nb::kw_only(),
          nb::arg("cache_prefix") = "", nb::arg("tp_size") = 1, nb::arg("pcp_size") = 1,
          nb::arg("dcp_size") = 1, nb::arg("pp_size") = 1, nb::arg("num_kv_heads") = 1,
          nb::arg("namespaces").none() = nb::none(),
          "vLLM's layout: group g checks the namespaces of its TP replication factor (1 under "
          "DCP and for Mamba, tp_size for MLA kinds, else max(1, tp_size // num_kv_heads)), for "
          "every pcp and pp rank. `namespaces` overrides them: one list of (tp, pcp, dcp, pp) "
          "tuples per group.")
      .def_prop_ro("model_name", [](const StoreLayout& s) { return s.format.model_name; })
      .def_prop_ro("cache_prefix", [](const StoreLayout& s) { return s.format.cache_prefix; })
      .def_prop_ro(
          "namespaces",
          [](const StoreLayout& s) {
            nb::list out;
            for (const auto& group : s.namespaces) {
              nb::list spaces;
              for (const RankNamespace& ns : group) {
                spaces.append(namespace_tuple(ns));
              }
              out.append(spaces);
            }
            return out;
          },
          "Per group id, the (tp, pcp, dcp, pp) namespaces a block must be present in.")
      .def(
          "key",
          [](const StoreLayout& s, int group_id, nb::handle digest, nb::handle ns) {
            if (group_id < 0 || static_cast<std::size_t>(group_id) >= s.namespaces.size()) {
              throw InvalidArgument("group_id " + std::to_string(group_id) + " is out of range");
            }
            const RankNamespace space = ns.is_none()
                                            ? s.namespaces[static_cast<std::size_t>(group_id)][0]
                                            : namespace_from(ns, "namespace");
            return store_key(s.format, space, group_id, one_digest(digest));
          },
          nb::arg("group_id"), nb::arg("digest"), nb::arg("namespace").none() = nb::none(),
          "The store key of a block digest for a group, in `namespace` (default: the group's "
          "first).")
      .def(
          "keys",
          [](const StoreLayout& s, int group_id, nb::handle digest) {
            if (group_id < 0 || static_cast<std::size_t>(group_id) >= s.namespaces.size()) {
              throw InvalidArgument("group_id " + std::to_string(group_id) + " is out of range");
            }
            const BlockDigest d = one_digest(digest);
            nb::list out;
            for (const RankNamespace& ns : s.namespaces[static_cast<std::size_t>(group_id)]) {
              out.append(store_key(s.format, ns, group_id, d));
            }
            return out;
          },
          nb::arg("group_id"), nb::arg("digest"),
          "The keys of a block digest in every namespace of the group (what a save writes "
          "across the ranks).");

  m.def(
      "parse_store_key",
      [](const std::string& key) -> nb::object {
        const std::optional<StoreKey> k = try_parse_store_key(key);
        if (!k) {
          return nb::none();
        }
        nb::dict d;
        d["cache_prefix"] = k->cache_prefix;
        d["model_name"] = k->model_name;
        d["namespace"] = namespace_tuple(k->ns);
        d["has_group"] = k->has_group;
        d["group_id"] = k->group_id;
        d["digest"] = nb::bytes(reinterpret_cast<const char*>(k->digest.data()), k->digest.size());
        return d;
      },
      nb::arg("key"),
      "Takes a vLLM Mooncake store key apart: a dict with cache_prefix, model_name, namespace "
      "(tp, pcp, dcp, pp), has_group, group_id and digest (bytes), or None for any other key.");

  nb::class_<PyRemoteLookup>(
      m, "RemoteLookup",
      "One remote lookup of a batch, round by round: ask `pending_keys` with batch_is_exist and "
      "pass the answers to `answer()` until `done` (prefixhit.store drives it).")
      .def_static(
          "batch",
          [](const nb::object& coordinator, const StoreLayout& layout, nb::handle digests,
             nb::handle offsets, nb::handle max_lengths, nb::handle apply_eagle, bool multi_round,
             int max_rounds) {
            const PyCoordinator& c = nb::cast<const PyCoordinator&>(coordinator);
            // Copied only: no Python code runs while RemoteLookup reads them.
            const Digests d(digests, "digests", DigestShape::sequence_or_flat, BlockDigest::kSize,
                            /*lazy=*/false, /*hold_items=*/false);
            const IntArray<std::int64_t> offs(offsets, "offsets");
            const IntArray<std::int64_t> lengths(max_lengths, "max_lengths");
            std::vector<std::uint8_t> flags;
            if (!apply_eagle.is_none()) {
              const IntArray<std::int64_t> values(apply_eagle, "apply_eagle");
              for (std::int64_t v : values.view()) {
                flags.push_back(v != 0 ? 1 : 0);
              }
            }
            PyRemoteLookup out{coordinator, std::nullopt};
            out.lookup.emplace(RemoteLookup::batch(
                c.c, layout, LookupBatch{d.view(), offs.view(), lengths.view(), flags},
                options_of(multi_round, max_rounds)));
            return out;
          },
          nb::arg("coordinator"), nb::arg("layout"), nb::arg("digests"), nb::arg("offsets"),
          nb::arg("max_lengths"), nb::kw_only(), nb::arg("apply_eagle").none() = nb::none(),
          nb::arg("multi_round") = false, nb::arg("max_rounds") = 6,
          "Batch mode: find_longest_cache_hits semantics against the store.")
      .def_static(
          "worker",
          [](const nb::object& coordinator, const StoreLayout& layout, nb::handle digests,
             nb::handle offsets, nb::handle num_tokens, bool multi_round, int max_rounds) {
            const PyCoordinator& c = nb::cast<const PyCoordinator&>(coordinator);
            // Copied only: no Python code runs while RemoteLookup reads them.
            const Digests d(digests, "digests", DigestShape::sequence_or_flat, BlockDigest::kSize,
                            /*lazy=*/false, /*hold_items=*/false);
            const IntArray<std::int64_t> offs(offsets, "offsets");
            const IntArray<std::int64_t> tokens(num_tokens, "num_tokens");
            PyRemoteLookup out{coordinator, std::nullopt};
            out.lookup.emplace(RemoteLookup::worker(c.c, layout, d.view(), offs.view(),
                                                    tokens.view(),
                                                    options_of(multi_round, max_rounds)));
            return out;
          },
          nb::arg("coordinator"), nb::arg("layout"), nb::arg("digests"), nb::arg("offsets"),
          nb::arg("num_tokens"), nb::kw_only(), nb::arg("multi_round") = false,
          nb::arg("max_rounds") = 6, "vLLM's worker-side lookup for each request.")
      .def_prop_ro("done", [](const PyRemoteLookup& s) { return s.lookup->done(); })
      .def_prop_ro(
          "pending_keys",
          [](const PyRemoteLookup& s) {
            const std::vector<std::string>& keys = s.lookup->pending_keys();
            PyObject* list = PyList_New(static_cast<Py_ssize_t>(keys.size()));
            if (list == nullptr) {
              throw nb::python_error();
            }
            for (std::size_t i = 0; i < keys.size(); ++i) {
              PyObject* str = ascii_str(keys[i]);
              if (str == nullptr) {
                Py_DECREF(list);
                throw nb::python_error();
              }
              PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), str);
            }
            return nb::steal<nb::list>(list);
          },
          "This round's keys (a new list of str on each access).")
      .def(
          "answer",
          [](PyRemoteLookup& s, nb::handle results) {
            const IntArray<std::int64_t> values(results, "results");
            s.lookup->answer(values.view());
          },
          nb::arg("results"),
          "The store's answers to pending_keys, one int per key (1 = present; 0 or a negative "
          "error code = absent), as batch_is_exist returns them.")
      .def_prop_ro("stats", [](const PyRemoteLookup& s) { return stats_dict(s.lookup->stats()); })
      .def(
          "result",
          [](const PyRemoteLookup& s, bool gpu) {
            PyBatchResult out;
            if (gpu) {
              gpu::BatchLookupEngine& engine = engine_of(nb::cast<PyCoordinator&>(s.coordinator));
              out.result = s.lookup->result(engine);
            } else {
              nb::gil_scoped_release release;
              out.result = s.lookup->result();
            }
            return out;
          },
          nb::kw_only(), nb::arg("gpu") = false,
          "Batch mode: the BatchLookupResult, from the CPU engine or (gpu=True) the GPU engine's "
          "presence-table path.")
      .def(
          "hit_lengths",
          [](const PyRemoteLookup& s) {
            nb::list out;  // a list: vLLM's callers want ints, and numpy need not be imported
            for (std::int64_t hit : s.lookup->hit_lengths()) {
              out.append(hit);
            }
            return out;
          },
          "Worker mode: the hit length of each request (a list of int).")
      .def(
          "presence_table",
          [](const PyRemoteLookup& s) {
            std::vector<std::uint8_t> table = s.lookup->presence_table();
            const std::size_t n = table.size();
            return owned_array(std::move(table), {n});
          },
          "The presence table of the GPU engine's layout (numpy uint8).");
}

}  // namespace prefixhit::py
