"""prefixhit.BlockIndex on the CPU (and the clear refusal of 'cuda' where it cannot work)."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

import prefixhit

from conftest import gpu_available
from helpers import hash_chain


def keys_array(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 32), dtype=np.uint8)


def test_insert_erase_contains(seed: int) -> None:
    index = prefixhit.BlockIndex(initial_capacity=64, seed=seed or 1)
    keys = keys_array(500, seed)
    assert index.insert(3, keys) == 500
    assert index.insert(3, keys[:10]) == 0  # already there
    assert len(index) == 500 and index.capacity >= 500
    present = index.contains(3, keys)
    assert present.dtype == np.bool_ and present.all()
    assert not index.contains(4, keys).any()  # another group
    assert not index.contains(3, keys, namespace=1).any()  # another namespace
    assert index.erase(3, keys[::2]) == 250
    assert index.contains(3, keys).tolist() == [i % 2 == 1 for i in range(500)]
    assert (3, keys[1].tobytes()) in index and (3, keys[0].tobytes()) not in index
    index.clear()
    assert len(index) == 0


def test_per_key_group_ids_and_spellings(seed: int) -> None:
    rng = random.Random(seed)
    keys = keys_array(64, seed)
    groups = np.array([rng.randrange(32) for _ in range(64)], dtype=np.int32)
    index = prefixhit.BlockIndex()
    assert index.insert(groups, keys, namespace=9) == len(
        {(int(g), k.tobytes()) for g, k in zip(groups, keys)}
    )
    as_list = [bytes(k) for k in keys]
    assert index.contains(groups.tolist(), as_list, namespace=9).all()
    assert index.contains(groups.astype(np.int64), keys.tobytes(), namespace=9).all()
    assert not index.contains((groups + 1) % 32, keys, namespace=9).all()


def test_matches_a_python_set(seed: int) -> None:
    rng = random.Random(seed)
    index = prefixhit.BlockIndex(initial_capacity=16)
    model: set[tuple[int, int, bytes]] = set()
    pool = hash_chain(200, salt=seed.to_bytes(4, "little"))
    for step in range(300):
        gid, ns = rng.randrange(4), rng.randrange(3)
        batch = rng.sample(pool, rng.randint(0, 20))
        if rng.random() < 0.6:
            added = index.insert(gid, batch, namespace=ns)
            new = {(ns, gid, k) for k in batch} - model
            assert added == len(new), (seed, step)
            model |= new
        else:
            removed = index.erase(gid, batch, namespace=ns)
            gone = {(ns, gid, k) for k in batch} & model
            assert removed == len(gone), (seed, step)
            model -= gone
        assert len(index) == len(model), (seed, step)
    for ns in range(3):
        for gid in range(4):
            want = [(ns, gid, k) in model for k in pool]
            assert index.contains(gid, pool, namespace=ns).tolist() == want, seed


def test_capacity_limit() -> None:
    index = prefixhit.BlockIndex(initial_capacity=32, max_capacity=64)
    with pytest.raises(prefixhit.CapacityExceededError) as info:
        index.insert(0, keys_array(1000, 1))
    assert info.value.kind == "capacity_exceeded" and isinstance(info.value, RuntimeError)
    assert len(index) == 0  # a failed insert applies nothing


def test_concurrent_readers_and_writers() -> None:
    index = prefixhit.BlockIndex()
    keys = keys_array(4000, 7)
    index.insert(0, keys[:2000])
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(50):
                assert index.contains(0, keys[:2000]).all()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def writer() -> None:
        try:
            for i in range(2000, 4000, 100):
                index.insert(1, keys[i : i + 100])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(3)] + [
        threading.Thread(target=writer)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(index) == 4000


def test_a_lookup_sees_one_state_of_the_index(seed: int) -> None:
    """A writer moves a prompt's keys between two states, each in one call, while lookups run:
    every lookup (single, and each request of a batch) answers for one of the two states. A
    lookup that took the index's lock per window could see both, and report a hit that neither
    state gives."""
    rng = random.Random(seed)
    spec = {"num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"}
    coord = prefixhit.Coordinator(
        [
            dict(spec, kind="full_attention", block_size=16),
            dict(spec, kind="sliding_window", block_size=16, sliding_window=64),
        ],
        16,
        16,
        use_eagle=False,
    )
    n = 600
    hashes = keys_array(n, seed)
    h = rng.randrange(n // 4, 3 * n // 4)
    # State B lacks the full-attention keys from block h on and the window keys from h - 6 on;
    # state A holds every key.
    b_groups = np.array([0] * h + [1] * (h - 6), dtype=np.int32)
    b_keys = np.concatenate([hashes[:h], hashes[: h - 6]])
    missing_groups = np.array([0] * (n - h) + [1] * (n - h + 6), dtype=np.int32)
    missing_keys = np.concatenate([hashes[h:], hashes[h - 6 :]])

    def hit_of(*parts: tuple[np.ndarray, np.ndarray]) -> int:
        index = prefixhit.BlockIndex()
        for groups, keys in parts:
            index.insert(groups, keys)
        return coord.find_longest_cache_hit_length(hashes, n * 16, index, apply_eagle=False)

    state_a = hit_of((b_groups, b_keys), (missing_groups, missing_keys))
    state_b = hit_of((b_groups, b_keys))
    assert state_a == n * 16 and state_b < h * 16

    index = prefixhit.BlockIndex(initial_capacity=4 * 2 * n)  # no rehash while flipping
    index.insert(b_groups, b_keys)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            index.insert(missing_groups, missing_keys)
            index.erase(missing_groups, missing_keys)

    writer = threading.Thread(target=flip)
    writer.start()
    seen: list[int] = []
    try:
        offsets = np.arange(5, dtype=np.int64) * n
        batch_digests = np.concatenate([hashes] * 4)
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline or len(seen) < 200:
            seen.append(
                coord.find_longest_cache_hit_length(hashes, n * 16, index, apply_eagle=False)
            )
            result = coord.find_longest_cache_hits(
                batch_digests, offsets, n * 16, index, apply_eagle=False, num_threads=2
            )
            seen.extend(int(x) for x in result.hit_lengths)
    finally:
        stop.set()
        writer.join()
    others = sorted({x for x in seen} - {state_a, state_b})
    assert not others, (seed, state_a, state_b, others[:8])


@pytest.mark.skipif(gpu_available(), reason="this build has a usable GPU")
def test_cuda_index_is_refused_clearly_without_a_gpu() -> None:
    with pytest.raises(prefixhit.BackendUnavailableError) as info:
        prefixhit.BlockIndex("cuda")
    assert info.value.kind == "unavailable"
    assert "CUDA" in str(info.value)
