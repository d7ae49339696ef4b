"""GPU paths: the device BlockIndex and batches against it. Skipped without a usable GPU,
except the checks that a build without one refuses device arrays clearly. In the emulated build
(preset emu-python) they run on tools/cuemu, device (DLPack) arrays included."""

from __future__ import annotations

import ctypes
import importlib.util
import platform
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


def emulated() -> bool:
    return gpu_available() and "cuemu" in prefixhit.build_info()["device"]


requires_emulator = pytest.mark.skipif(
    not emulated(), reason="needs the emulated build (preset emu-python): allocates through cuemu"
)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class EmuCudaArray:
    """A CUDA array in the emulator's device memory, offered through DLPack as torch would.

    The emulated _core exports tools/cuemu's runtime, so cudaMalloc here is the allocator the
    module copies from: device memory it can check, as a real producer's would be."""

    _DL_CODES = {"i": 0, "u": 1, "b": 6}

    def __init__(self, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self._rt = ctypes.CDLL(prefixhit._core.__file__)
        self._rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self._rt.cudaMemcpy.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
        ]
        self._rt.cudaFree.argtypes = [ctypes.c_void_p]
        self._ptr = ctypes.c_void_p()
        assert self._rt.cudaMalloc(ctypes.byref(self._ptr), max(host.nbytes, 1)) == 0
        assert self._rt.cudaMemcpy(self._ptr, host.ctypes.data, host.nbytes, 1) == 0  # H2D
        self._shape = (ctypes.c_int64 * host.ndim)(*host.shape)
        self._tensor = _DLManagedTensor()
        t = self._tensor.dl_tensor
        t.data, t.device, t.ndim = self._ptr, _DLDevice(2, 0), host.ndim
        t.dtype = _DLDataType(self._DL_CODES[host.dtype.kind], host.dtype.itemsize * 8, 1)
        t.shape = self._shape

    def __del__(self) -> None:
        if self._ptr:
            self._rt.cudaFree(self._ptr)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, stream: int | None = None) -> object:
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype = ctypes.py_object
        new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        # No deleter: this object owns the memory and outlives the call.
        return new_capsule(ctypes.addressof(self._tensor), b"dltensor", None)


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
    # How the CPU index hashes its keys: an instruction of this machine's kind, or the table.
    forms = {"x86_64": "aes-ni", "AMD64": "aes-ni", "aarch64": "armv8-aes", "arm64": "armv8-aes"}
    assert info["slot_hash"] in {forms.get(platform.machine(), "table"), "table"}


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


@requires_emulator
def test_device_array_batches_on_the_emulator(seed: int) -> None:
    rng = random.Random(seed)
    while True:
        coord = coordinator(random_config(rng))
        requests, lengths, pairs = random_requests(rng, coord, rng.randint(1, 32))
        expected = one_by_one(coord, requests, lengths, pairs, [True] * len(requests))
        if not any(isinstance(e, str) for e in expected):
            break
    digests, offsets = flatten(requests)
    index = device_index(pairs)
    d, o = EmuCudaArray(digests), EmuCudaArray(offsets)
    m = EmuCudaArray(np.array(lengths, dtype=np.int64))
    result = coord.find_longest_cache_hits(d, o, m, index, namespace=2)
    assert result.hit_lengths.tolist() == [e[1] for e in expected], seed
    for r, e in enumerate(expected):
        assert result[r] == e, (seed, r)
    flags = EmuCudaArray(np.zeros(len(requests), dtype=np.uint8))
    no_eagle = coord.find_longest_cache_hits(d, o, m, index, namespace=2, apply_eagle=flags)
    assert no_eagle.hit_lengths.tolist() == coord.find_longest_cache_hits(
        digests, offsets, np.array(lengths), index, namespace=2, apply_eagle=False
    ).hit_lengths.tolist(), seed
    with pytest.raises(ValueError, match="all CUDA arrays or all host arrays"):
        coord.find_longest_cache_hits(d, offsets, m, index, namespace=2)
    bad = offsets.copy()
    bad[-1] += 1
    with pytest.raises(ValueError, match="offsets must start at 0 and end"):
        coord.find_longest_cache_hits(d, EmuCudaArray(bad), m, index, namespace=2)


@requires_emulator
def test_device_array_keys_on_the_emulator(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 256, size=(300, 32), dtype=np.uint8)
    groups = rng.integers(0, 4, size=300, dtype=np.int32)
    gpu, cpu = prefixhit.BlockIndex("cuda"), prefixhit.BlockIndex("cpu")
    assert gpu.insert(EmuCudaArray(groups), EmuCudaArray(keys)) == cpu.insert(groups, keys)
    probe = np.concatenate([keys[:150], rng.integers(0, 256, size=(50, 32), dtype=np.uint8)])
    pgroups = np.concatenate([groups[:150], np.zeros(50, dtype=np.int32)])
    np.testing.assert_array_equal(
        gpu.contains(EmuCudaArray(pgroups), EmuCudaArray(probe)), cpu.contains(pgroups, probe)
    )
    assert gpu.erase(0, EmuCudaArray(keys[:20])) == cpu.erase(0, keys[:20])
    assert len(gpu) == len(cpu)
