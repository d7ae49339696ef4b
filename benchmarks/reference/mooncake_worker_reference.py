"""vLLM's Mooncake store worker lookup (``MooncakeStoreWorker.lookup(num_tokens, block_hashes)``)
in plain Python, written from issue 10's description in vLLM's style, over the reference
coordinator of mooncake_reference.py. It is the denominator of the worker-lookup rows of
benchmarks/python_dropin.py; not part of the prefixhit package.

The flow: ``align_lookup_length``; per group, the candidate chunks (every hash with partial hits,
else each chunk's last hash where the group's lookup mask keeps it); one key string per candidate
and rank namespace in the store key format
``[{cache_prefix}@]{model_name}@tp_rank:{t}@pcp{p}@dcp{d}@pp_rank:{r}@group:{g}@{hex digest}``;
one ``batch_is_exist`` call; a (group, digest) is present only if every namespace has it;
``find_longest_cache_hit`` on that set; and, when the hit covers the whole prompt, the lookup
again below ``num_tokens`` (the last token is always recomputed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mooncake_reference import ExternalCachedBlockPool, MooncakeStoreCoordinator, cdiv

Namespace = tuple[int, int, int, int]  # (tp_rank, pcp_rank, dcp_rank, pp_rank)


def key_prefixes(model_name: str, namespaces: Sequence[Sequence[Namespace]],
                 cache_prefix: str = "") -> list[list[str]]:
    """Per group id, the key prefix of each of its namespaces (everything before the digest)."""
    head = f"{cache_prefix}@{model_name}" if cache_prefix else model_name
    return [
        [f"{head}@tp_rank:{t}@pcp{p}@dcp{d}@pp_rank:{r}@group:{g}" for (t, p, d, r) in spaces]
        for g, spaces in enumerate(namespaces)
    ]


def worker_lookup(coord: MooncakeStoreCoordinator, prefixes: list[list[str]],
                  batch_is_exist: Callable[[list[str]], Sequence[int]], num_tokens: int,
                  block_hashes: Sequence[bytes]) -> int:
    """How many prompt tokens the store holds, as vLLM's worker computes it."""
    H = coord.hash_block_size
    token_len = coord.align_lookup_length(num_tokens)
    if not block_hashes or token_len <= 0:
        return 0
    fine_grained = coord.enable_partial_hash_hits
    lookup_masks = None if fine_grained else coord.lookup_mask(token_len)
    candidate_keys: list[str] = []
    candidate_meta: list[tuple[int, bytes]] = []
    for g_idx, spec in enumerate(coord.groups):
        if fine_grained:
            group_hashes = list(block_hashes)
            unit_ids = list(range(min(len(block_hashes), token_len // H)))
        else:
            lookup_mask = lookup_masks[g_idx]
            group_hashes = coord.block_hashes_for_spec(block_hashes, spec)
            max_chunks = min(len(group_hashes), cdiv(token_len, spec["block_size"]))
            limit = max_chunks if lookup_mask is None else min(max_chunks, len(lookup_mask))
            unit_ids = [c for c in range(limit) if lookup_mask is None or lookup_mask[c]]
        for chunk_id in unit_ids:
            block_hash = group_hashes[chunk_id]
            hash_hex = block_hash.hex()
            for key_prefix in prefixes[g_idx]:
                candidate_keys.append(f"{key_prefix}@{hash_hex}")
            candidate_meta.append((g_idx, bytes(block_hash)))
    if not candidate_keys:
        return 0
    results = batch_is_exist(candidate_keys)
    exists: set[tuple[int, bytes]] = set()
    pos = 0
    for g_idx, hash_bytes in candidate_meta:
        count = len(prefixes[g_idx])
        if all(results[pos + j] == 1 for j in range(count)):
            exists.add((g_idx, hash_bytes))
        pos += count
    pool = ExternalCachedBlockPool(H, exists)
    _, hit = coord.find_longest_cache_hit(block_hashes, token_len, pool)
    if hit >= num_tokens:
        usable = coord.align_lookup_length(num_tokens - 1)
        if usable <= 0:
            return 0
        _, hit = coord.find_longest_cache_hit(block_hashes, usable, pool)
    return hit
