"""vLLM KV-cache spec objects -> prefixhit's group dicts, for :mod:`prefixhit.vllm`.

Duck-typed: spec classes are recognised by class name along their MRO, and every field of a spec
that the engine does not read becomes an ``identity.<name>`` entry, so two groups merge exactly
when vLLM's ``spec == spec`` says so. Private: import :func:`group_dict_from_vllm` from
:mod:`prefixhit.vllm`."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ._vllm_errors import VllmConfigAssertionError

# Class names -> the group kind of prefixhit's dict form. Looked up along the MRO, so a
# subclass of a known spec (a runtime's own variant) is read as its base kind.
_KIND_BY_CLASS = {
    "MLAAttentionSpec": "mla_attention",
    "FullAttentionSpec": "full_attention",
    "SlidingWindowMLASpec": "sliding_window_mla",
    "SlidingWindowSpec": "sliding_window",
    "ChunkedLocalAttentionSpec": "chunked_local",
    "MambaSpec": "mamba",
    "CircularBufferSpec": "circular_buffer",
    "CircularBufferAttentionSpec": "circular_buffer",
}
_UNSUPPORTED_CLASSES = {"CrossAttentionSpec", "EncoderOnlyAttentionSpec", "SinkFullAttentionSpec"}

# Fields the engine reads (besides identity). Everything else is identity.
_KNOWN_FIELDS = (
    "block_size",
    "num_kv_heads",
    "head_size",
    "dtype",
    "sliding_window",
    "attention_chunk_size",
    "mamba_cache_mode",
    "extra_retained_tokens",
    "bounded_replay",
)
# Per kind, the known fields the dict form takes (others of the object become identity).
_FIELDS_BY_KIND = {
    "full_attention": {
        "block_size", "num_kv_heads", "head_size", "dtype", "sliding_window",
        "attention_chunk_size",
    },
    "mla_attention": {"block_size", "num_kv_heads", "head_size", "dtype"},
    "sliding_window": {
        "block_size", "num_kv_heads", "head_size", "dtype", "sliding_window",
        "extra_retained_tokens",
    },
    "sliding_window_mla": {
        "block_size", "num_kv_heads", "head_size", "dtype", "sliding_window",
        "extra_retained_tokens", "bounded_replay",
    },
    "chunked_local": {"block_size", "num_kv_heads", "head_size", "dtype", "attention_chunk_size"},
    "mamba": {"block_size", "mamba_cache_mode"},
    "circular_buffer": {"block_size", "num_kv_heads", "head_size", "dtype"},
}


def _json_like(value: Any) -> Any:
    """A JSON-like rendering of a spec field for identity: equal values map to equal results."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (list, tuple)):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_like(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__class__": type(value).__name__}
        out.update({f.name: _json_like(getattr(value, f.name)) for f in dataclasses.fields(value)})
        return out
    text = str(value)
    # torch dtypes print as "torch.bfloat16"; numpy dtypes as "float16".
    return text[len("torch."):] if text.startswith("torch.") else text


def _spec_fields(spec: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return {k: v for k, v in vars(spec).items() if not k.startswith("_")}


def _kind_of(spec: Any) -> str:
    for cls in type(spec).__mro__:
        if cls.__name__ in _UNSUPPORTED_CLASSES:
            raise VllmConfigAssertionError(
                f"{cls.__name__} groups have no prefix-cache lookup (vLLM has no manager for them)"
            )
        kind = _KIND_BY_CLASS.get(cls.__name__)
        if kind is not None:
            return kind
    raise VllmConfigAssertionError(
        f"unknown KV cache spec class {type(spec).__name__}: expected one of "
        + ", ".join(sorted(_KIND_BY_CLASS))
    )


def _unwrap(spec: Any) -> Any:
    """The first inner spec of a UniformTypeKVCacheSpecs wrapper (SEMANTICS.md 8), else spec."""
    inner = getattr(spec, "kv_cache_specs", None)
    if inner is not None and any(
        c.__name__ == "UniformTypeKVCacheSpecs" for c in type(spec).__mro__
    ):
        values = list(inner.values()) if isinstance(inner, dict) else list(inner)
        if not values:
            raise VllmConfigAssertionError("UniformTypeKVCacheSpecs holds no spec")
        return values[0]
    return spec


def group_dict_from_vllm(spec: Any, *, eagle: bool = False) -> dict[str, Any]:
    """prefixhit's dict form of one vLLM spec object: the kind, the fields the engine reads,
    and every other field (as ``identity.<name>``) for spec equality."""
    outer = spec
    spec = _unwrap(spec)
    kind = _kind_of(spec)
    fields = _spec_fields(spec)
    group: dict[str, Any] = {"kind": kind, "eagle": bool(eagle)}
    wanted = _FIELDS_BY_KIND[kind]
    for name, value in fields.items():
        if name in wanted:
            if name == "dtype":
                value = _json_like(value)
            elif name == "mamba_cache_mode" and not isinstance(value, str):
                value = getattr(value, "value", str(value))
            elif name in ("extra_retained_tokens",) and value is None:
                continue
            group[name] = value
        else:
            group["identity." + name] = _json_like(value)
    group["identity.__class__"] = type(spec).__name__
    if outer is not spec:
        # Construction checks use the wrapper's block size; equality sees the whole wrapper.
        group["block_size"] = getattr(outer, "block_size", group.get("block_size"))
        group["identity.__wrapper__"] = _json_like(outer)
    if "block_size" not in group:
        raise VllmConfigAssertionError(f"{type(spec).__name__} has no block_size")
    if kind == "mamba":
        group.setdefault("mamba_cache_mode", "none")
    return group
