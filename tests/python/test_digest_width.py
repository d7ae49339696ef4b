"""Digest widths (issue 10) through Python: coordinators, key sets, block indexes and key plans of
8-, 16- and 32-byte digests answer as the 32-byte run of the same logical store; keys of
different widths never meet; wrong widths are typed errors."""

from __future__ import annotations

import random

import numpy as np
import pytest

import prefixhit
from prefixhit.errors import InvalidArgumentError, InvalidConfigError

from helpers import hash_chain

GROUPS = [
    {"kind": "full_attention", "block_size": 64},
    {"kind": "sliding_window", "block_size": 16, "sliding_window": 32},
    {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "eagle": True},
]


def coordinator(width: int) -> prefixhit.Coordinator:
    return prefixhit.Coordinator(GROUPS, 64, 16, use_eagle=True, digest_size=width)


def random_store(rng: random.Random, hashes: list[bytes]) -> set[tuple[int, bytes]]:
    """Random (group, key) pairs over the chunk keys of every group, with holes."""
    pairs: set[tuple[int, bytes]] = set()
    for g, per in ((0, 4), (1, 1), (2, 1)):
        density = rng.choice([0.3, 0.8, 1.0])
        for j in range(len(hashes) // per):
            if rng.random() < density:
                pairs.add((g, hashes[(j + 1) * per - 1]))
    return pairs


@pytest.mark.parametrize("width", [8, 16, 32])
def test_every_width_answers_as_the_32_byte_run(width: int, seed: int) -> None:
    rng = random.Random(seed)
    c32 = coordinator(32)
    c = coordinator(width)
    assert c.digest_size == width and c32.digest_size == 32
    for _ in range(30):
        hashes32 = hash_chain(rng.randrange(0, 40), salt=rng.randbytes(4))
        hashes = [h[:width] for h in hashes32]
        pairs32 = random_store(rng, hashes32)
        pairs = {(g, k[:width]) for g, k in pairs32}
        max_length = rng.randrange(0, (len(hashes) + 1) * 16)
        want = c32.find_longest_cache_hit(hashes32, max_length, pairs32)
        key_set = prefixhit.KeySet(pairs, digest_size=width)
        assert key_set.digest_size == width
        index = prefixhit.BlockIndex()
        for g, k in pairs:
            index.insert(g, [k], namespace=2, digest_size=width)
        # The same bytes at every wider width: found only if the width were ignored.
        for other in (16, 32):
            if other > width and hashes:
                padded = [h + bytes(other - width) for h in hashes]
                for g in range(3):
                    index.insert(g, padded, namespace=2, digest_size=other)
        as_array = np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(len(hashes), width)
        for store, kwargs in ((pairs, {}), (key_set, {}), (index, {"namespace": 2})):
            assert c.find_longest_cache_hit(hashes, max_length, store, **kwargs) == want, (seed,)
        assert c.find_longest_cache_hit(as_array, max_length, key_set) == want, seed
        assert c.chunk_keys(hashes, 64) == [k[:width] for k in c32.chunk_keys(hashes32, 64)]
        plan = c.key_plan(hashes, max_length)
        assert plan.keys.shape == (len(plan), width)
        present = [pair in pairs for pair in plan.pairs()]
        plan32 = c32.key_plan(hashes32, max_length)
        present32 = [pair in pairs32 for pair in plan32.pairs()]
        assert present == present32
        assert c.find_longest_cache_hit(
            hashes, max_length, plan.answers(present)
        ) == c32.find_longest_cache_hit(hashes32, max_length, plan32.answers(present32))


def test_same_bytes_at_two_widths_are_two_keys() -> None:
    key = bytes(range(1, 9))
    index = prefixhit.BlockIndex()
    assert index.insert(0, [key], digest_size=8) == 1
    assert index.insert(0, [key + bytes(8)], digest_size=16) == 1
    assert len(index) == 2
    assert (0, key) in index and (0, key + bytes(8)) in index
    assert (0, key + bytes(24)) not in index
    assert index.contains(0, [key + bytes(8)], digest_size=16).tolist() == [True]
    assert index.erase(0, [key], digest_size=8) == 1
    assert (0, key) not in index and (0, key + bytes(8)) in index
    key_set = prefixhit.KeySet([(0, key)], digest_size=8)
    assert (0, key) in key_set and (0, key + bytes(8)) not in key_set


def test_wrong_widths_are_typed_errors() -> None:
    with pytest.raises(InvalidConfigError, match="digest_size"):
        coordinator(12)
    with pytest.raises(InvalidArgumentError, match="digest_size"):
        prefixhit.KeySet(digest_size=24)
    c = coordinator(16)
    hashes = [bytes([i + 1]) * 16 for i in range(8)]
    # A hash of another length.
    with pytest.raises(ValueError, match="must be 16 bytes"):
        c.find_longest_cache_hit(hashes[:3] + [bytes(32)], 64, set())
    # A store of another width.
    with pytest.raises(InvalidArgumentError, match="store holds 32-byte digests"):
        c.find_longest_cache_hit(hashes, 64, prefixhit.KeySet())
    with pytest.raises(ValueError, match="must be 8 bytes"):
        prefixhit.KeySet([(0, bytes(16))], digest_size=8)
    index = prefixhit.BlockIndex()
    with pytest.raises(ValueError, match="must be 8 bytes"):
        index.insert(0, hashes, digest_size=8)
    with pytest.raises(InvalidArgumentError, match="digest_size"):
        index.insert(0, [bytes(12)], digest_size=12)
    assert len(index) == 0
    # A [n, 32] array for a 16-byte coordinator.
    with pytest.raises(ValueError, match=r"\[n, 16\]"):
        c.find_longest_cache_hit(np.zeros((4, 32), dtype=np.uint8), 64, set())


def test_from_config_accepts_digest_size() -> None:
    c = prefixhit.Coordinator.from_config(
        {"groups": GROUPS, "scheduler_block_size": 64, "hash_block_size": 16, "digest_size": 8}
    )
    assert c.digest_size == 8
