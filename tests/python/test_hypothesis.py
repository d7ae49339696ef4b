"""Property tests (Hypothesis) over the public Python API: the native engine against the
plain-Python reference on random configurations and stores, every input spelling (lists, numpy
arrays of odd dtypes and strides, lazy and list results), adversarial stores, and arrays written
by another thread during a call.

CI time is bounded by the "ci" profile (about a minute in all on the development machine);
HYPOTHESIS_PROFILE=long runs more examples. PREFIXHIT_SEED replays one seed; the seed of every
run is printed."""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import threading
from collections.abc import Set
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hyp_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import prefixhit  # noqa: E402
from vector_runner import REPO_ROOT  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "reference"))
import mooncake_reference as ref  # noqa: E402

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "long", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SEED = int(os.environ.get("PREFIXHIT_SEED") or secrets.randbits(32))
print(f"test_hypothesis: PREFIXHIT_SEED={SEED}", file=sys.stderr)

KINDS = ("full_attention", "mla_attention", "sliding_window", "sliding_window_mla",
         "chunked_local", "mamba")


@st.composite
def configs(draw: Any) -> dict[str, Any]:
    H = draw(st.sampled_from([4, 8, 16]))
    S = H * draw(st.sampled_from([1, 2, 4, 8]))
    groups = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(KINDS))
        B = H * draw(st.sampled_from([m for m in (1, 2, 4, 8) if (S // H) % m == 0]))
        g: dict[str, Any] = {"kind": kind, "block_size": B, "eagle": draw(st.booleans())}
        if kind in ("sliding_window", "sliding_window_mla"):
            g["sliding_window"] = draw(st.integers(1, 4 * S))
        elif kind == "chunked_local":
            g["attention_chunk_size"] = B * draw(st.integers(1, 4))
        elif kind == "mamba":
            g["mamba_cache_mode"] = draw(st.sampled_from(["align", "all", "none"]))
            g["state_dim"] = draw(st.sampled_from([16, 32]))
        groups.append(g)
    return {"groups": groups, "H": H, "S": S, "use_eagle": draw(st.booleans()),
            "retention_interval": draw(st.sampled_from([None, 0, S, 2 * S]))}


def chain(n: int, salt: int) -> list[bytes]:
    prev = hashlib.sha256(salt.to_bytes(8, "little")).digest()
    out = []
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        out.append(prev)
    return out


def both(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """(native, reference) or the error kinds they raised."""
    try:
        native: Any = prefixhit.Coordinator(
            [{k: v for k, v in g.items()} for g in cfg["groups"]], cfg["S"], cfg["H"],
            cfg["use_eagle"], cfg["retention_interval"])
    except prefixhit.PrefixhitError as e:
        native = e.kind
    try:
        reference: Any = ref.MooncakeStoreCoordinator(
            cfg["groups"], cfg["S"], cfg["H"], cfg["use_eagle"], cfg["retention_interval"])
    except ref.ReferenceError as e:
        reference = e.kind
    return native, reference


def outcome(fn: Any) -> Any:
    try:
        return fn()
    except (prefixhit.PrefixhitError, ref.ReferenceError) as e:
        return ("error", e.kind)


@hyp_seed(SEED)
@given(cfg=configs(), n=st.integers(0, 40), salt=st.integers(0, 2**32),
       density=st.floats(0, 1), data=st.data())
def test_engine_matches_reference(cfg: dict[str, Any], n: int, salt: int, density: float,
                                  data: Any) -> None:
    native, reference = both(cfg)
    if isinstance(native, str) or isinstance(reference, str):
        assert native == reference
        return
    hashes = chain(n, salt)
    rng = np.random.default_rng(salt)
    pairs = {(g, h) for g in range(len(cfg["groups"])) for h in hashes
             if rng.random() < density}
    H = cfg["H"]
    max_length = data.draw(st.integers(0, (n + 1) * H - 1))
    apply_eagle = data.draw(st.booleans())
    want = outcome(lambda: reference.find_longest_cache_hit(
        hashes, max_length, ref.ExternalCachedBlockPool(H, pairs), apply_eagle=apply_eagle))
    arr = np.frombuffer(b"".join(hashes), np.uint8).reshape(n, 32)
    for digests in (hashes, tuple(hashes), arr):
        for store in (pairs, prefixhit.KeySet(pairs), frozenset(pairs)):
            got = outcome(lambda: native.find_longest_cache_hit(
                digests, max_length, store, apply_eagle=apply_eagle, lazy=True))
            if isinstance(want, tuple) and want and want[0] == "error":
                assert got == want
            else:
                assert got[1] == want[1] and list(got[0]) == list(want[0])
                assert native.find_longest_cache_hit_length(
                    digests, max_length, store, apply_eagle=apply_eagle) == want[1]
    length = data.draw(st.integers(0, 8)) * native.lookup_alignment
    prompt = data.draw(st.one_of(st.none(), st.integers(0, length + 2 * cfg["S"])))
    start = data.draw(st.integers(0, length))
    for name, a, b in (
        ("store_mask", lambda: native.store_mask(length, start, prompt, lazy=True),
         lambda: reference.store_mask(length, start, prompt)),
        ("lookup_mask", lambda: native.lookup_mask(length, lazy=True),
         lambda: reference.lookup_mask(length)),
        ("load_mask", lambda: native.load_mask(hashes, min(max_length, n * H), lazy=True),
         lambda: reference.load_mask(hashes, min(max_length, n * H))),
    ):
        got, exp = outcome(a), outcome(b)
        if isinstance(exp, tuple) and exp and exp[0] == "error":
            assert got == exp, name
        else:
            assert [None if m is None else list(m) for m in got] == list(exp), name


class Hostile(Set):  # type: ignore[type-arg]
    """A store whose probes misbehave: raise, mutate the request, return odd truth values."""

    def __init__(self, mode: str, hashes: list[bytes], pairs: set[Any]) -> None:
        self.mode, self.hashes, self.pairs, self.calls = mode, hashes, pairs, 0

    def __contains__(self, pair: object) -> bool:
        self.calls += 1
        if self.mode == "raise" and self.calls > 2:
            raise KeyError("store went away")
        if self.mode == "shrink" and self.calls == 2:
            del self.hashes[len(self.hashes) // 2:]
        if self.mode == "replace":
            self.hashes[:] = [b"\x01" * 32] * len(self.hashes)
        if self.mode == "badbool":
            return np.bool_(pair in self.pairs)  # type: ignore[return-value]
        return pair in self.pairs

    def __iter__(self) -> Any:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)


@hyp_seed(SEED)
@given(mode=st.sampled_from(["raise", "shrink", "replace", "badbool"]),
       n=st.integers(1, 64), salt=st.integers(0, 2**32), block=st.sampled_from([16, 32, 64]))
def test_hostile_stores_never_crash(mode: str, n: int, salt: int, block: int) -> None:
    coord = prefixhit.Coordinator(
        [{"kind": "full_attention", "block_size": block},
         {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "eagle": True}],
        64, 16, use_eagle=True)
    hashes = [bytes(bytearray(h)) for h in chain(n, salt)]
    pairs = {(g, h) for g in range(2) for h in chain(n, salt)}
    store = Hostile(mode, hashes, pairs)
    try:
        masks, hit = coord.find_longest_cache_hit(hashes, (n + 1) * 16 - 1, store)
    except KeyError:
        assert mode == "raise"
    except RuntimeError as e:
        assert mode == "shrink" and "changed size" in str(e)
    else:
        assert 0 <= hit <= n * 16 and len(masks) == 2


@hyp_seed(SEED)
@given(n=st.integers(1, 48), salt=st.integers(0, 2**32),
       layout=st.sampled_from(["C", "F-view", "strided", "S32", "bytes-list", "memoryview"]),
       int_dtype=st.sampled_from(["<i8", ">i8", "<i4", "<u2", "<i2", "<u8"]))
def test_odd_dtypes_and_strides(n: int, salt: int, layout: str, int_dtype: str) -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    hashes = chain(n, salt)
    store = prefixhit.KeySet((0, h) for h in hashes[: n // 2])
    base = np.frombuffer(b"".join(hashes), np.uint8).reshape(n, 32)
    if layout == "C":
        digests: Any = base
    elif layout == "F-view":
        digests = np.asfortranarray(base)
    elif layout == "strided":
        wide = np.zeros((n, 64), np.uint8)
        wide[:, ::2] = base
        digests = wide[:, ::2]
    elif layout == "S32":
        digests = base.copy().view("S32").reshape(n)
    elif layout == "bytes-list":
        digests = [bytearray(h) for h in hashes]
    else:
        digests = [memoryview(h) for h in hashes]
    want = (n // 2) * 16
    assert coord.find_longest_cache_hit_length(digests, n * 16, store) == want
    offsets = np.array([0, n], dtype=int_dtype)
    result = coord.find_longest_cache_hits(
        base, offsets, np.array([n * 16], dtype=int_dtype), store)
    assert list(result.hit_lengths) == [want]


@hyp_seed(SEED)
@settings(max_examples=20)
@given(salt=st.integers(0, 2**32), threads=st.sampled_from([1, 2]))
def test_arrays_written_during_a_batch(salt: int, threads: int) -> None:
    """Digest and offset arrays rewritten by another thread during a GIL-free batch: answers
    may be torn (the caller raced itself) but nothing crashes and errors are typed."""
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    per, reqs = 32, 32
    hashes = chain(per, salt)
    digests = np.frombuffer(b"".join(hashes * reqs), np.uint8).reshape(-1, 32).copy()
    offsets = np.arange(0, (reqs + 1) * per, per, dtype=np.int64)
    store = prefixhit.KeySet((0, h) for h in hashes)
    stop = threading.Event()

    def writer() -> None:
        rng = np.random.default_rng(salt)
        while not stop.is_set():
            digests[rng.integers(len(digests))] ^= 0xFF
            offsets[rng.integers(1, reqs)] = rng.integers(-(2**62), 2**62)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(20):
            try:
                result = coord.find_longest_cache_hits(digests, offsets, per * 16 - 1, store,
                                                       num_threads=threads)
            except prefixhit.InvalidArgumentError:
                continue
            assert all(0 <= h < per * 16 for h in result.hit_lengths)
    finally:
        stop.set()
        t.join()
