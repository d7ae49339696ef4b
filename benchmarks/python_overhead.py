#!/usr/bin/env python3
"""Python-side cost of prefixhit's lookups: the batch API against one call per request.

For batches of 1, 64 and 1024 requests (each request a 1024-token prompt, 64 hashes of 16
tokens, over the three-group EAGLE configuration of SEMANTICS.md 2.3) it times, in one run:

  loop/set      one find_longest_cache_hit call per request, store = a Python set
                (how a runtime that ports the reference would call it)
  loop/KeySet   the same loop, store = a KeySet (no Python probing)
  batch/KeySet  one find_longest_cache_hits call, store = the same KeySet, on one thread
  batch/empty   the same batch with max_lengths = 0: the engine does (almost) nothing, so
                this is the binding's own cost: argument conversion, result allocation
  batch/threads the KeySet batch on every core
  batch/BlockIndex, batch/cuda-index  the same batch against the resident CPU / GPU index

and prints microseconds per request (best of several repeats) plus the ratios loop/batch.
Run: python benchmarks/python_overhead.py [--repeats N] [--markdown]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import time
from typing import Any, Callable

import numpy as np

import prefixhit

H, S = 16, 64
HASHES_PER_REQUEST = 64
GROUPS = [
    {
        "kind": "full_attention",
        "block_size": 64,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": "bfloat16",
    },
    {
        "kind": "sliding_window",
        "block_size": 16,
        "sliding_window": 32,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": "bfloat16",
    },
    {
        "kind": "sliding_window",
        "block_size": 16,
        "sliding_window": 32,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": "bfloat16",
        "eagle": True,
    },
]


def chain(n: int, salt: int) -> list[bytes]:
    prev = hashlib.sha256(salt.to_bytes(8, "little")).digest()
    out = []
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        out.append(prev)
    return out


def workload(
    coord: prefixhit.Coordinator, requests: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Requests over 16 distinct prompts; the store holds a saved prefix of each prompt (through
    the store mask), so hits vary from nothing to the whole prompt."""
    prompts = [chain(HASHES_PER_REQUEST, salt) for salt in range(16)]
    pairs: set[tuple[int, bytes]] = set()
    for hashes in prompts:
        saved = int(rng.integers(0, HASHES_PER_REQUEST * H // S + 1)) * S
        masks = coord.store_mask(saved)
        for gid, (spec, mask) in enumerate(zip(coord.groups, masks)):
            keys = coord.chunk_keys(hashes, spec.block_size)
            for chunk in range(saved // spec.block_size):
                if mask is None or mask[chunk]:
                    pairs.add((gid, keys[chunk]))
    picks = rng.integers(0, len(prompts), size=requests)
    lists = [prompts[p] for p in picks]
    digests = np.frombuffer(b"".join(b"".join(h) for h in lists), dtype=np.uint8).reshape(-1, 32)
    offsets = np.arange(requests + 1, dtype=np.int64) * HASHES_PER_REQUEST
    max_lengths = np.full(requests, HASHES_PER_REQUEST * H - 1, dtype=np.int64)
    return {
        "lists": lists,
        "digests": digests,
        "offsets": offsets,
        "max_lengths": max_lengths,
        "pairs": pairs,
    }


def best_time(fn: Callable[[], object], repeats: int, min_seconds: float = 0.05) -> float:
    """Seconds per call: the best (least disturbed) of `repeats` timed runs, each long enough
    to be measured reliably."""
    fn()  # warm up
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_seconds or calls >= 1 << 16:
            break
        calls *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return min(samples)


def measure(
    coord: prefixhit.Coordinator, requests: int, rng: np.random.Generator, repeats: int, gpu: bool
) -> dict[str, Any]:
    """Every timing for one batch size, in microseconds per request."""
    w = workload(coord, requests, rng)
    key_set = prefixhit.KeySet(w["pairs"])
    index = prefixhit.BlockIndex()
    for gid, key in w["pairs"]:
        index.insert(gid, [key])
    zero = np.zeros(requests, dtype=np.int64)
    args = (w["digests"], w["offsets"], w["max_lengths"])
    lengths = w["max_lengths"].tolist()

    def loop(store: Any) -> Callable[[], None]:
        def body() -> None:
            for hashes, length in zip(w["lists"], lengths):
                coord.find_longest_cache_hit(hashes, length, store)

        return body

    # Same answers everywhere, or the timings would compare different work.
    batch = coord.find_longest_cache_hits(*args, key_set)
    for r in range(requests):
        assert batch[r] == coord.find_longest_cache_hit(w["lists"][r], lengths[r], w["pairs"]), r

    timings = {
        "loop/set": best_time(loop(w["pairs"]), repeats),
        "loop/KeySet": best_time(loop(key_set), repeats),
        "batch/KeySet": best_time(
            lambda: coord.find_longest_cache_hits(*args, key_set, num_threads=1), repeats
        ),
        "batch/empty": best_time(
            lambda: coord.find_longest_cache_hits(
                w["digests"], w["offsets"], zero, key_set, num_threads=1
            ),
            repeats,
        ),
        "batch/threads": best_time(lambda: coord.find_longest_cache_hits(*args, key_set), repeats),
        "batch/BlockIndex": best_time(
            lambda: coord.find_longest_cache_hits(*args, index, num_threads=1), repeats
        ),
        "batch/set": best_time(lambda: coord.find_longest_cache_hits(*args, w["pairs"]), repeats),
    }
    if gpu:
        cuda_index = prefixhit.BlockIndex("cuda")
        for gid, key in w["pairs"]:
            cuda_index.insert(gid, [key])
        timings["batch/cuda-index"] = best_time(
            lambda: coord.find_longest_cache_hits(*args, cuda_index), repeats
        )
    return {
        "requests": requests,
        "us": {k: v * 1e6 / requests for k, v in timings.items()},
        "mean_hit": float(batch.hit_lengths.mean()),
    }


def run(repeats: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    coord = prefixhit.Coordinator(GROUPS, S, H, use_eagle=True)
    rng = np.random.default_rng(1234)
    gpu = bool(prefixhit.build_info()["gpu_available"])
    rows = [measure(coord, requests, rng, repeats, gpu) for requests in (1, 64, 1024)]
    info = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "numpy": np.__version__,
        "build": str(prefixhit.build_info()),
    }
    return rows, info


def render(rows: list[dict[str, Any]], info: dict[str, str], markdown: bool) -> str:
    columns = list(rows[0]["us"])
    lines = []
    if markdown:
        lines.append(
            "| requests | " + " | ".join(columns) + " | loop/set ÷ batch/KeySet "
            "| loop/KeySet ÷ batch/KeySet |"
        )
        lines.append("|---:|" + "---:|" * (len(columns) + 2))
    for row in rows:
        us = row["us"]
        cells = [f"{us[c]:.2f}" for c in columns]
        ratio_set = us["loop/set"] / us["batch/KeySet"]
        ratio_ks = us["loop/KeySet"] / us["batch/KeySet"]
        if markdown:
            lines.append(
                f"| {row['requests']} | "
                + " | ".join(cells)
                + f" | {ratio_set:.1f}x | {ratio_ks:.1f}x |"
            )
        else:
            lines.append(
                f"R={row['requests']:5d}  "
                + "  ".join(f"{c}={v}" for c, v in zip(columns, cells))
                + f"  loop/set÷batch={ratio_set:.1f}x  loop/KeySet÷batch={ratio_ks:.1f}x"
                f"  (mean hit {row['mean_hit']:.0f} tokens)"
            )
    lines.append("")
    lines.append(
        "microseconds per request, best of the repeats; "
        + ", ".join(f"{k} {v}" for k, v in info.items())
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    rows, info = run(args.repeats)
    print(render(rows, info, args.markdown))
    # A quick summary of the binding's own cost: the zero-work batch per request.
    overhead = {row["requests"]: row["us"]["batch/empty"] for row in rows}
    print(
        "binding overhead per request (batch/empty): "
        + ", ".join(f"R={r}: {v:.2f} us" for r, v in overhead.items())
    )
    print(
        "median loop/set ÷ batch/KeySet: "
        f"{statistics.median(r['us']['loop/set'] / r['us']['batch/KeySet'] for r in rows):.1f}x"
    )


if __name__ == "__main__":
    main()
