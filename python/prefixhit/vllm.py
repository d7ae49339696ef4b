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

This module holds the coordinator; the errors (``_vllm_errors``), the reading of spec objects
(``_vllm_specs``) and the block pools (``_vllm_pools``) live in private modules and are
re-exported here, which stays the one import path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import errors
from ._core import Coordinator
from ._vllm_errors import (
    VllmAlignmentChunkedLocalAssertionError,
    VllmAlignmentSlidingWindowAssertionError,
    VllmAssertionError,
    VllmConfigAssertionError,
    VllmEagleChunkedLocalAssertionError,
    VllmUnalignedLengthAssertionError,
    _translate,
)
from ._vllm_pools import ExternalCachedBlockPool, _as_hash_list, _store_of
from ._vllm_specs import _unwrap, group_dict_from_vllm

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


# The public names keep this module as their home (repr, tracebacks, pickling, help()), as
# before the split into the private modules.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
