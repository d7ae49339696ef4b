"""The block-pool side of :mod:`prefixhit.vllm`: vLLM's ``ExternalCachedBlockPool``, the
engine-facing store made of whatever the caller passes as a pool (probed in place, never
copied), and the view of ``block_hashes`` the engine reads. Private: import
:class:`ExternalCachedBlockPool` from :mod:`prefixhit.vllm`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from . import errors
from ._core import KeySet


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
