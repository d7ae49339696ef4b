"""The batch API equals the one-by-one calls, on fresh random configurations and stores."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest

import prefixhit

from helpers import coordinator, random_config, random_requests


def one_by_one(
    coord: prefixhit.Coordinator,
    requests: list[list[bytes]],
    lengths: list[int],
    store: Any,
    flags: list[bool],
) -> list[Any]:
    """Each request's (masks, hit_length), or the error kind it raised."""
    out: list[Any] = []
    for hashes, length, flag in zip(requests, lengths, flags):
        try:
            out.append(coord.find_longest_cache_hit(hashes, length, store, apply_eagle=flag))
        except prefixhit.PrefixhitError as e:
            out.append(e.kind)
    return out


def flatten(requests: list[list[bytes]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(requests) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in requests])
    flat = b"".join(b"".join(r) for r in requests)
    digests = np.frombuffer(flat, dtype=np.uint8).reshape(-1, 32)
    return digests, offsets


STORES: dict[str, Callable[[set[tuple[int, bytes]]], Any]] = {
    "set": lambda s: s,
    "frozenset": frozenset,
    "keyset": prefixhit.KeySet,
    "block_index": lambda s: _index(s),
}


def _index(pairs: set[tuple[int, bytes]]) -> prefixhit.BlockIndex:
    index = prefixhit.BlockIndex()
    for gid, key in pairs:
        if 0 <= gid < 32:
            index.insert(gid, [key], namespace=5)
    return index


@pytest.mark.parametrize("store_kind", list(STORES))
def test_batch_equals_one_by_one(seed: int, store_kind: str) -> None:
    rng = random.Random(seed)
    for trial in range(25):
        config = random_config(rng)
        coord = coordinator(config)
        requests, lengths, pairs = random_requests(rng, coord, rng.randint(1, 24))
        flags = [rng.random() < 0.8 for _ in requests]
        expected = one_by_one(coord, requests, lengths, pairs, flags)
        store = STORES[store_kind](pairs)
        namespace = 5 if store_kind == "block_index" else 0
        digests, offsets = flatten(requests)
        where = f"seed {seed} trial {trial} config {config}"
        failing = [i for i, e in enumerate(expected) if isinstance(e, str)]
        if failing:
            # The batch reports the first failing request, with its error kind.
            with pytest.raises(prefixhit.PrefixhitError) as info:
                coord.find_longest_cache_hits(
                    digests,
                    offsets,
                    np.array(lengths),
                    store,
                    apply_eagle=np.array(flags),
                    namespace=namespace,
                )
            assert info.value.kind == expected[failing[0]], where
            assert str(info.value).startswith(f"request {failing[0]}:"), where
            continue
        result = coord.find_longest_cache_hits(
            digests,
            offsets,
            np.array(lengths),
            store,
            apply_eagle=np.array(flags),
            namespace=namespace,
        )
        assert len(result) == len(requests)
        assert result.num_groups == coord.num_groups
        assert result.hit_lengths.tolist() == [e[1] for e in expected], where
        for r, (masks, hit) in enumerate(expected):
            assert result[r] == (masks, hit), f"{where} request {r}"
            assert result.masks(r) == masks
            loaded = result.num_blocks[r] - result.num_placeholders[r]
            assert loaded.tolist() == [sum(m) for m in masks]


def test_input_spellings_agree(seed: int) -> None:
    rng = random.Random(seed)
    coord = coordinator(random_config(rng))
    while True:  # a configuration whose lookups succeed
        requests, lengths, pairs = random_requests(rng, coord, 8)
        try:
            reference = coord.find_longest_cache_hits(*flatten(requests), lengths, pairs)
            break
        except prefixhit.UnsupportedLookupError:
            coord = coordinator(random_config(rng))
    digests, offsets = flatten(requests)
    spellings = {
        "bytes": (digests.tobytes(), offsets.tolist()),
        "list of bytes": ([bytes(row) for row in digests], list(offsets)),
        "int32 offsets": (digests, offsets.astype(np.int32)),
        "strided digests": (np.repeat(digests, 2, axis=0)[::2], offsets),
    }
    for name, (d, o) in spellings.items():
        result = coord.find_longest_cache_hits(
            d, o, np.array(lengths, dtype=np.int32), prefixhit.KeySet(pairs), num_threads=2
        )
        assert result.hit_lengths.tolist() == reference.hit_lengths.tolist(), (seed, name)
        np.testing.assert_array_equal(result.num_blocks, reference.num_blocks)
        np.testing.assert_array_equal(result.num_placeholders, reference.num_placeholders)


def test_scalar_max_length_and_apply_eagle_flags() -> None:
    coord = prefixhit.Coordinator(
        [{"kind": "full_attention", "block_size": 16, "eagle": True}], 16, 16, use_eagle=True
    )
    hashes = [bytes([i]) * 32 for i in range(4)]
    store = {(0, h) for h in hashes}
    digests = np.frombuffer(b"".join(hashes * 2), dtype=np.uint8).reshape(-1, 32)
    offsets = np.array([0, 4, 8])
    assert coord.find_longest_cache_hits(digests, offsets, 64, store).hit_lengths.tolist() == [
        48,
        48,
    ]
    no_drop = coord.find_longest_cache_hits(digests, offsets, 64, store, apply_eagle=False)
    assert no_drop.hit_lengths.tolist() == [64, 64]
    mixed = coord.find_longest_cache_hits(digests, offsets, 64, store, apply_eagle=[True, False])
    assert mixed.hit_lengths.tolist() == [48, 64]


def test_result_arrays_are_read_only_views() -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    result = coord.find_longest_cache_hits(np.zeros((2, 32), np.uint8), [0, 1, 2], [16, 0], set())
    assert result.hit_lengths.dtype == np.int64 and result.num_blocks.shape == (2, 1)
    with pytest.raises(ValueError):
        result.hit_lengths[0] = 5
    hits = result.hit_lengths
    del result  # the view keeps the result alive
    assert hits.tolist() == [0, 0]


def test_result_indexing() -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    key = bytes(32)
    result = coord.find_longest_cache_hits([key, key], [0, 1, 2], [16, 0], {(0, key)})
    assert result[0] == ([[True]], 16) and result[-1] == ([[]], 0)
    assert result.masks(-2) == [[True]]
    with pytest.raises(IndexError):
        result[2]
    with pytest.raises(IndexError):
        result.masks(-3)
    empty = coord.find_longest_cache_hits(np.zeros((0, 32), np.uint8), [0], [], set())
    assert len(empty) == 0 and empty.hit_lengths.shape == (0,)


WORKER_SPIN_SCRIPT = """
import numpy as np, prefixhit
coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
hashes = [bytes([i]) * 32 for i in range(4)]
digests = np.frombuffer(b"".join(hashes * 2), dtype=np.uint8).reshape(-1, 32)
for threads in (1, 2):
    try:
        hits = coord.find_longest_cache_hits(
            digests, [0, 4, 8], 64, prefixhit.KeySet([(0, h) for h in hashes]),
            num_threads=threads,
        ).hit_lengths.tolist()
        print(threads, "OK", hits)
    except prefixhit.InvalidArgumentError as e:
        print(threads, "REFUSED", e)
"""


@pytest.mark.parametrize("value", ["fast", "-5", "2000000", None])
def test_the_worker_spin_variable_is_read_or_refused(value: str | None, seed: int) -> None:
    """PREFIXHIT_WORKER_SPIN_US: a bad value refuses batches that may use workers (a store that
    needs no GIL), with a typed error naming it; one thread never reads it; a good value (random)
    changes no answer."""
    env = dict(os.environ)
    good = str(random.Random(seed).randrange(0, 1_000_001))
    env["PREFIXHIT_WORKER_SPIN_US"] = good if value is None else value
    done = subprocess.run(
        [sys.executable, "-c", WORKER_SPIN_SCRIPT], capture_output=True, text=True, timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1 OK [64, 64]", done.stdout
    if value is None:
        assert lines[1] == "2 OK [64, 64]", done.stdout
    else:
        assert lines[1].startswith("2 REFUSED"), done.stdout
        assert f'PREFIXHIT_WORKER_SPIN_US="{value}"' in lines[1], done.stdout
