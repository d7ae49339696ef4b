"""GPU paths: the device BlockIndex and batches against it. Skipped without a usable GPU,
except the checks that a build without one refuses device arrays clearly."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest

import prefixhit

from conftest import gpu_available, requires_gpu
from helpers import coordinator, random_config, random_requests
from test_batch import flatten, one_by_one


class FakeCudaArray:
    """Claims to live on a CUDA device (DLPack device type 2), as a torch tensor would."""

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, stream: int | None = None) -> object:
        raise BufferError("not a real array")


@pytest.mark.skipif(gpu_available(), reason="this build has a usable GPU")
def test_device_arrays_without_a_gpu_raise_unavailable() -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    with pytest.raises(prefixhit.BackendUnavailableError, match="GPU engine is not available"):
        coord.find_longest_cache_hits(FakeCudaArray(), FakeCudaArray(), FakeCudaArray(), set())
    with pytest.raises(TypeError, match="CUDA array"):
        coord.find_longest_cache_hit(FakeCudaArray(), 16, set())


def test_build_info_is_consistent() -> None:
    info = prefixhit.build_info()
    assert set(info) >= {"cuda", "gpu_available", "device"}
    if info["gpu_available"]:
        assert info["cuda"]
    assert isinstance(info["device"], str) and info["device"]


def device_index(pairs: set[tuple[int, bytes]]) -> prefixhit.BlockIndex:
    index = prefixhit.BlockIndex("cuda", initial_capacity=4096)
    by_group: dict[int, list[bytes]] = {}
    for gid, key in pairs:
        if 0 <= gid < 32:
            by_group.setdefault(gid, []).append(key)
    for gid, keys in by_group.items():
        index.insert(gid, keys, namespace=2)
    return index


@requires_gpu
def test_device_index_matches_cpu_index(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 256, size=(5000, 32), dtype=np.uint8)
    groups = rng.integers(0, 8, size=5000, dtype=np.int32)
    gpu, cpu = prefixhit.BlockIndex("cuda"), prefixhit.BlockIndex("cpu")
    assert gpu.insert(groups, keys, namespace=1) == cpu.insert(groups, keys, namespace=1)
    assert len(gpu) == len(cpu)
    probe = np.concatenate([keys[:2500], rng.integers(0, 256, size=(500, 32), dtype=np.uint8)])
    pgroups = np.concatenate([groups[:2500], rng.integers(0, 8, size=500, dtype=np.int32)])
    np.testing.assert_array_equal(
        gpu.contains(pgroups, probe, namespace=1), cpu.contains(pgroups, probe, namespace=1)
    )
    assert gpu.erase(groups[:100], keys[:100], namespace=1) == cpu.erase(
        groups[:100], keys[:100], namespace=1
    )
    assert len(gpu) == len(cpu)


@requires_gpu
def test_batch_against_device_index_equals_cpu(seed: int) -> None:
    rng = random.Random(seed)
    done = 0
    while done < 10:
        coord = coordinator(random_config(rng))
        requests, lengths, pairs = random_requests(rng, coord, rng.randint(1, 64))
        expected = one_by_one(coord, requests, lengths, pairs, [True] * len(requests))
        if any(isinstance(e, str) for e in expected):
            continue
        digests, offsets = flatten(requests)
        index = device_index(pairs)
        result = coord.find_longest_cache_hits(
            digests, offsets, np.array(lengths), index, namespace=2
        )
        assert result.hit_lengths.tolist() == [e[1] for e in expected], seed
        for r, e in enumerate(expected):
            assert result[r] == e, (seed, r)
        # A single lookup against the device index goes through the GPU engine too.
        assert (
            coord.find_longest_cache_hit(requests[0], lengths[0], index, namespace=2) == expected[0]
        )
        done += 1


@requires_gpu
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_cuda_tensors_on_a_stream(seed: int) -> None:
    import torch

    rng = random.Random(seed)
    while True:
        coord = coordinator(random_config(rng))
        requests, lengths, pairs = random_requests(rng, coord, 32)
        expected = one_by_one(coord, requests, lengths, pairs, [True] * len(requests))
        if not any(isinstance(e, str) for e in expected):
            break
    digests, offsets = flatten(requests)
    index = device_index(pairs)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        d = torch.from_numpy(digests.copy()).cuda()
        o = torch.from_numpy(offsets).cuda()
        m = torch.tensor(lengths, dtype=torch.int64).cuda()
        result = coord.find_longest_cache_hits(
            d, o, m, index, namespace=2, stream=stream.cuda_stream
        )
    assert result.hit_lengths.tolist() == [e[1] for e in expected], seed
    with pytest.raises(ValueError, match="all CUDA arrays or all host arrays"):
        coord.find_longest_cache_hits(d, offsets, m, index, namespace=2)
