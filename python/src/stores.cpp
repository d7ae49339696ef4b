// Stores a lookup can run against: KeySet (a native set of pairs), KeyPlan / PlanAnswers (a
// remote store asked in one batch). The resident BlockIndex is in block_index.cpp.
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

/// Group ids for `n` keys: one scalar for all, or one per key.
std::vector<std::int32_t> group_ids_for(nb::handle group_ids, std::size_t n) {
  const IntArray<std::int32_t> ids(group_ids, "group_ids", /*allow_scalar=*/true);
  if (ids.scalar()) {
    return std::vector<std::int32_t>(n, *ids.scalar());
  }
  if (ids.size() != n) {
    throw InvalidArgument("group_ids has " + std::to_string(ids.size()) +
                          " entries but there are " + std::to_string(n) + " keys");
  }
  return std::vector<std::int32_t>(ids.view().begin(), ids.view().end());
}

}  // namespace

void bind_stores(nb::module_& m) {
  nb::class_<PyKeySet>(m, "KeySet",
                       "A native set of (group_id, key) pairs: the fastest store for repeated "
                       "or batched lookups when the caller owns the store content. Any group id "
                       "is accepted; ids outside a configuration never match.")
      .def(
          "__init__",
          [](PyKeySet* self, nb::handle entries, std::size_t digest_size) {
            KeySet set(digest_size);
            if (!entries.is_none()) {
              fill_key_set(set, entries, "entries");
            }
            new (self) PyKeySet{std::move(set)};
          },
          nb::arg("entries").none() = nb::none(), nb::kw_only(),
          nb::arg("digest_size") = BlockDigest::kSize,
          nb::sig("def __init__(self, entries: Iterable[tuple[int, bytes]] | None = None, *, "
                  "digest_size: int = 32) -> None"),
          "digest_size: the width of every key, 8, 16 or 32 bytes; a lookup needs a KeySet of "
          "its coordinator's digest_size.")
      .def_prop_ro(
          "digest_size", [](const PyKeySet& self) { return self.set.digest_size(); },
          "The width of the keys, in bytes.")
      .def(
          "add",
          [](PyKeySet& self, std::int64_t group_id, nb::handle key) {
            const Digests d(nb::make_tuple(key), "key", DigestShape::sequence,
                            self.set.digest_size());
            if (group_id < INT32_MIN || group_id > INT32_MAX) {
              throw InvalidArgument("group_id " + std::to_string(group_id) + " is out of range");
            }
            return self.set.insert(static_cast<int>(group_id), d.data()[0]);
          },
          nb::arg("group_id"), nb::arg("key").none(),
          nb::sig("def add(self, group_id: int, key: bytes) -> bool"),
          "Adds one pair; returns False if it was already present.")
      .def(
          "update",
          [](PyKeySet& self, nb::handle entries) { fill_key_set(self.set, entries, "entries"); },
          nb::arg("entries").none(),
          nb::sig("def update(self, entries: Iterable[tuple[int, bytes]]) -> None"),
          "Adds every (group_id, key) pair of an iterable.")
      .def(
          "insert",
          [](PyKeySet& self, nb::handle group_ids, nb::handle keys) {
            const Digests d(keys, "keys", DigestShape::sequence_or_flat, self.set.digest_size());
            const std::vector<std::int32_t> ids = group_ids_for(group_ids, d.size());
            std::size_t added = 0;
            for (std::size_t i = 0; i < d.size(); ++i) {
              added += self.set.insert(ids[i], d.data()[i]) ? 1 : 0;
            }
            return added;
          },
          nb::arg("group_ids").none(), nb::arg("keys").none(),
          nb::sig("def insert(self, group_ids: int | IntArray, keys: Digests) -> int"),
          "Bulk insert: keys as a [n, w] uint8 array (or bytes of n*w, or a list of w-byte "
          "bytes; w = digest_size), "
          "group_ids one int or one per key. Returns how many pairs were new.")
      .def(
          "__contains__",
          [](const PyKeySet& self, nb::handle pair) {
            if (!(PyTuple_Check(pair.ptr()) || PyList_Check(pair.ptr())) || nb::len(pair) != 2) {
              return false;
            }
            const std::int64_t gid = to_int64(pair[0], "group_id");
            const Py_ssize_t len = PyObject_Length(pair[1].ptr());
            if (len < 0) {
              PyErr_Clear();
            } else if (static_cast<std::size_t>(len) != self.set.digest_size() &&
                       BlockDigest::valid_size(static_cast<std::size_t>(len))) {
              return false;  // a key of another width is never in the set
            }
            const Digests d(nb::make_tuple(pair[1]), "key", DigestShape::sequence,
                            self.set.digest_size());
            return gid >= INT32_MIN && gid <= INT32_MAX &&
                   self.set.contains(static_cast<int>(gid), d.data()[0]);
          },
          nb::arg("pair").none())
      .def("__len__", [](const PyKeySet& self) { return self.set.size(); })
      .def(
          "clear", [](PyKeySet& self) { self.set.clear(); }, "Removes every pair.")
      .def("__repr__", [](const PyKeySet& self) {
        return "KeySet(" + std::to_string(self.set.size()) + " pairs)";
      });

  nb::class_<PyPlanAnswers>(m, "PlanAnswers",
                            "A remote store's answers to a KeyPlan, usable as the store of "
                            "find_longest_cache_hit for the same block_hashes. Keys outside the "
                            "plan count as absent.")
      .def_ro("num_hashes", &PyPlanAnswers::num_hashes);

  nb::class_<PyKeyPlan>(m, "KeyPlan",
                        "The (group_id, key) pairs one lookup may read (Coordinator.key_plan).")
      .def_prop_ro(
          "num_hashes", [](const PyKeyPlan& p) { return p.plan.num_hashes; },
          "Number of hashes of the request the plan was made for.")
      .def("__len__", [](const PyKeyPlan& p) { return p.plan.size(); })
      .def_prop_ro(
          "group_ids",
          [](const PyKeyPlan& p) {
            return owned_array(std::vector<std::int32_t>(p.plan.group_ids), {p.plan.size()});
          },
          nb::sig("def group_ids(self) -> numpy.ndarray"), "int32 [k]: group id per entry.")
      .def_prop_ro(
          "hash_indices",
          [](const PyKeyPlan& p) {
            return owned_array(std::vector<std::int64_t>(p.plan.hash_indices), {p.plan.size()});
          },
          nb::sig("def hash_indices(self) -> numpy.ndarray"),
          "int64 [k]: the key of entry i is block_hashes[hash_indices[i]].")
      .def_prop_ro(
          "keys",
          [](const PyKeyPlan& p) {
            const std::size_t w = p.plan.digest_size;
            std::vector<std::uint8_t> bytes(p.plan.size() * w);
            for (std::size_t i = 0; i < p.plan.size(); ++i) {
              std::copy(p.plan.keys[i].bytes.begin(),
                        p.plan.keys[i].bytes.begin() + static_cast<std::ptrdiff_t>(w),
                        bytes.begin() + static_cast<std::ptrdiff_t>(i * w));
            }
            return owned_array(std::move(bytes), {p.plan.size(), w});
          },
          nb::sig("def keys(self) -> numpy.ndarray"),
          "uint8 [k, digest_size]: the key of each entry.")
      .def(
          "pairs",
          [](const PyKeyPlan& p) {
            nb::list out;
            for (std::size_t i = 0; i < p.plan.size(); ++i) {
              out.append(nb::make_tuple(p.plan.group_ids[i],
                                        digest_bytes(p.plan.keys[i], p.plan.digest_size)));
            }
            return out;
          },
          nb::sig("def pairs(self) -> list[tuple[int, bytes]]"),
          "The entries as (group_id, key) tuples, the shape of a Python-set store.")
      .def(
          "answers",
          [](const PyKeyPlan& p, nb::handle present) {
            const IntArray<std::int64_t> flags(present, "present");
            if (flags.size() != p.plan.size()) {
              throw InvalidArgument("present has " + std::to_string(flags.size()) +
                                    " entries but the plan has " + std::to_string(p.plan.size()));
            }
            std::vector<std::uint8_t> bits(flags.size());
            for (std::size_t i = 0; i < bits.size(); ++i) {
              bits[i] = flags.view()[i] != 0 ? 1 : 0;
            }
            PyPlanAnswers out;
            out.answers =
                std::make_unique<PlanAnswers>(p.plan, span<const std::uint8_t>(bits), p.num_groups);
            out.num_hashes = p.plan.num_hashes;
            return out;
          },
          nb::arg("present").none(),
          nb::sig("def answers(self, present: Sequence[bool] | numpy.ndarray) -> PlanAnswers"),
          "The store's answers, one truth value per plan entry, as a lookup store.");
}

}  // namespace prefixhit::py
