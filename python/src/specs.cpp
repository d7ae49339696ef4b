// prefixhit.GroupSpec and the dict form of a group spec (SEMANTICS.md 9.2).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <functional>
#include <string>
#include <vector>

#include "common.hpp"
#include "prefixhit/errors.hpp"

namespace prefixhit::py {

namespace {

std::string as_string(nb::handle value, const std::string& where) {
  if (!PyUnicode_Check(value.ptr())) {
    type_error(where + " must be a str, got " + Py_TYPE(value.ptr())->tp_name);
  }
  return nb::cast<std::string>(value);
}

/// dtype is compared for spec equality only; accept torch/numpy dtypes by their name
/// ("torch.bfloat16" -> "bfloat16") so that a runtime can pass its own objects.
std::string as_dtype(nb::handle value) {
  if (value.is_none()) {
    return "";
  }
  if (PyUnicode_Check(value.ptr())) {
    return nb::cast<std::string>(value);
  }
  std::string text = nb::cast<std::string>(nb::str(value));
  const std::string prefix = "torch.";
  if (text.compare(0, prefix.size(), prefix) == 0) {
    text.erase(0, prefix.size());
  }
  return text;
}

bool as_bool(nb::handle value, const std::string& where) {
  PyObject* o = value.ptr();
  const std::string type = Py_TYPE(o)->tp_name;
  // bool, numpy.bool_ and plain 0/1 ints; anything else is most likely a misplaced field.
  if (PyBool_Check(o) || PyLong_Check(o) || type == "numpy.bool" || type == "numpy.bool_") {
    const int truth = PyObject_IsTrue(o);
    if (truth < 0) {
      throw nb::python_error();
    }
    return truth == 1;
  }
  type_error(where + " must be a bool, got " + type);
}

std::optional<std::int64_t> as_optional_int(nb::handle value, const std::string& where) {
  if (value.is_none()) {
    return std::nullopt;
  }
  return to_int64(value, where.c_str());
}

GroupKind kind_from(const std::string& name, const std::string& where) {
  try {
    return parse_group_kind(name);
  } catch (const Error& e) {
    throw InvalidConfig(where + ".kind: " + e.what());
  }
}

MambaCacheMode mode_from(const std::string& name, const std::string& where) {
  try {
    return parse_mamba_cache_mode(name);
  } catch (const Error& e) {
    throw InvalidConfig(where + ".mamba_cache_mode: " + e.what());
  }
}

}  // namespace

/// Canonical text of a spec's extra fields: compact JSON with sorted keys (tuples become lists,
/// other objects their str()), the same text the vector runner builds from JSON objects.
std::string canonical_identity(nb::handle fields, const std::string& where) {
  try {
    nb::object dumps = nb::module_::import_("json").attr("dumps");
    nb::object text =
        dumps(fields, nb::arg("sort_keys") = true, nb::arg("separators") = nb::make_tuple(",", ":"),
              nb::arg("ensure_ascii") = false,
              nb::arg("default") = nb::module_::import_("builtins").attr("str"));
    return nb::cast<std::string>(text);
  } catch (const nb::python_error& e) {
    throw InvalidConfig(where + ": extra spec fields cannot be compared: " + e.what());
  }
}

namespace {

GroupSpec spec_from_dict(nb::dict d, const std::string& where) {
  GroupSpec spec;
  bool have_kind = false;
  bool have_block_size = false;
  nb::dict extra;  // every other field: part of spec equality (SEMANTICS.md 2.1)
  for (auto [key_obj, value] : d) {
    if (!PyUnicode_Check(key_obj.ptr())) {
      type_error(where + ": field names must be str, got " + Py_TYPE(key_obj.ptr())->tp_name);
    }
    const std::string key = nb::cast<std::string>(key_obj);
    const std::string field = where + "." + key;
    if (key == "kind") {
      spec.kind = kind_from(as_string(value, field), where);
      have_kind = true;
    } else if (key == "block_size") {
      spec.block_size = to_int64(value, field.c_str());
      have_block_size = true;
    } else if (key == "eagle") {
      spec.eagle = as_bool(value, field);
    } else if (key == "num_kv_heads") {
      spec.num_kv_heads = to_int64(value, field.c_str());
    } else if (key == "head_size") {
      spec.head_size = to_int64(value, field.c_str());
    } else if (key == "dtype") {
      spec.dtype = as_dtype(value);
    } else if (key == "sliding_window") {
      spec.sliding_window = as_optional_int(value, field);
    } else if (key == "attention_chunk_size") {
      spec.attention_chunk_size = as_optional_int(value, field);
    } else if (key == "mamba_cache_mode") {
      spec.mamba_cache_mode = mode_from(as_string(value, field), where);
    } else if (key == "state_dim") {
      spec.state_dim = to_int64(value, field.c_str());
    } else if (key == "extra_retained_tokens") {
      spec.extra_retained_tokens = to_int64(value, field.c_str());
    } else if (key == "bounded_replay") {
      spec.bounded_replay = as_bool(value, field);
    } else if (const std::string_view typo = spec_field_typo(key); !typo.empty()) {
      throw InvalidConfig(where + ": field '" + key + "' looks like a misspelling of '" +
                          std::string(typo) + "'");
    } else {
      extra[key_obj] = value;
    }
  }
  if (!have_kind || !have_block_size) {
    throw InvalidConfig(where + " needs '" + (have_kind ? "block_size" : "kind") + "'");
  }
  if (extra.size() != 0) {
    spec.identity = canonical_identity(extra, where);
  }
  return spec;
}

std::string repr(const GroupSpec& s) {
  std::string out = std::string("GroupSpec(kind='") + to_string(s.kind) +
                    "', block_size=" + std::to_string(s.block_size);
  if (s.eagle) {
    out += ", eagle=True";
  }
  if (s.sliding_window) {
    out += ", sliding_window=" + std::to_string(*s.sliding_window);
  }
  if (s.attention_chunk_size) {
    out += ", attention_chunk_size=" + std::to_string(*s.attention_chunk_size);
  }
  if (s.kind == GroupKind::mamba) {
    out += std::string(", mamba_cache_mode='") + to_string(s.mamba_cache_mode) +
           "', state_dim=" + std::to_string(s.state_dim);
  }
  if (s.num_kv_heads != 0 || s.head_size != 0 || !s.dtype.empty()) {
    out += ", num_kv_heads=" + std::to_string(s.num_kv_heads) +
           ", head_size=" + std::to_string(s.head_size) + ", dtype='" + s.dtype + "'";
  }
  if (s.extra_retained_tokens != 0) {
    out += ", extra_retained_tokens=" + std::to_string(s.extra_retained_tokens);
  }
  if (s.bounded_replay) {
    out += ", bounded_replay=True";
  }
  if (!s.identity.empty()) {
    out += ", identity='" + s.identity + "'";
  }
  return out + ")";
}

bool same_everything(const GroupSpec& a, const GroupSpec& b) {
  return a.eagle == b.eagle && a.same_spec(b);
}

}  // namespace

GroupSpec spec_from_object(nb::handle obj, const std::string& where) {
  if (nb::isinstance<GroupSpec>(obj)) {
    return nb::cast<const GroupSpec&>(obj);
  }
  if (PyDict_Check(obj.ptr())) {
    return spec_from_dict(nb::borrow<nb::dict>(obj), where);
  }
  if (nb::hasattr(obj, "keys") && nb::hasattr(obj, "__getitem__")) {  // other mappings
    PyObject* copy = PyObject_CallOneArg(reinterpret_cast<PyObject*>(&PyDict_Type), obj.ptr());
    if (copy == nullptr) {
      throw nb::python_error();
    }
    return spec_from_dict(nb::steal<nb::dict>(copy), where);
  }
  type_error(where + " must be a prefixhit.GroupSpec or a dict, got " +
             Py_TYPE(obj.ptr())->tp_name);
}

nb::dict spec_to_dict(const GroupSpec& s) {
  nb::dict d;
  d["kind"] = to_string(s.kind);
  d["block_size"] = s.block_size;
  if (s.kind == GroupKind::mamba) {
    d["mamba_cache_mode"] = to_string(s.mamba_cache_mode);
    d["state_dim"] = s.state_dim;
  } else {
    d["num_kv_heads"] = s.num_kv_heads;
    d["head_size"] = s.head_size;
    d["dtype"] = s.dtype;
  }
  if (s.sliding_window) {
    d["sliding_window"] = *s.sliding_window;
  }
  if (s.attention_chunk_size) {
    d["attention_chunk_size"] = *s.attention_chunk_size;
  }
  if (s.extra_retained_tokens != 0) {
    d["extra_retained_tokens"] = s.extra_retained_tokens;
  }
  if (s.bounded_replay) {
    d["bounded_replay"] = true;
  }
  if (!s.identity.empty()) {
    // The extra fields come back as fields, so from_dict(to_dict()) round-trips.
    nb::object extra;
    try {
      extra = nb::module_::import_("json").attr("loads")(s.identity);
    } catch (const nb::python_error&) {
      extra = nb::none();  // identity text set from C++ need not be JSON
    }
    if (PyDict_Check(extra.ptr())) {
      for (auto [key, value] : nb::borrow<nb::dict>(extra)) {
        d[key] = value;
      }
    } else {
      d["identity"] = s.identity;
    }
  }
  d["eagle"] = s.eagle;
  return d;
}

namespace {

/// The identity argument of GroupSpec(): a mapping of extra fields, or canonical text as is.
std::string identity_from(nb::handle identity) {
  if (identity.is_none()) {
    return "";
  }
  if (PyUnicode_Check(identity.ptr())) {
    return nb::cast<std::string>(identity);
  }
  if (!PyDict_Check(identity.ptr())) {
    type_error(
        std::string("GroupSpec identity must be a dict of extra spec fields or a str, got ") +
        Py_TYPE(identity.ptr())->tp_name);
  }
  const nb::dict fields = nb::borrow<nb::dict>(identity);
  return fields.size() == 0 ? std::string() : canonical_identity(fields, "GroupSpec identity");
}

}  // namespace

Semantics semantics_from(nb::handle value) {
  if (!PyUnicode_Check(value.ptr())) {
    type_error(std::string("semantics must be 'pr49069' or 'vllm-0.33', got ") +
               Py_TYPE(value.ptr())->tp_name);
  }
  try {
    return parse_semantics(nb::cast<std::string>(value));
  } catch (const Error& e) {
    throw InvalidConfig(e.what());
  }
}

void bind_specs(nb::module_& m) {
  nb::class_<GroupSpec>(m, "GroupSpec",
                        "One KV-cache group's spec (SEMANTICS.md 2.1, 9.2). Immutable.\n\n"
                        "Every field except ``eagle`` takes part in spec equality: groups whose "
                        "specs are equal merge into one spec group. ``kind`` is one of "
                        "'full_attention', 'mla_attention', 'sliding_window', "
                        "'sliding_window_mla', 'chunked_local', 'mamba'.")
      .def(
          "__init__",
          [](GroupSpec* self, const std::string& kind, std::int64_t block_size, bool eagle,
             std::int64_t num_kv_heads, std::int64_t head_size, nb::handle dtype,
             std::optional<std::int64_t> sliding_window,
             std::optional<std::int64_t> attention_chunk_size, const std::string& mamba_cache_mode,
             std::int64_t state_dim, std::int64_t extra_retained_tokens, bool bounded_replay,
             nb::handle identity) {
            GroupSpec spec;
            spec.kind = kind_from(kind, "GroupSpec");
            spec.block_size = block_size;
            spec.eagle = eagle;
            spec.num_kv_heads = num_kv_heads;
            spec.head_size = head_size;
            spec.dtype = as_dtype(dtype);
            spec.sliding_window = sliding_window;
            spec.attention_chunk_size = attention_chunk_size;
            spec.mamba_cache_mode = mode_from(mamba_cache_mode, "GroupSpec");
            spec.state_dim = state_dim;
            spec.extra_retained_tokens = extra_retained_tokens;
            spec.bounded_replay = bounded_replay;
            spec.identity = identity_from(identity);
            new (self) GroupSpec(std::move(spec));
          },
          nb::arg("kind"), nb::arg("block_size"), nb::arg("eagle") = false, nb::kw_only(),
          nb::arg("num_kv_heads") = 0, nb::arg("head_size") = 0,
          nb::arg("dtype").none().sig("''") = nb::str(""), nb::arg("sliding_window") = nb::none(),
          nb::arg("attention_chunk_size") = nb::none(), nb::arg("mamba_cache_mode") = "none",
          nb::arg("state_dim") = 0, nb::arg("extra_retained_tokens") = 0,
          nb::arg("bounded_replay") = false, nb::arg("identity").none() = nb::none(),
          "Builds a spec. Fields a kind does not use keep their defaults; the coordinator "
          "rejects missing required ones (a window for sliding_window kinds, a chunk size for "
          "chunked_local) with InvalidConfigError. extra_retained_tokens and bounded_replay "
          "are vllm-0.33 fields (SEMANTICS.md 11.2). identity: every other field of the real "
          "spec, as a dict (canonicalised) or canonical JSON text; it takes part in equality.")
      .def_static(
          "from_dict", [](nb::handle d) { return spec_from_object(d, "spec"); },
          nb::arg("spec").none(),
          "A spec from a dict shaped like the conformance vectors' group objects.")
      .def("to_dict", &spec_to_dict, "The vector-style dict of this spec.")
      .def_prop_ro("kind", [](const GroupSpec& s) { return to_string(s.kind); })
      .def_ro("block_size", &GroupSpec::block_size)
      .def_ro("eagle", &GroupSpec::eagle, "The group holds EAGLE/MTP draft layers.")
      .def_ro("num_kv_heads", &GroupSpec::num_kv_heads)
      .def_ro("head_size", &GroupSpec::head_size)
      .def_ro("dtype", &GroupSpec::dtype)
      .def_ro("sliding_window", &GroupSpec::sliding_window)
      .def_ro("attention_chunk_size", &GroupSpec::attention_chunk_size)
      .def_prop_ro("mamba_cache_mode",
                   [](const GroupSpec& s) { return to_string(s.mamba_cache_mode); })
      .def_ro("state_dim", &GroupSpec::state_dim)
      .def_ro("extra_retained_tokens", &GroupSpec::extra_retained_tokens)
      .def_ro("bounded_replay", &GroupSpec::bounded_replay)
      .def_ro("identity", &GroupSpec::identity,
              "Canonical JSON text of the spec's other fields ('' when none).")
      .def_prop_ro("prefix_cacheable", &GroupSpec::prefix_cacheable,
                   "False for circular buffers and bounded-replay window-MLA groups (11.3).")
      .def(
          "same_spec",
          [](const GroupSpec& a, const GroupSpec& b, nb::handle semantics) {
            return a.same_spec(b, semantics_from(semantics));
          },
          nb::arg("other"), nb::arg("semantics") = "pr49069",
          "Spec equality: every field but ``eagle``, the kind and identity included (the merge "
          "rule). Under 'vllm-0.33' window kinds compare the coverage window.")
      .def(
          "__eq__",
          [](const GroupSpec& a, nb::handle b) -> nb::object {
            if (!nb::isinstance<GroupSpec>(b)) {
              return nb::borrow(Py_NotImplemented);
            }
            return nb::bool_(same_everything(a, nb::cast<const GroupSpec&>(b)));
          },
          nb::arg("other").none())
      .def("__hash__",
           [](const GroupSpec& s) {
             std::size_t h = std::hash<std::string>()(s.dtype);
             for (std::int64_t v :
                  {static_cast<std::int64_t>(s.kind), s.block_size, std::int64_t{s.eagle},
                   s.num_kv_heads, s.head_size, s.sliding_window.value_or(-1),
                   s.attention_chunk_size.value_or(-1),
                   static_cast<std::int64_t>(s.mamba_cache_mode), s.state_dim,
                   s.extra_retained_tokens, std::int64_t{s.bounded_replay},
                   static_cast<std::int64_t>(std::hash<std::string>()(s.identity))}) {
               h = h * 1000003U ^ std::hash<std::int64_t>()(v);
             }
             return static_cast<Py_ssize_t>(h >> 1);
           })
      .def("__repr__", &repr)
      .def("__getstate__", &spec_to_dict)
      .def("__setstate__", [](GroupSpec& self, nb::dict state) {
        new (&self) GroupSpec(spec_from_object(state, "state"));
      });

  m.def(
      "partial_hits_rule",
      [](nb::handle groups, std::int64_t hash_block_size, std::int64_t dcp_world_size) {
        nb::object fast = nb::steal(PySequence_Fast(groups.ptr(), ""));
        if (!fast.is_valid() || PyDict_Check(groups.ptr())) {
          PyErr_Clear();
          type_error(std::string("groups must be a list of GroupSpec or dict, got ") +
                     Py_TYPE(groups.ptr())->tp_name);
        }
        std::vector<GroupSpec> specs;
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
        for (Py_ssize_t i = 0; i < n; ++i) {
          specs.push_back(spec_from_object(PySequence_Fast_GET_ITEM(fast.ptr(), i),
                                           "groups[" + std::to_string(i) + "]"));
        }
        return partial_hits_rule(span<const GroupSpec>(specs), hash_block_size, dcp_world_size);
      },
      nb::arg("groups"), nb::arg("hash_block_size"), nb::arg("dcp_world_size") = 1,
      nb::sig("def partial_hits_rule(groups: Sequence[GroupSpec | Mapping[str, object]], "
              "hash_block_size: int, dcp_world_size: int = 1) -> bool"),
      "vLLM 0.33's engine rule for enable_partial_hash_hits (SEMANTICS.md 11.1): more than one "
      "group, a Mamba 'align' group with block_size > H (>= H with DCP), and every "
      "prefix-cacheable window or chunked-local group with block_size * dcp == H.");
}

}  // namespace prefixhit::py
