"""Helpers shared by the Python tests: hash chains, saving through the store mask, random
configurations and stores."""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any

import prefixhit

WINDOW_KINDS = ("sliding_window", "sliding_window_mla")
KINDS = ("full_attention", "mla_attention", *WINDOW_KINDS, "chunked_local", "mamba")


def hash_chain(n: int, salt: bytes = b"") -> list[bytes]:
    """n chained 32-byte digests: each hashes the previous one and its block's (made-up) tokens,
    so two chains with the same salt share every prefix."""
    out: list[bytes] = []
    prev = hashlib.sha256(b"root" + salt).digest()
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        out.append(prev)
    return out


def save(
    coord: prefixhit.Coordinator,
    hashes: list[bytes],
    aligned_len: int,
    start_token: int = 0,
    num_prompt_tokens: int | None = None,
) -> set[tuple[int, bytes]]:
    """The (group_id, key) pairs a connector writes when it saves tokens
    [start_token, aligned_len): for each group the chunks its store mask keeps, each keyed by
    the last hash inside the chunk."""
    masks = coord.store_mask(aligned_len, start_token, num_prompt_tokens)
    stored: set[tuple[int, bytes]] = set()
    for gid, (spec, mask) in enumerate(zip(coord.groups, masks)):
        keys = coord.chunk_keys(hashes, spec.block_size)
        end = aligned_len // spec.block_size
        first = min(end, max(0, -(-start_token // spec.block_size)))
        assert mask is None or len(mask) == end - first
        for k in range(first, end):
            if mask is None or mask[k - first]:
                stored.add((gid, keys[k]))
    return stored


def random_config(rng: random.Random) -> dict[str, Any]:
    """A valid configuration (SEMANTICS.md 1.1 holds by construction) of 1-5 groups."""
    h = rng.choice([4, 8, 16])
    groups: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(KINDS) if groups else rng.choice(KINDS[:2] * 3 + KINDS)
        b = h * rng.choice([1, 1, 2, 4])
        spec: dict[str, Any] = {"kind": kind, "block_size": b, "eagle": rng.random() < 0.25}
        if kind == "mamba":
            spec["mamba_cache_mode"] = rng.choice(["align", "all", "none"])
            spec["state_dim"] = rng.choice([16, 32])
        else:
            spec.update(num_kv_heads=8, head_size=128, dtype="bfloat16")
        if kind in WINDOW_KINDS:
            spec["sliding_window"] = rng.choice([1, b, 2 * b, 3 * b + 1, 8 * b])
        if kind == "chunked_local":
            spec["attention_chunk_size"] = b * rng.choice([1, 2, 4])
        if groups and rng.random() < 0.3:  # an equal spec, to exercise merging
            spec = dict(rng.choice(groups), eagle=rng.random() < 0.5)
        groups.append(spec)
    lcm = math.lcm(*(g["block_size"] for g in groups))
    s = lcm * rng.choice([1, 1, 2])
    return {
        "hash_block_size": h,
        "scheduler_block_size": s,
        "use_eagle": rng.random() < 0.5,
        "retention_interval": rng.choice([None, None, 0, s, 2 * s]),
        "groups": groups,
    }


def coordinator(config: dict[str, Any]) -> prefixhit.Coordinator:
    return prefixhit.Coordinator.from_config(config)


def random_requests(
    rng: random.Random, coord: prefixhit.Coordinator, num_requests: int
) -> tuple[list[list[bytes]], list[int], set[tuple[int, bytes]]]:
    """Requests over a few shared chains, valid max_lengths, and a store written by saving
    random prefixes through the store mask, with random holes and unrelated entries."""
    h = coord.hash_block_size
    a = coord.lookup_alignment
    chains = [hash_chain(64, salt=bytes([rng.randrange(256), i])) for i in range(3)]
    store: set[tuple[int, bytes]] = set()
    for chain in chains:
        for _ in range(rng.randint(0, 2)):
            saved = rng.randint(0, len(chain) * h // a) * a
            start = rng.choice([0, 0, rng.randint(0, saved)])
            prompt = rng.choice([None, rng.randint(0, saved + 1)])
            store |= save(coord, chain, saved, start, prompt)
    for entry in rng.sample(sorted(store), k=len(store) // 10):
        store.discard(entry)
    for _ in range(rng.randint(0, 20)):
        chain = rng.choice(chains)
        store.add((rng.randrange(coord.num_groups + 2), rng.choice(chain)))
    requests: list[list[bytes]] = []
    lengths: list[int] = []
    for _ in range(num_requests):
        n = rng.randint(0, 40)
        requests.append(rng.choice(chains)[:n])
        limit = (n + 1) * h - 1
        choice = rng.random()
        if choice < 0.3:
            lengths.append(limit)
        elif choice < 0.5:
            lengths.append(min(limit, (n * h // a) * a))
        else:
            lengths.append(rng.randint(0, limit))
    return requests, lengths, store
