"""Issue 13.1 and the binding side of 13.2: the bindings own what they read.

A store whose __contains__ (or a key's __eq__) mutates the caller's hash list must not make a
lookup read freed memory, and integer arrays written by another thread while a call runs
without the GIL must not crash it. Each test here crashed (or read freed memory) before the
fix; run under ASan to see it."""

from __future__ import annotations

import gc
import os
import random
import sys
import threading

import numpy as np
import pytest

import prefixhit

from helpers import hash_chain

FA = {"kind": "full_attention", "block_size": 16}


class ShrinkingStore:
    """A set-like store that empties the caller's hash list on its first probe."""

    def __init__(self, hashes: list[bytes], present: set[tuple[int, bytes]]) -> None:
        self.hashes = hashes
        self.present = present
        self.probes = 0

    def __contains__(self, pair: object) -> bool:
        self.probes += 1
        if self.probes == 1:
            self.hashes.clear()  # drops the only reference to every bytes object
            gc.collect()
            # Reuse the freed memory with other 32-byte objects: a binding that kept borrowed
            # pointers now probes with these and misses.
            self.junk = [os.urandom(32) for _ in range(256)]
        return pair in self.present


def fresh_chain(n: int) -> list[bytes]:
    # bytes objects referenced by nothing but the list (no interning, no copies kept here)
    return [bytes(bytearray(h)) for h in hash_chain(n)]


@pytest.mark.parametrize("lazy", [False, True])
def test_store_that_clears_the_hash_list(lazy: bool) -> None:
    from collections.abc import Set

    coord = prefixhit.Coordinator([FA], 16, 16)
    hashes = fresh_chain(64)
    expected = hash_chain(64)
    present = {(0, h) for h in expected}

    class SetStore(ShrinkingStore, Set):  # a collections.abc.Set: probed in place
        def __iter__(self):  # pragma: no cover - not used by the lookup
            return iter(self.present)

        def __len__(self) -> int:
            return len(self.present)

    store = SetStore(hashes, present)
    # Every probe after the first sees the list empty. The engine either answers from the
    # digests it already holds (a full hit: every probed hash is kept alive) or raises a clear
    # error naming the mutation; it never reads a freed object.
    try:
        masks, hit = coord.find_longest_cache_hit(hashes, 64 * 16 - 1, store, lazy=lazy)
    except RuntimeError as exc:
        assert "changed size during the lookup" in str(exc)
    else:
        assert hit == 63 * 16
        assert list(masks[0]) == [True] * 63


def test_native_store_with_lazy_list_that_shrinks_between_calls() -> None:
    coord = prefixhit.Coordinator([FA], 16, 16)
    hashes = fresh_chain(8)
    store = prefixhit.KeySet((0, h) for h in hash_chain(8))
    assert coord.find_longest_cache_hit_length(hashes, 127, store) == 112
    del hashes[4:]
    assert coord.find_longest_cache_hit_length(hashes, 79, store) == 64


class EvilKey:
    """A set member whose __eq__ mutates the request's list when the set compares keys (same
    hash as the probed pair, so the set calls __eq__)."""

    def __init__(self, target: tuple[int, bytes], hashes: list[bytes]) -> None:
        self.target = target
        self.hashes = hashes

    def __hash__(self) -> int:
        return hash(self.target)

    def __eq__(self, other: object) -> bool:
        self.hashes[:] = [b"\0" * 32]
        gc.collect()
        self.junk = [os.urandom(32) for _ in range(256)]
        return False


def test_set_member_eq_that_mutates_the_list() -> None:
    coord = prefixhit.Coordinator([FA], 16, 16)
    hashes = fresh_chain(32)
    chain = hash_chain(32)
    store = {(0, h) for h in chain[:16]}
    store.add(EvilKey((0, chain[16]), hashes))  # compared when block 16 is probed
    try:
        _, hit = coord.find_longest_cache_hit(hashes, 32 * 16 - 1, store)
    except RuntimeError as exc:
        assert "changed size" in str(exc)
    else:
        assert hit == 16 * 16


def test_offsets_written_by_another_thread_do_not_crash() -> None:
    """offsets/max_lengths are copied before validation: a writer thread flipping them to
    absurd values mid-call can change nothing the engine reads."""
    seed = int(os.environ.get("PREFIXHIT_SEED", random.randrange(2**32)))
    print(f"PREFIXHIT_SEED={seed}", file=sys.stderr)
    rng = random.Random(seed)
    coord = prefixhit.Coordinator([FA], 16, 16)
    n_req, per = 64, 32
    digests = np.frombuffer(b"".join(hash_chain(per) * n_req), np.uint8).reshape(-1, 32)
    offsets = np.arange(0, (n_req + 1) * per, per, dtype=np.int64)
    lengths = np.full(n_req, per * 16 - 1, dtype=np.int64)
    store = prefixhit.KeySet((0, h) for h in hash_chain(per))
    good_offsets, good_lengths = offsets.copy(), lengths.copy()
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            i = rng.randrange(n_req)
            offsets[i + 1] = 1 << 60
            lengths[i] = -(1 << 62)
            offsets[i + 1] = good_offsets[i + 1]
            lengths[i] = good_lengths[i]

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(200):
            try:
                result = coord.find_longest_cache_hits(digests, offsets, lengths, store,
                                                       num_threads=2)
            except prefixhit.InvalidArgumentError:
                continue  # a torn value seen at validation time is a clear error
            assert list(result.hit_lengths) == [(per - 1) * 16] * n_req
    finally:
        stop.set()
        t.join()


def test_integer_arrays_are_not_borrowed() -> None:
    """The copy is observable: a batch result does not change when the caller reuses the
    offsets array afterwards (and an odd dtype/stride is accepted)."""
    coord = prefixhit.Coordinator([FA], 16, 16)
    chain = hash_chain(8)
    digests = np.frombuffer(b"".join(chain * 2), np.uint8).reshape(-1, 32)
    offsets = np.array([0, 0, 8, 8, 16, 16], dtype=np.int32)[::2]  # strided int32
    store = prefixhit.KeySet((0, h) for h in chain)
    result = coord.find_longest_cache_hits(digests, offsets, 127, store)
    assert list(result.hit_lengths) == [112, 112]


def test_big_endian_integer_arrays() -> None:
    """Found by the Hypothesis harness: '>i8' offsets were read in native byte order."""
    coord = prefixhit.Coordinator([FA], 16, 16)
    chain = hash_chain(8)
    digests = np.frombuffer(b"".join(chain), np.uint8).reshape(-1, 32)
    store = prefixhit.KeySet((0, h) for h in chain[:5])
    for dtype in (">i8", ">u4", ">i2", "<i8"):
        result = coord.find_longest_cache_hits(
            digests, np.array([0, 8], dtype=dtype), np.array([127], dtype=dtype), store)
        assert list(result.hit_lengths) == [80], dtype
