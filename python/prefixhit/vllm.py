"""A drop-in for vLLM's ``MooncakeStoreCoordinator`` (the Mooncake store connector's cache-hit
logic), answered by prefixhit's C++ engine.

Swap the import and keep the calling code::

    # from vllm.distributed.kv_transfer.kv_connector.v1.mooncake_store.coordinator import (
    #     ExternalCachedBlockPool, MooncakeStoreCoordinator)
    from prefixhit.vllm import ExternalCachedBlockPool, MooncakeStoreCoordinator

The module imports no vLLM code. It reads vLLM's own objects by duck typing: a
``KVCacheGroupSpec`` is anything with ``kv_cache_spec`` (and optionally ``is_eagle_group``);
spec classes are recognised by class name along their MRO (``FullAttentionSpec``,
``MLAAttentionSpec``, ``SlidingWindowSpec``, ``SlidingWindowMLASpec``,
``ChunkedLocalAttentionSpec``, ``MambaSpec``, the circular-buffer spec of vLLM 0.33, and the
``UniformTypeKVCacheSpecs`` wrapper). Every dataclass field of a spec takes part in its identity,
so two groups merge exactly when vLLM's ``spec == spec`` says so.

``semantics`` picks the reference version: ``"vllm-0.33"`` (the default, vLLM 0.33.0) or
``"pr49069"`` (vLLM commit 5c4fe4b, PR #49069). Where vLLM asserts, the errors raised here derive
from both the prefixhit error class and :class:`AssertionError`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from . import errors
from ._core import Coordinator, KeySet

__all__ = [
    "ExternalCachedBlockPool",
    "MooncakeStoreCoordinator",
    "VllmAlignmentChunkedLocalAssertionError",
    "VllmAlignmentSlidingWindowAssertionError",
    "VllmAssertionError",
    "VllmConfigAssertionError",
    "VllmEagleChunkedLocalAssertionError",
    "VllmUnalignedLengthAssertionError",
    "group_dict_from_vllm",
]

SEMANTICS = ("vllm-0.33", "pr49069")


class VllmAssertionError(errors.PrefixhitError, AssertionError):
    """A failure where vLLM's coordinator raises AssertionError (its callers catch that)."""


class VllmConfigAssertionError(errors.InvalidConfigError, AssertionError):
    """An invalid configuration, where vLLM's constructor asserts."""


class VllmUnalignedLengthAssertionError(errors.UnalignedLengthError, AssertionError):
    """A mask length not a multiple of ``lcm_block_size``, where vLLM asserts."""


class VllmEagleChunkedLocalAssertionError(errors.UnsupportedEagleChunkedLocalError, AssertionError):
    """Chunked local attention asked to apply the EAGLE drop, where vLLM asserts."""


class VllmAlignmentChunkedLocalAssertionError(
    errors.UnsupportedAlignmentChunkedLocalError, AssertionError
):
    """A chunked-local block size that differs from the alignment, where vLLM asserts."""


class VllmAlignmentSlidingWindowAssertionError(
    errors.UnsupportedAlignmentSlidingWindowError, AssertionError
):
    """An alignment that is not a multiple of a window block size (pr49069), where vLLM asserts."""


_ASSERTING = {
    errors.InvalidConfigError: VllmConfigAssertionError,
    errors.UnalignedLengthError: VllmUnalignedLengthAssertionError,
    errors.UnsupportedEagleChunkedLocalError: VllmEagleChunkedLocalAssertionError,
    errors.UnsupportedAlignmentChunkedLocalError: VllmAlignmentChunkedLocalAssertionError,
    errors.UnsupportedAlignmentSlidingWindowError: VllmAlignmentSlidingWindowAssertionError,
}


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


class _NullBlock:
    """The sentinel vLLM's pool hands out for a placeholder (identity only)."""

    block_id = 0

    def __repr__(self) -> str:
        return "KVCacheBlock(block_id=0)"


class _PresentBlock:
    block_id = 1

    def __repr__(self) -> str:
        return "KVCacheBlock(block_id=1)"


class ExternalCachedBlockPool:
    """vLLM's pool over a ``(group_id, hash)`` exists set, with the same constructor and
    ``get_cached_block`` / ``contains``. ``exists=None`` answers "present" for everything (the
    receive side). The set is probed in place by the engine; no copy is made."""

    def __init__(
        self, hash_block_size: int | None = None, exists: Iterable[tuple[int, bytes]] | None = None
    ) -> None:
        self.hash_block_size = hash_block_size
        self._exists = exists
        self.null_block = _NullBlock()
        self._present_block = _PresentBlock()

    def get_cached_block(self, block_hash: Any, group_ids: Sequence[int]) -> list[Any] | None:
        if self._exists is None:
            return [self._present_block] * len(group_ids)
        h = bytes(block_hash)
        if all((g, h) in self._exists for g in group_ids):
            return [self._present_block] * len(group_ids)
        return None

    def contains(self, group_id: int, block_hash: Any) -> bool:
        return self._exists is not None and (group_id, bytes(block_hash)) in self._exists


class _ProbeOnly(AbstractSet):  # type: ignore[type-arg]
    """A store the engine probes with ``in`` (a collections.abc.Set); it cannot be listed."""

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"{type(self).__name__} can only be probed")

    def __len__(self) -> int:
        return 0


class _AllPresent(_ProbeOnly):
    """A store holding every key (the pool with ``exists=None``)."""

    def __contains__(self, pair: object) -> bool:
        return True


def _store_of(pool: Any) -> Any:
    """The engine-facing store of whatever the caller passed as the pool."""
    if isinstance(pool, (KeySet, set, frozenset)) or type(pool).__name__ in (
        "BlockIndex",
        "PlanAnswers",
    ):
        return pool
    if hasattr(pool, "_exists"):  # ours or vLLM's ExternalCachedBlockPool
        exists = pool._exists
        return _ALL if exists is None else exists
    if hasattr(pool, "get_cached_block"):  # any other BlockPool-like object
        return _PoolAdapter(pool)
    return pool


_ALL = _AllPresent()


class _PoolAdapter(_ProbeOnly):
    """A BlockPool-like object probed one (group, hash) at a time through get_cached_block."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def __contains__(self, pair: tuple[int, bytes]) -> bool:
        group_id, key = pair
        return self._pool.get_cached_block(key, [group_id]) is not None


def _as_hash_list(block_hashes: Any) -> Any:
    """vLLM passes a list of BlockHash (bytes subclasses). A flat bytes-like buffer of n*32
    bytes is viewed as [n, 32] without a copy."""
    if isinstance(block_hashes, (bytes, bytearray, memoryview)):
        view = memoryview(block_hashes).cast("B")
        if len(view) % 32:
            raise errors.InvalidArgumentError(
                f"block_hashes has {len(view)} bytes, not a whole number of 32-byte digests"
            )
        return view.cast("B", (len(view) // 32, 32))
    return block_hashes


def _translate(exc: errors.PrefixhitError) -> Exception:
    """The AssertionError-derived class for an engine error where vLLM asserts."""
    cls = _ASSERTING.get(type(exc))
    return exc if cls is None else cls(str(exc), exc.kind)


class MooncakeStoreCoordinator:
    """vLLM's ``MooncakeStoreCoordinator`` with the same constructor, attributes and methods,
    computed by prefixhit. See the module docstring."""

    def __init__(
        self,
        kv_cache_groups: Sequence[Any],
        scheduler_block_size: int,
        hash_block_size: int,
        use_eagle: bool = False,
        retention_interval: int | None = None,
        *,
        enable_partial_hash_hits: bool | None = None,
        semantics: str = "vllm-0.33",
        digest_size: int = 32,
    ) -> None:
        if semantics not in SEMANTICS:
            raise errors.InvalidConfigError(
                f"semantics must be one of {', '.join(SEMANTICS)}, got {semantics!r}"
            )
        self.kv_cache_groups = list(kv_cache_groups)
        self.hash_block_size = hash_block_size
        self.use_eagle = bool(use_eagle)
        self.retention_interval = retention_interval
        self.semantics = semantics
        self.digest_size = digest_size
        specs = []
        groups = []
        for i, g in enumerate(self.kv_cache_groups):
            spec = getattr(g, "kv_cache_spec", None)
            if spec is None:
                raise VllmConfigAssertionError(
                    f"kv_cache_groups[{i}] has no kv_cache_spec (expected a KVCacheGroupSpec)"
                )
            specs.append(spec)
            eagle = bool(getattr(g, "is_eagle_group", False))
            groups.append(group_dict_from_vllm(spec, eagle=eagle))
        config: dict[str, Any] = {
            "groups": groups,
            "scheduler_block_size": scheduler_block_size,
            "hash_block_size": hash_block_size,
            "use_eagle": self.use_eagle,
            "retention_interval": retention_interval,
            "semantics": semantics,
        }
        if semantics != "pr49069":
            config["enable_partial_hash_hits"] = enable_partial_hash_hits
        elif enable_partial_hash_hits is not None:
            raise errors.InvalidConfigError(
                "enable_partial_hash_hits is an input only under semantics='vllm-0.33' "
                "(pr49069 derives it from the groups)"
            )
        if digest_size != 32:
            config["digest_size"] = digest_size
        try:
            self._core = Coordinator.from_config(config)
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None
        core = self._core
        self.enable_partial_hash_hits = core.enable_partial_hash_hits
        # vLLM's lcm_block_size is the lookup alignment: H with partial hits, else S.
        self.lcm_block_size = core.lookup_alignment
        self.scheduler_block_size = scheduler_block_size
        self.eagle_group_ids = set(core.eagle_group_ids)
        self._specs = [_unwrap(s) for s in specs]
        self.attention_groups = [
            (self._specs[sg.group_ids[0]], list(sg.group_ids), groups[sg.group_ids[0]]["kind"])
            for sg in core.spec_groups
        ]
        self.eagle_attn_group_indices = {
            i for i, sg in enumerate(core.spec_groups) if sg.use_eagle
        }
        if semantics == "vllm-0.33":
            self.mamba_group_ids = {i for i, g in enumerate(groups) if g["kind"] == "mamba"}
            self.eagle_proof_margin_by_group = self._eagle_margins(groups)

    def _eagle_margins(self, groups: list[dict[str, Any]]) -> dict[int, int]:
        """The EAGLE margin per group id of an EAGLE spec group (SEMANTICS.md 5.2 / 11.6)."""
        out: dict[int, int] = {}
        H = self.hash_block_size
        for sg in self._core.spec_groups:
            if not sg.use_eagle:
                continue
            g = groups[sg.group_ids[0]]
            B = int(g["block_size"])
            if g["kind"] == "mamba":
                margin = 0
            elif self.enable_partial_hash_hits and g["kind"] in (
                "full_attention",
                "mla_attention",
            ) and B > H:
                margin = H
            else:
                margin = B
            for gid in sg.group_ids:
                out[gid] = margin
        return out

    @classmethod
    def from_kv_cache_config(
        cls,
        kv_cache_config: Any,
        vllm_config: Any,
        scheduler_block_size: int,
        hash_block_size: int,
        **kwargs: Any,
    ) -> MooncakeStoreCoordinator:
        """Build from vLLM's ``KVCacheConfig`` and ``VllmConfig`` (duck-typed): the groups, EAGLE
        from the speculative config, the retention interval from the cache config."""
        groups = kv_cache_config.kv_cache_groups
        spec_cfg = getattr(vllm_config, "speculative_config", None)
        use_eagle = bool(
            spec_cfg is not None
            and (getattr(spec_cfg, "use_eagle", None) or getattr(spec_cfg, "method", None)
                 in ("eagle", "eagle3", "mtp", "deepseek_mtp"))
        )
        if callable(getattr(spec_cfg, "use_eagle", None)):
            use_eagle = bool(spec_cfg.use_eagle())
        cache_cfg = getattr(vllm_config, "cache_config", None)
        kwargs.setdefault("retention_interval", getattr(cache_cfg, "retention_interval", None))
        parallel = getattr(vllm_config, "parallel_config", None)
        dcp = int(getattr(parallel, "decode_context_parallel_size", 1) or 1)
        if (
            dcp != 1
            and kwargs.get("semantics", "vllm-0.33") == "vllm-0.33"
            and kwargs.get("enable_partial_hash_hits") is None
        ):
            # The engine rule depends on the decode-context-parallel size (SEMANTICS.md 11.1).
            from . import partial_hits_rule  # type: ignore[attr-defined]

            dicts = [
                group_dict_from_vllm(
                    g.kv_cache_spec, eagle=bool(getattr(g, "is_eagle_group", False))
                )
                for g in groups
            ]
            kwargs["enable_partial_hash_hits"] = bool(
                partial_hits_rule(dicts, hash_block_size, dcp=dcp)
            )
        return cls(groups, scheduler_block_size, hash_block_size, use_eagle, **kwargs)

    # ---- lookups -----------------------------------------------------------------------------

    def align_lookup_length(self, length: int) -> int:
        return self._core.align_lookup_length(length)

    def find_longest_cache_hit(
        self,
        block_hashes: Sequence[Any],
        max_length: int,
        cached_block_pool: Any,
        *,
        apply_eagle: bool = True,
    ) -> tuple[tuple[Sequence[bool], ...], int]:
        """``(masks, hit_length)``: masks is a tuple (one per group id) of lazily expanded
        sequences equal to vLLM's lists. Only the probed hashes are read."""
        try:
            return self._core.find_longest_cache_hit(
                _as_hash_list(block_hashes),
                max_length,
                _store_of(cached_block_pool),
                apply_eagle=apply_eagle,
                lazy=True,
            )
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None

    def find_longest_cache_hit_length(
        self,
        block_hashes: Sequence[Any],
        max_length: int,
        cached_block_pool: Any,
        *,
        apply_eagle: bool = True,
    ) -> int:
        """find_longest_cache_hit's hit length alone (no masks built): what the scheduler-side
        lookup needs."""
        try:
            return self._core.find_longest_cache_hit_length(
                _as_hash_list(block_hashes),
                max_length,
                _store_of(cached_block_pool),
                apply_eagle=apply_eagle,
            )
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None

    def load_mask(self, block_hashes: Sequence[Any] | int, token_len: int) -> tuple[Any, ...]:
        try:
            n = block_hashes if isinstance(block_hashes, int) else len(block_hashes) // (
                32 if isinstance(block_hashes, (bytes, bytearray)) else 1
            )
            return self._core.load_mask(n, token_len, lazy=True)
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None

    def store_mask(
        self, aligned_token_len: int, start_token: int = 0, num_prompt_tokens: int | None = None
    ) -> tuple[Any, ...]:
        try:
            return self._core.store_mask(
                aligned_token_len, start_token, num_prompt_tokens, lazy=True
            )
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None

    def lookup_mask(self, aligned_token_len: int) -> tuple[Any, ...]:
        try:
            return self._core.lookup_mask(aligned_token_len, lazy=True)
        except errors.PrefixhitError as exc:
            raise _translate(exc) from None

    def block_hashes_for_spec(self, block_hashes: Sequence[Any], spec: Any) -> Sequence[Any]:
        """The keys of a group with ``spec``'s block size: every (B/H)-th hash (SEMANTICS.md
        1.2). Returns a slice of the caller's sequence (no copy of the hashes)."""
        block_size = _unwrap(spec).block_size
        if block_size % self.hash_block_size:
            raise VllmAssertionError(
                f"block_size {block_size} is not a multiple of hash_block_size "
                f"{self.hash_block_size}"
            )
        s = block_size // self.hash_block_size
        if s == 1:
            return block_hashes
        return block_hashes[s - 1 :: s]

    # ---- worker-side lookup --------------------------------------------------------------------

    def worker_lookup(
        self, store: Any, layout: Any, num_tokens: int, block_hashes: Any, **kwargs: Any
    ) -> int:
        """vLLM's Mooncake store worker lookup (``MooncakeStoreWorker.lookup(num_tokens,
        block_hashes)``) as one call: align_lookup_length, the candidate keys of every rank
        namespace of every group in the store key format, asked in a few exact rounds (the
        default; ``multi_round=False``: one ``batch_is_exist`` call with every candidate key, as
        vLLM does), the all-namespaces rule and the second lookup below ``num_tokens``.
        ``store``: a ``MooncakeDistributedStore`` or anything with ``batch_is_exist(keys)`` (or
        such a callable); ``layout``: see :meth:`store_layout`.

        Delegates to :func:`prefixhit.store.worker_lookup` (C++), which this wrapper does not
        re-implement."""
        return self._store_module().worker_lookup(
            store, self._core, layout, num_tokens, _as_hash_list(block_hashes), **kwargs
        )

    def store_layout(self, model_name: str, **kwargs: Any) -> Any:
        """The store key layout (model name, rank namespaces) for :meth:`worker_lookup`:
        :class:`prefixhit.store.StoreLayout` of this coordinator."""
        return self._store_module().StoreLayout(self._core, model_name, **kwargs)

    @staticmethod
    def _store_module() -> Any:
        try:
            from . import store as store_module  # type: ignore[attr-defined]
        except ImportError as exc:
            raise errors.BackendUnavailableError(
                "the worker-side lookup needs prefixhit.store, which this build does not have"
            ) from exc
        return store_module

    @property
    def core(self) -> Coordinator:
        """The underlying prefixhit.Coordinator (for the batch API and key plans)."""
        return self._core

    def __repr__(self) -> str:
        return (
            f"prefixhit.vllm.MooncakeStoreCoordinator({self._core!r}, "
            f"semantics={self.semantics!r})"
        )

