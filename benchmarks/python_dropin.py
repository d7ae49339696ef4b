#!/usr/bin/env python3
"""prefixhit.vllm (the drop-in) against a plain-Python reference coordinator, in one run.

Shape dsv4-flash (SEMANTICS.md 5.3, /work/shared/perf/reference-timings.md): FA(256) +
SWA(64, w128) + SWA(64, w128, EAGLE) + SWA(4, w8) + SWA(8, w128); H=4, S=256, use_eagle;
131072 tokens = 32768 hashes as a list of `bytes`; the store holds every block key of every
group (53,760 keys); max_length 131071. The reference is benchmarks/reference/mooncake_reference.py
(written from SEMANTICS.md in vLLM's style and checked against every conformance vector by
tests/python/test_reference.py). Both sides get vLLM-shaped inputs: the drop-in takes
KVCacheGroupSpec-like objects and an ExternalCachedBlockPool over the same Python set.

Every answer is checked equal to the reference's before timing. Times are microseconds per call
(median of --repeats runs of a timed loop). Run:

    python benchmarks/python_dropin.py [--semantics vllm-0.33|pr49069] [--repeats 7] [--markdown]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "reference"))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import mooncake_reference as ref  # noqa: E402
from vllm_shapes import SWA, FA, groups  # noqa: E402

import prefixhit  # noqa: E402
from prefixhit import vllm as dropin  # noqa: E402

H, S, TOKENS = 4, 256, 131072
DICTS = [
    {"kind": "full_attention", "block_size": 256},
    {"kind": "sliding_window", "block_size": 64, "sliding_window": 128},
    {"kind": "sliding_window", "block_size": 64, "sliding_window": 128, "eagle": True},
    {"kind": "sliding_window", "block_size": 4, "sliding_window": 8},
    {"kind": "sliding_window", "block_size": 8, "sliding_window": 128},
]


def per_call_us(fn: Callable[[], Any], repeats: int, min_time: float = 0.05) -> float:
    n = 1
    while True:  # calibrate the loop to about min_time
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t >= min_time or n >= 1 << 20:
            break
        n *= 2
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--semantics", default="vllm-0.33", choices=("vllm-0.33", "pr49069"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()

    prev = hashlib.sha256(b"dsv4").digest()
    hashes: list[bytes] = []
    for i in range(TOKENS // H):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        hashes.append(prev)

    vllm_groups = groups(FA(256), SWA(64, 128), SWA(64, 128), SWA(4, 8), SWA(8, 128), eagle=(2,))
    partial = False  # the engine rule gives False here (no Mamba group)
    reference = ref.MooncakeStoreCoordinator(
        DICTS, S, H, True, None, enable_partial_hash_hits=partial, semantics=args.semantics)
    kwargs = {"enable_partial_hash_hits": partial} if args.semantics == "vllm-0.33" else {}
    coord = dropin.MooncakeStoreCoordinator(
        vllm_groups, S, H, use_eagle=True, semantics=args.semantics, **kwargs)

    exists = {
        (gid, key)
        for gid, g in enumerate(DICTS)
        for key in reference.block_hashes_for_spec(hashes, g)
    }
    assert len(exists) == 53760, len(exists)
    ref_pool = ref.ExternalCachedBlockPool(H, exists)
    pool = dropin.ExternalCachedBlockPool(H, exists)
    key_set = prefixhit.KeySet(exists)
    max_length = TOKENS - 1

    # Same answers first.
    want = reference.find_longest_cache_hit(hashes, max_length, ref_pool)
    for store in (pool, exists, key_set):
        got = coord.find_longest_cache_hit(hashes, max_length, store)
        assert got == want or (list(got[0]) == list(want[0]) and got[1] == want[1]), "lookup"
    assert coord.find_longest_cache_hit_length(hashes, max_length, key_set) == want[1]
    assert list(coord.store_mask(TOKENS, num_prompt_tokens=TOKENS)) == list(
        reference.store_mask(TOKENS, num_prompt_tokens=TOKENS))
    assert list(coord.lookup_mask(TOKENS)) == list(reference.lookup_mask(TOKENS))
    assert list(coord.load_mask(hashes, TOKENS)) == list(reference.load_mask(hashes, TOKENS))

    def expand(masks: Any) -> list[Any]:
        return [None if m is None else list(m) for m in masks]

    rows: list[tuple[str, float, float, str]] = []

    def row(name: str, ref_fn: Callable[[], Any], ours: Callable[[], Any], note: str = "") -> None:
        r = per_call_us(ref_fn, args.repeats)
        o = per_call_us(ours, args.repeats)
        rows.append((name, r, o, note))

    ref_find = lambda: reference.find_longest_cache_hit(hashes, max_length, ref_pool)  # noqa: E731
    row("find_longest_cache_hit, pool over a Python set", ref_find,
        lambda: coord.find_longest_cache_hit(hashes, max_length, pool))
    row("find_longest_cache_hit, KeySet store", ref_find,
        lambda: coord.find_longest_cache_hit(hashes, max_length, key_set))
    row("find_longest_cache_hit_length, KeySet store", ref_find,
        lambda: coord.find_longest_cache_hit_length(hashes, max_length, key_set),
        "hit length only")
    import numpy as np

    array = np.frombuffer(b"".join(hashes), np.uint8).reshape(-1, 32)
    row("find_longest_cache_hit, KeySet, numpy [n, 32] digests", ref_find,
        lambda: coord.find_longest_cache_hit(array, max_length, key_set),
        "hashes as one uint8 array (GIL released)")
    row("find_longest_cache_hit, KeySet, masks expanded", ref_find,
        lambda: expand(coord.find_longest_cache_hit(hashes, max_length, key_set)[0]),
        "every mask read into lists")
    row("store_mask(131072, num_prompt_tokens=131072)",
        lambda: reference.store_mask(TOKENS, num_prompt_tokens=TOKENS),
        lambda: coord.store_mask(TOKENS, num_prompt_tokens=TOKENS))
    row("store_mask, masks expanded",
        lambda: reference.store_mask(TOKENS, num_prompt_tokens=TOKENS),
        lambda: expand(coord.store_mask(TOKENS, num_prompt_tokens=TOKENS)),
        "every mask read into lists")
    row("lookup_mask(131072)", lambda: reference.lookup_mask(TOKENS),
        lambda: coord.lookup_mask(TOKENS))
    row("load_mask(hashes, 131072)", lambda: reference.load_mask(hashes, TOKENS),
        lambda: coord.load_mask(hashes, TOKENS))

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = (f"semantics {args.semantics}; Python {platform.python_version()}; "
              f"{os.cpu_count()} CPUs; load average {load:.1f}; median of {args.repeats}")
    if args.markdown:
        print(header + "\n")
        print("| call | reference (µs) | prefixhit.vllm (µs) | ratio | note |")
        print("|---|---:|---:|---:|---|")
        for name, r, o, note in rows:
            print(f"| {name} | {r:.1f} | {o:.2f} | {r / o:.0f}x | {note} |")
    else:
        print(header)
        for name, r, o, note in rows:
            print(f"{name:52s} ref {r:9.1f} us  ours {o:8.2f} us  {r / o:7.0f}x  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
