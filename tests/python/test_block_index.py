"""prefixhit.BlockIndex on the CPU (and the clear refusal of 'cuda' where it cannot work)."""

from __future__ import annotations

import random
import threading

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


@pytest.mark.skipif(gpu_available(), reason="this build has a usable GPU")
def test_cuda_index_is_refused_clearly_without_a_gpu() -> None:
    with pytest.raises(prefixhit.BackendUnavailableError) as info:
        prefixhit.BlockIndex("cuda")
    assert info.value.kind == "unavailable"
    assert "CUDA" in str(info.value)
