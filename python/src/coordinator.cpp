// prefixhit.Coordinator: the reference coordinator's Python surface over the C++ Coordinator.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

std::optional<std::int64_t> optional_int(nb::handle value, const char* name) {
  if (value.is_none()) {
    return std::nullopt;
  }
  return to_int64(value, name);
}

bool strict_bool(nb::handle value, const char* name) {
  PyObject* o = value.ptr();
  if (PyBool_Check(o) || PyLong_Check(o) ||
      std::string(Py_TYPE(o)->tp_name).rfind("numpy.bool", 0) == 0) {
    const int truth = PyObject_IsTrue(o);
    if (truth < 0) {
      throw nb::python_error();
    }
    return truth == 1;
  }
  PyErr_Format(PyExc_TypeError, "%s must be a bool, got %s", name, Py_TYPE(o)->tp_name);
  throw nb::python_error();
}

Config make_config(nb::handle groups, nb::handle scheduler_block_size, nb::handle hash_block_size,
                   nb::handle use_eagle, nb::handle retention_interval, nb::handle semantics,
                   nb::handle enable_partial_hash_hits, nb::handle digest_size = nb::none()) {
  Config config;
  config.semantics = semantics_from(semantics);
  if (!enable_partial_hash_hits.is_none()) {
    config.enable_partial_hash_hits =
        strict_bool(enable_partial_hash_hits, "enable_partial_hash_hits");
  }
  if (!digest_size.is_none()) {
    const std::int64_t width = to_int64(digest_size, "digest_size");
    config.digest_size = width < 0 ? 0 : static_cast<std::size_t>(width);  // 0: refused below
  }
  config.scheduler_block_size = to_int64(scheduler_block_size, "scheduler_block_size");
  config.hash_block_size = to_int64(hash_block_size, "hash_block_size");
  config.use_eagle = strict_bool(use_eagle, "use_eagle");
  config.retention_interval = optional_int(retention_interval, "retention_interval");
  if (PyDict_Check(groups.ptr()) || PyUnicode_Check(groups.ptr()) ||
      nb::isinstance<GroupSpec>(groups)) {
    PyErr_Format(PyExc_TypeError, "groups must be a list of GroupSpec or dict, got %s",
                 Py_TYPE(groups.ptr())->tp_name);
    throw nb::python_error();
  }
  nb::object fast = nb::steal(PySequence_Fast(groups.ptr(), ""));
  if (!fast.is_valid()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "groups must be a list of GroupSpec or dict, got %s",
                 Py_TYPE(groups.ptr())->tp_name);
    throw nb::python_error();
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    config.groups.push_back(spec_from_object(PySequence_Fast_GET_ITEM(fast.ptr(), i),
                                             "groups[" + std::to_string(i) + "]"));
  }
  return config;
}

Namespace to_namespace(nb::handle value) {
  const std::int64_t ns = to_int64(value, "namespace");
  if (ns < 0 || ns > static_cast<std::int64_t>(kMaxNamespace)) {
    throw InvalidArgument("namespace must be in [0, " + std::to_string(kMaxNamespace) + "], got " +
                          std::to_string(ns));
  }
  return static_cast<Namespace>(ns);
}

/// One lookup. A list of bytes is read lazily (only the probed digests are converted) and the
/// engine then runs holding the GIL; buffers with a native store run with the GIL released.
LookupResult run_lookup(PyCoordinator& self, nb::handle block_hashes, nb::handle max_length,
                        nb::handle store, bool apply_eagle, nb::handle ns) {
  const Coordinator& c = self.c;
  const bool device_store = is_block_index(store) && as_block_index(store).gpu;
  Digests digests(block_hashes, "block_hashes", DigestShape::sequence, c.config().digest_size,
                  /*lazy=*/!device_store);
  const std::int64_t max_len = to_int64(max_length, "max_length");
  if (device_store) {
    if (c.config().digest_size != BlockDigest::kSize) {
      throw InvalidArgument(
          "a 'cuda' BlockIndex serves only coordinators of digest_size 32 from Python, this one "
          "has " +
          std::to_string(c.config().digest_size));
    }
    // A device index answers through the GPU engine: a batch of one request.
    const std::int64_t offsets[2] = {0, static_cast<std::int64_t>(digests.size())};
    const std::uint8_t flag = apply_eagle ? 1 : 0;
    LookupBatch batch;
    batch.digests = digests.view();
    batch.offsets = {offsets, 2};
    batch.max_lengths = {&max_len, 1};
    batch.apply_eagle = {&flag, 1};
    gpu::BatchLookupEngine& engine = engine_of(self);
    const Namespace space = to_namespace(ns);
    BatchLookupResult batch_result;
    {
      nb::gil_scoped_release release;
      batch_result = engine.find_longest_cache_hits(batch, *as_block_index(store).gpu, space);
    }
    return batch_result.request(0);
  }
  const ResolvedStore resolved(store, to_namespace(ns), digests);
  LookupResult result;
  if (resolved.needs_gil()) {
    try {
      result = c.find_longest_cache_hit(digests.view(), max_len, resolved.source(), apply_eagle);
    } catch (...) {
      resolved.check();  // a Python error from the store wins over a follow-on C++ one
      throw;
    }
    resolved.check();
  } else {
    nb::gil_scoped_release release;
    result = c.find_longest_cache_hit(digests.view(), max_len, resolved.source(), apply_eagle);
  }
  return result;
}

nb::tuple lookup(PyCoordinator& self, nb::handle block_hashes, nb::handle max_length,
                 nb::handle store, bool apply_eagle, nb::handle ns, bool lazy) {
  const LookupResult result = run_lookup(self, block_hashes, max_length, store, apply_eagle, ns);
  if (lazy) {
    return nb::make_tuple(lazy_lookup_masks(result), result.hit_length);
  }
  return nb::make_tuple(lookup_masks(result), result.hit_length);
}

std::int64_t lookup_length(PyCoordinator& self, nb::handle block_hashes, nb::handle max_length,
                           nb::handle store, bool apply_eagle, nb::handle ns) {
  return run_lookup(self, block_hashes, max_length, store, apply_eagle, ns).hit_length;
}

nb::object chunk_result(std::vector<ChunkMask>&& masks, bool lazy) {
  if (lazy) {
    return lazy_chunk_masks(std::move(masks));
  }
  return chunk_masks(masks);
}

std::int64_t num_hashes_of(nb::handle block_hashes, std::size_t digest_size) {
  if (PyLong_Check(block_hashes.ptr())) {
    return to_int64(block_hashes, "block_hashes");
  }
  return static_cast<std::int64_t>(
      Digests(block_hashes, "block_hashes", DigestShape::sequence, digest_size).size());
}

nb::list spec_groups(const PyCoordinator& self) {
  const Coordinator& c = self.c;
  nb::object spec_group = nb::module_::import_("prefixhit._types").attr("SpecGroup");
  nb::list out;
  for (const SpecGroup& sg : c.spec_groups()) {
    nb::list ids;
    for (int id : sg.group_ids) {
      ids.append(id);
    }
    out.append(spec_group(ids, sg.use_eagle));
  }
  return out;
}

std::string repr(const PyCoordinator& self) {
  const Coordinator& c = self.c;
  std::string groups;
  for (const SpecGroup& sg : c.spec_groups()) {
    groups += groups.empty() ? "" : ", ";
    groups +=
        std::string(to_string(sg.spec.kind)) + "(" + std::to_string(sg.spec.block_size) + ")[";
    for (std::size_t i = 0; i < sg.group_ids.size(); ++i) {
      groups += (i ? "," : "") + std::to_string(sg.group_ids[i]);
    }
    groups += sg.use_eagle ? "]*" : "]";
  }
  return "Coordinator(semantics='" + std::string(to_string(c.config().semantics)) +
         "', hash_block_size=" + std::to_string(self.c.config().hash_block_size) +
         ", scheduler_block_size=" + std::to_string(self.c.config().scheduler_block_size) +
         ", lookup_alignment=" + std::to_string(c.lookup_alignment()) + ", spec_groups=[" + groups +
         "])";
}

}  // namespace

void bind_coordinator(nb::module_& m) {
  auto cls = nb::class_<PyCoordinator>(
      m, "Coordinator",
      "Prefix-hit lookups for one KV-cache configuration, with the answers of vLLM's "
      "MooncakeStoreCoordinator (SEMANTICS.md).\n\n"
      "Construction merges equal group specs into spec groups, sorts full attention first, "
      "spreads the EAGLE flag and validates the block sizes (InvalidConfigError). A "
      "Coordinator is immutable and safe to share between threads.");
  cls.def(
         "__init__",
         [](PyCoordinator* self, nb::handle groups, nb::handle scheduler_block_size,
            nb::handle hash_block_size, nb::handle use_eagle, nb::handle retention_interval,
            nb::handle semantics, nb::handle enable_partial_hash_hits, nb::handle digest_size) {
           Config config =
               make_config(groups, scheduler_block_size, hash_block_size, use_eagle,
                           retention_interval, semantics, enable_partial_hash_hits, digest_size);
           new (self) PyCoordinator(std::move(config));
         },
         nb::arg("groups").none(), nb::arg("scheduler_block_size").none(),
         nb::arg("hash_block_size").none(), nb::arg("use_eagle").none() = false,
         nb::arg("retention_interval").none() = nb::none(), nb::kw_only(),
         nb::arg("semantics") = "pr49069", nb::arg("enable_partial_hash_hits").none() = nb::none(),
         nb::arg("digest_size") = BlockDigest::kSize,
         nb::sig("def __init__(self, groups: Sequence[GroupSpec | Mapping[str, object]], "
                 "scheduler_block_size: int, hash_block_size: int, use_eagle: bool = False, "
                 "retention_interval: int | None = None, *, semantics: str = 'pr49069', "
                 "enable_partial_hash_hits: bool | None = None, digest_size: int = 32) -> None"),
         "groups: one spec per KV-cache group id, as GroupSpec objects or dicts shaped like "
         "the vectors' group objects (kind, block_size, eagle, sliding_window, "
         "attention_chunk_size, num_kv_heads, head_size, dtype, mamba_cache_mode, state_dim).\n"
         "scheduler_block_size: S, a common multiple of every block size.\n"
         "hash_block_size: H, the granularity of the request's hash chain.\n"
         "use_eagle: speculative decoding with an EAGLE/MTP drafter is on.\n"
         "retention_interval: None, 0 or a positive token count (store masks only).\n"
         "semantics: 'pr49069' (vLLM PR #49069) or 'vllm-0.33' (the vLLM 0.33.0 release, "
         "SEMANTICS.md 11).\n"
         "enable_partial_hash_hits: vllm-0.33: the coordinator's input, None for "
         "partial_hits_rule(groups, hash_block_size); pr49069: derived from the groups, and a "
         "given value must agree (InvalidConfigError otherwise).\n"
         "Group dicts may carry any other field of the real spec: it takes part in spec "
         "equality (GroupSpec.identity); a near-miss of a known field name is an error.\n"
         "digest_size: bytes per block hash, 8, 16 or 32 (vLLM's sha256 hashes are 32, "
         "xxhash 16, KV events' integer hashes 8). Every digest argument must have it, and a "
         "store must hold keys of it.")
      .def_static(
          "from_config",
          [](nb::dict config) {
            for (auto [key, value] : config) {
              const std::string name = nb::cast<std::string>(nb::str(key));
              if (name != "groups" && name != "scheduler_block_size" && name != "hash_block_size" &&
                  name != "use_eagle" && name != "retention_interval" &&
                  name != "enable_partial_hash_hits" && name != "semantics" &&
                  name != "digest_size") {
                throw InvalidConfig("unknown config field '" + name + "'");
              }
            }
            for (const char* required : {"groups", "scheduler_block_size", "hash_block_size"}) {
              if (!config.contains(required)) {
                throw InvalidConfig(std::string("config needs '") + required + "'");
              }
            }
            nb::object use_eagle =
                config.contains("use_eagle") ? config["use_eagle"] : nb::object(nb::bool_(false));
            nb::object retention =
                config.contains("retention_interval") ? config["retention_interval"] : nb::none();
            nb::object semantics =
                config.contains("semantics") ? config["semantics"] : nb::object(nb::str("pr49069"));
            nb::object partial = config.contains("enable_partial_hash_hits")
                                     ? config["enable_partial_hash_hits"]
                                     : nb::none();
            nb::object digest_size =
                config.contains("digest_size") ? config["digest_size"] : nb::none();
            return std::make_unique<PyCoordinator>(make_config(
                config["groups"], config["scheduler_block_size"], config["hash_block_size"],
                use_eagle, retention, semantics, partial, digest_size));
          },
          nb::arg("config"),
          nb::sig("def from_config(config: Mapping[str, object]) -> Coordinator"),
          "A coordinator from a conformance vector's `config` object (semantics, "
          "hash_block_size, scheduler_block_size, use_eagle, retention_interval, groups, "
          "enable_partial_hash_hits). semantics defaults to 'pr49069', where "
          "enable_partial_hash_hits is derived (a given value must agree with the groups); "
          "under 'vllm-0.33' it is the input (None: the engine rule).")
      .def_prop_ro(
          "num_groups", [](const PyCoordinator& self) { return self.c.num_groups(); },
          "Number of KV-cache groups.")
      .def_prop_ro("hash_block_size",
                   [](const PyCoordinator& self) { return self.c.config().hash_block_size; })
      .def_prop_ro("scheduler_block_size",
                   [](const PyCoordinator& self) { return self.c.config().scheduler_block_size; })
      .def_prop_ro("use_eagle", [](const PyCoordinator& self) { return self.c.config().use_eagle; })
      .def_prop_ro(
          "digest_size", [](const PyCoordinator& self) { return self.c.config().digest_size; },
          "Bytes per block hash: 8, 16 or 32.")
      .def_prop_ro("retention_interval",
                   [](const PyCoordinator& self) { return self.c.config().retention_interval; })
      .def_prop_ro(
          "groups", [](const PyCoordinator& self) { return self.c.config().groups; },
          "The group specs, indexed by group id.")
      .def_prop_ro(
          "eagle_group_ids", [](const PyCoordinator& self) { return self.c.eagle_group_ids(); },
          "Sorted member ids of the EAGLE-flagged spec groups (SEMANTICS.md 2.3).")
      .def_prop_ro("spec_groups", &spec_groups, nb::sig("def spec_groups(self) -> list[SpecGroup]"),
                   "Spec groups in processing order: (group_ids, use_eagle) named tuples, after "
                   "merging, sorting full attention first and the EAGLE fallback. Each compares "
                   "equal to the plain tuple or list [[ids...], flag].")
      .def_prop_ro(
          "enable_partial_hash_hits",
          [](const PyCoordinator& self) { return self.c.enable_partial_hash_hits(); },
          "Fine-grained (partial) hash hits: pr49069 derives them (some Mamba group in 'align' "
          "mode has a block larger than H, SEMANTICS.md 1.3); vllm-0.33 takes them as input "
          "(11.1).")
      .def_prop_ro(
          "semantics",
          [](const PyCoordinator& self) { return to_string(self.c.config().semantics); },
          "'pr49069' or 'vllm-0.33': the reference release this coordinator reproduces.")
      .def_prop_ro(
          "lookup_alignment", [](const PyCoordinator& self) { return self.c.lookup_alignment(); },
          "A: hash_block_size with partial hits, else scheduler_block_size.")
      .def(
          "align_lookup_length",
          [](const PyCoordinator& self, std::int64_t length) {
            return self.c.align_lookup_length(length);
          },
          nb::arg("length"), "floor(length / A) * A.")
      .def(
          "chunk_keys",
          [](const PyCoordinator& self, nb::handle block_hashes, std::int64_t block_size) {
            const std::size_t width = self.c.config().digest_size;
            const Digests digests(block_hashes, "block_hashes", DigestShape::sequence, width);
            nb::list out;
            for (const BlockDigest& key : self.c.chunk_keys(digests.view(), block_size)) {
              out.append(digest_bytes(key, width));
            }
            return out;
          },
          nb::arg("block_hashes").none(), nb::arg("block_size"),
          nb::sig("def chunk_keys(self, block_hashes: Digests, block_size: int) -> list[bytes]"),
          "The store keys of a group with `block_size` (SEMANTICS.md 1.2): the last hash of "
          "each whole block.")
      .def("find_longest_cache_hit", &lookup, nb::arg("block_hashes").none(),
           nb::arg("max_length").none(), nb::arg("store").none(), nb::kw_only(),
           nb::arg("apply_eagle") = true, nb::arg("namespace").none() = 0, nb::arg("lazy") = false,
           nb::sig("def find_longest_cache_hit(self, block_hashes: Digests, max_length: int, "
                   "store: Store, *, apply_eagle: bool = True, namespace: int = 0, "
                   "lazy: bool = False) -> tuple[Sequence[Sequence[bool]], int]"),
           "The longest prefix of the request present in `store` (SEMANTICS.md 5).\n\n"
           "block_hashes: the request's 32-byte digests (a list of bytes, or a [n, 32] uint8 "
           "array).\n"
           "max_length: tokens to consider, 0 <= max_length <= 2**40. Past the hashes, full "
           "attention stops at the last hash and a window, chunked-local or Mamba group that "
           "would index past the hash list raises InvalidArgumentError, as the reference does.\n"
           "store: a set (or frozenset, or other collections.abc.Set) of (group_id, key) "
           "pairs, probed in place; an iterable of pairs (converted); a KeySet; a "
           "BlockIndex (with `namespace`); or PlanAnswers from key_plan().\n"
           "apply_eagle: apply the EAGLE drop (the receive path passes False).\n"
           "lazy: return a tuple of Mask objects (equal to the lists, built in O(1)) instead "
           "of a list of lists.\n\n"
           "A list of bytes is read lazily: only the digests the lookup probes are converted "
           "(and checked), so a malformed entry the lookup never reaches raises nothing. "
           "Each digest read is referenced until the call returns. Buffers (numpy [n, 32] "
           "uint8) are read in place with the GIL released.\n\n"
           "Returns (masks, hit_length): masks[group_id] lists the group's blocks, False for a "
           "placeholder and True for a block to load. Raises the finder errors "
           "(UnsupportedLookupError subclasses) and InvalidArgumentError (a ValueError) for "
           "a max_length out of range.")
      .def("find_longest_cache_hit_length", &lookup_length, nb::arg("block_hashes").none(),
           nb::arg("max_length").none(), nb::arg("store").none(), nb::kw_only(),
           nb::arg("apply_eagle") = true, nb::arg("namespace").none() = 0,
           nb::sig("def find_longest_cache_hit_length(self, block_hashes: Digests, "
                   "max_length: int, store: Store, *, apply_eagle: bool = True, "
                   "namespace: int = 0) -> int"),
           "find_longest_cache_hit's hit_length alone: no mask is built.")
      .def(
          "load_mask",
          [](const PyCoordinator& self, nb::handle block_hashes, nb::handle token_len,
             bool lazy) -> nb::object {
            const std::int64_t n = num_hashes_of(block_hashes, self.c.config().digest_size);
            const LookupResult result = self.c.load_mask(n, to_int64(token_len, "token_len"));
            if (lazy) {
              return lazy_lookup_masks(result);
            }
            return lookup_masks(result);
          },
          nb::arg("block_hashes").none(), nb::arg("token_len").none(), nb::kw_only(),
          nb::arg("lazy") = false,
          nb::sig("def load_mask(self, block_hashes: Digests | int, token_len: int, *, "
                  "lazy: bool = False) -> Sequence[Sequence[bool]]"),
          "Which blocks of an already-decided hit to read (SEMANTICS.md 6): the lookup "
          "against a store holding every key, without the EAGLE drop. Only the number of "
          "hashes matters, so an int count is accepted too.")
      .def(
          "store_mask",
          [](const PyCoordinator& self, nb::handle aligned_token_len, nb::handle start_token,
             nb::handle num_prompt_tokens, bool lazy) {
            return chunk_result(
                self.c.store_mask(to_int64(aligned_token_len, "aligned_token_len"),
                                  to_int64(start_token, "start_token"),
                                  optional_int(num_prompt_tokens, "num_prompt_tokens")),
                lazy);
          },
          nb::arg("aligned_token_len").none(), nb::arg("start_token").none() = 0,
          nb::arg("num_prompt_tokens").none() = nb::none(), nb::kw_only(), nb::arg("lazy") = false,
          nb::sig("def store_mask(self, aligned_token_len: int, start_token: int = 0, "
                  "num_prompt_tokens: int | None = None, *, lazy: bool = False) "
                  "-> Sequence[Sequence[bool] | None]"),
          "Which chunks of each group a save of tokens [start_token, aligned_token_len) "
          "writes (SEMANTICS.md 7). Per group: None (every chunk in range) or one bool per "
          "chunk from ceil(start_token / B). None and [] differ. Raises UnalignedLengthError "
          "unless aligned_token_len is a multiple of lookup_alignment. lazy: a tuple of "
          "(None | Mask) instead of a list of lists.")
      .def(
          "lookup_mask",
          [](const PyCoordinator& self, nb::handle aligned_token_len, bool lazy) {
            return chunk_result(
                self.c.lookup_mask(to_int64(aligned_token_len, "aligned_token_len")), lazy);
          },
          nb::arg("aligned_token_len").none(), nb::kw_only(), nb::arg("lazy") = false,
          nb::sig("def lookup_mask(self, aligned_token_len: int, *, lazy: bool = False) "
                  "-> Sequence[Sequence[bool] | None]"),
          "store_mask with start_token 0, no retention interval and no prompt length: the "
          "chunks a lookup may find.")
      .def(
          "key_plan",
          [](const PyCoordinator& self, nb::handle block_hashes, nb::handle max_length) {
            const Digests digests(block_hashes, "block_hashes", DigestShape::sequence,
                                  self.c.config().digest_size);
            return PyKeyPlan{self.c.key_plan(digests.view(), to_int64(max_length, "max_length")),
                             self.c.num_groups()};
          },
          nb::arg("block_hashes").none(), nb::arg("max_length").none(),
          nb::sig("def key_plan(self, block_hashes: Digests, max_length: int) -> KeyPlan"),
          "The (group_id, key) pairs one lookup may read, for a remote store: ask the store "
          "about all of them at once, then pass plan.answers(present) as the lookup's store.")
      .def("__repr__", &repr);
  bind_batch(cls, m);
}

}  // namespace prefixhit::py
