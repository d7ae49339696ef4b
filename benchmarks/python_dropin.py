#!/usr/bin/env python3
"""prefixhit.vllm (the drop-in) against a plain-Python reference coordinator, in one run.

Shape dsv4-flash (SEMANTICS.md 5.3, /work/shared/perf/reference-timings.md): FA(256) +
SWA(64, w128) + SWA(64, w128, EAGLE) + SWA(4, w8) + SWA(8, w128); H=4, S=256, use_eagle;
131072 tokens = 32768 hashes as a list of `bytes`; the store holds every block key of every
group (53,760 keys); max_length 131071. The reference is benchmarks/reference/mooncake_reference.py
(written from SEMANTICS.md in vLLM's style and checked against every conformance vector by
tests/python/test_reference.py). Both sides get vLLM-shaped inputs: the drop-in takes
KVCacheGroupSpec-like objects and an ExternalCachedBlockPool over the same Python set.

The worker-side lookup rows run vLLM's whole Mooncake store worker lookup against an in-memory
batch_is_exist (a Python set of store key strings): the reference is
benchmarks/reference/mooncake_worker_reference.py (vLLM's flow over the reference coordinator),
prefixhit's is MooncakeStoreCoordinator.worker_lookup (default: a few exact rounds) and the same
with multi_round=False (one round of every candidate key, as vLLM asks). The store holds what
vLLM's save of the whole prompt writes; the request is the whole prompt, or a prompt that shares
its first half and then diverges.

Every answer is checked equal to the reference's before timing. Each row times the reference and
prefixhit back to back, --repeats times, so both sides of a ratio see the same machine load;
times are microseconds per call (median of the repeats), the ratio is the median of the
per-repeat ratios. Run:

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
import mooncake_worker_reference as ref_worker  # noqa: E402
from vllm_shapes import FA, SWA, groups  # noqa: E402

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


def loop_count(fn: Callable[[], Any], min_time: float = 0.05) -> int:
    """Calls per timed loop, so that one loop lasts about min_time."""
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t >= min_time or n >= 1 << 20:
            return n
        n *= 2


def timed_loop(fn: Callable[[], Any], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def interleaved(ref_fn: Callable[[], Any], ours: Callable[[], Any],
                repeats: int) -> tuple[float, float, float]:
    """(reference µs, ours µs, ratio): each repeat times both back to back; medians."""
    n_ref, n_ours = loop_count(ref_fn), loop_count(ours)
    refs, mine = [], []
    for _ in range(repeats):
        refs.append(timed_loop(ref_fn, n_ref))
        mine.append(timed_loop(ours, n_ours))
    ratio = statistics.median(r / o for r, o in zip(refs, mine))
    return statistics.median(refs), statistics.median(mine), ratio


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--semantics", default="vllm-0.33", choices=("vllm-0.33", "pr49069"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3

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

    rows: list[tuple[str, float, float, float, str]] = []

    def row(name: str, ref_fn: Callable[[], Any], ours: Callable[[], Any], note: str = "") -> None:
        add_row(rows, args.repeats, name, ref_fn, ours, note)

    ref_find = lambda: reference.find_longest_cache_hit(hashes, max_length, ref_pool)  # noqa: E731
    row("find_longest_cache_hit, pool over a Python set", ref_find,
        lambda: coord.find_longest_cache_hit(hashes, max_length, pool))
    # The part no drop-in can skip with this store: the Python set's own probes. The pairs the
    # reference asks, probed in a loop as the reference does ((group, hash) tuples, `in`).
    asked: list[tuple[int, bytes]] = []

    class Recording(set):  # type: ignore[type-arg]
        def __contains__(self, pair: object) -> bool:
            asked.append(pair)  # type: ignore[arg-type]
            return set.__contains__(self, pair)

    reference.find_longest_cache_hit(hashes, max_length,
                                     ref.ExternalCachedBlockPool(H, Recording(exists)))

    def set_probes_alone() -> None:
        for g, h in asked:
            (g, h) in exists  # noqa: B015

    row("bound: the reference's set probes alone", ref_find, set_probes_alone,
        f"its {len(asked)} `(group, hash) in set` probes in a Python loop; "
        "ratio = the reference's time over them")
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

    worker_rows(rows, coord, reference, hashes, args.repeats)

    load_end = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    header = (f"semantics {args.semantics}; Python {platform.python_version()}; "
              f"{os.cpu_count()} CPUs; load average (1/5/15 min) at the start "
              f"{' '.join(f'{x:.1f}' for x in load_start)}, at the end "
              f"{' '.join(f'{x:.1f}' for x in load_end)}; median of {args.repeats}")
    if args.markdown:
        print(header + "\n")
        print("| call | reference (µs) | prefixhit.vllm (µs) | ratio | note |")
        print("|---|---:|---:|---:|---|")
        for name, r, o, ratio, note in rows:
            print(f"| {name} | {r:.1f} | {o:.2f} | {ratio:.0f}x | {note} |")
    else:
        print(header)
        for name, r, o, ratio, note in rows:
            print(f"{name:52s} ref {r:9.1f} us  ours {o:8.2f} us  {ratio:7.0f}x  {note}")
    return 0


def worker_rows(rows: list, coord: Any, reference: Any, hashes: list[bytes],
                repeats: int) -> None:
    """The whole worker-side lookup against an in-memory batch_is_exist (see the docstring)."""
    from prefixhit import store as pstore

    layout = coord.store_layout("DeepSeek-V4-Flash")
    prefixes = ref_worker.key_prefixes("DeepSeek-V4-Flash", layout.namespaces)
    # What vLLM's save of the whole prompt writes: store_mask's chunks, one key per namespace.
    saved: set[str] = set()
    masks = reference.store_mask(TOKENS, num_prompt_tokens=TOKENS)
    for gid, g in enumerate(DICTS):
        for j, key in enumerate(reference.block_hashes_for_spec(hashes, g)):
            if masks[gid] is None or masks[gid][j]:
                saved.update(f"{p}@{key.hex()}" for p in prefixes[gid])
    assert {k for g in range(len(DICTS)) for k in layout.keys(g, hashes[-1])} <= saved

    def batch_is_exist(keys: list[str]) -> list[int]:
        return [1 if k in saved else 0 for k in keys]

    half = len(hashes) // 2
    diverged = hashes[:half] + [hashlib.sha256(h + b"x").digest() for h in hashes[half:]]
    for label, request in (("whole prompt stored", hashes), ("first half stored", diverged)):
        want = ref_worker.worker_lookup(reference, prefixes, batch_is_exist, TOKENS, request)
        stats: dict = {}
        one: dict = {}
        assert coord.worker_lookup(batch_is_exist, layout, TOKENS, request, stats=stats) == want
        assert coord.worker_lookup(batch_is_exist, layout, TOKENS, request, multi_round=False,
                                   stats=one) == want
        ref_fn = lambda r=request: ref_worker.worker_lookup(  # noqa: E731
            reference, prefixes, batch_is_exist, TOKENS, r)
        add_row(rows, repeats, f"worker lookup, {label}", ref_fn,
            lambda r=request: coord.worker_lookup(batch_is_exist, layout, TOKENS, r),
            f"default (multi-round): {stats['keys_asked']} keys in {stats['rounds']} calls; "
            f"hit {want}")
        add_row(rows, repeats, f"worker lookup, {label}, multi_round=False", ref_fn,
            lambda r=request: coord.worker_lookup(batch_is_exist, layout, TOKENS, r,
                                                  multi_round=False),
            f"one call of {one['keys_asked']} keys, as vLLM asks")
        # What one round cannot avoid: the round's keys as new str objects (built in C++) and
        # the caller's batch_is_exist over them.
        one_round = pstore.RemoteLookup.worker(coord.core, layout, request, [0, len(request)],
                                               [TOKENS])
        add_row(rows, repeats, f"bound: one round's keys and batch_is_exist, {label}", ref_fn,
            lambda lookup=one_round: batch_is_exist(lookup.pending_keys),
            "new key strings + the in-memory batch_is_exist alone")


def add_row(rows: list, repeats: int, name: str, ref_fn: Callable[[], Any],
        ours: Callable[[], Any], note: str = "") -> None:
    rows.append((name, *interleaved(ref_fn, ours, repeats), note))


if __name__ == "__main__":
    raise SystemExit(main())
