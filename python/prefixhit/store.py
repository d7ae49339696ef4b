"""Lookups against a real Mooncake store (remote mode), in vLLM's store key format.

The store is ``mooncake.store.MooncakeDistributedStore`` or anything with
``batch_is_exist(keys: list[str]) -> list[int]`` (1 = present), or such a callable itself.

A whole batch of requests becomes one deduplicated list of keys per round::

    import prefixhit
    from prefixhit import store as pstore

    layout = pstore.StoreLayout(coord, "DeepSeek-V4-Flash", tp_size=8, num_kv_heads=1)
    hit = pstore.worker_lookup(mooncake_store, coord, layout, num_tokens, block_hashes)

``worker_lookup`` is vLLM's Mooncake store worker lookup as one call: align_lookup_length,
candidate keys for every rank namespace of every group, the all-namespaces rule, and the second
lookup below ``num_tokens`` when the first covers the whole prompt. By default it asks in a few
exact rounds (``multi_round=True``): full attention's keys first, then only the keys the lookup
reads (same answer, about 5% of the keys, 2-3 ``batch_is_exist`` calls). ``multi_round=False``
asks every candidate key in one call, as vLLM does: worth it only where a round trip costs more
than the keys (short prompts against a distant store). ``remote_lookup`` (the batch API) asks in
one round unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._core import RemoteLookup, StoreLayout, parse_store_key

__all__ = [
    "RemoteLookup",
    "StoreLayout",
    "exist_function",
    "parse_store_key",
    "remote_lookup",
    "worker_lookup",
    "worker_lookups",
]

ExistFunction = Callable[[list[str]], Sequence[int]]


def exist_function(store: Any) -> ExistFunction:
    """``store.batch_is_exist`` when the store has it, else the store itself if callable."""
    fn = getattr(store, "batch_is_exist", None)
    if fn is not None:
        return fn
    if callable(store):
        return store
    raise TypeError(
        "store must have batch_is_exist(keys) (e.g. mooncake.store.MooncakeDistributedStore) "
        f"or be such a callable, got {type(store).__name__}"
    )


def drive(lookup: RemoteLookup, store: Any) -> dict:
    """Answers every round of ``lookup`` with the store; returns its stats."""
    exist = exist_function(store)
    while not lookup.done:
        keys = lookup.pending_keys
        results = exist(keys)
        if results is None:
            raise ValueError("batch_is_exist returned None")
        lookup.answer(results)
    return lookup.stats


def _num_digests(hashes: Any) -> int:
    """How many digests a hash argument holds (flat buffers hold 32 bytes per digest)."""
    if isinstance(hashes, (bytes, bytearray, memoryview)):
        return len(hashes) // 32
    if getattr(hashes, "ndim", 2) == 1:
        return len(hashes) // 32  # a flat uint8 array
    return len(hashes)


def worker_lookups(
    store: Any,
    coordinator: Any,
    layout: StoreLayout,
    requests: Sequence[tuple[int, Any]],
    *,
    multi_round: bool = True,
    max_rounds: int = 6,
    stats: dict | None = None,
) -> list[int]:
    """vLLM's worker-side lookup for many requests, ``(num_tokens, block_hashes)`` each, with
    one ``batch_is_exist`` per round for the whole batch. Returns the hit lengths.
    ``multi_round``: see the module docstring (default True: a few exact rounds)."""
    offsets = [0]
    digests: list[Any] = []
    num_tokens = []
    for tokens, hashes in requests:
        digests.extend(hashes)
        offsets.append(len(digests))
        num_tokens.append(tokens)
    lookup = RemoteLookup.worker(
        coordinator, layout, digests, offsets, num_tokens,
        multi_round=multi_round, max_rounds=max_rounds,
    )
    got = drive(lookup, store)
    if stats is not None:
        stats.update(got)
    return [int(h) for h in lookup.hit_lengths()]


def worker_lookup(
    store: Any,
    coordinator: Any,
    layout: StoreLayout,
    num_tokens: int,
    block_hashes: Any,
    *,
    multi_round: bool = True,
    max_rounds: int = 6,
    stats: dict | None = None,
) -> int:
    """vLLM's Mooncake store worker lookup for one request: how many prompt tokens the store
    holds, as ``MooncakeStoreWorker.lookup(num_tokens, block_hashes)`` returns it.

    ``block_hashes``: a list of 32-byte ``bytes`` (or BlockHash), a uint8 [n, 32] array or
    n*32 flat bytes. ``store``: see :func:`exist_function`. ``multi_round`` (default True):
    full attention's keys first, then only the keys the lookup reads, in a few exact rounds
    (the same answer as one round of every candidate key; see the module docstring)."""
    lookup = RemoteLookup.worker(
        coordinator, layout, block_hashes, [0, _num_digests(block_hashes)], [num_tokens],
        multi_round=multi_round, max_rounds=max_rounds,
    )
    got = drive(lookup, store)
    if stats is not None:
        stats.update(got)
    return int(lookup.hit_lengths()[0])


def remote_lookup(
    store: Any,
    coordinator: Any,
    layout: StoreLayout,
    digests: Any,
    offsets: Any,
    max_lengths: Any,
    *,
    apply_eagle: Any = None,
    multi_round: bool = False,
    max_rounds: int = 6,
    gpu: bool = False,
    stats: dict | None = None,
):
    """``Coordinator.find_longest_cache_hits`` against the store: the batch's keys asked in one
    (or, with ``multi_round``, a few) ``batch_is_exist`` calls, the answers looked up on the CPU
    engine or, with ``gpu=True``, on the GPU engine. Returns a BatchLookupResult."""
    lookup = RemoteLookup.batch(
        coordinator, layout, digests, offsets, max_lengths,
        apply_eagle=apply_eagle, multi_round=multi_round, max_rounds=max_rounds,
    )
    got = drive(lookup, store)
    if stats is not None:
        stats.update(got)
    return lookup.result(gpu=gpu)
