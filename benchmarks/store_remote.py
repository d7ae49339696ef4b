#!/usr/bin/env python3
"""Remote mode against the store, measured in one run: keys asked and wall time.

Shape: dsv4-flash (FA(256) + SWA(64, w128) + SWA(64, w128, EAGLE) + SWA(4, w8) + SWA(8, w128);
H=4, S=256, use_eagle), 64 requests of 131072 tokens (32768 hashes each). The store holds what
vLLM's save of 4 whole "root" prompts writes (store_mask chunks, vLLM's key format); each request
shares a random-length prefix of one root and then diverges, so hits are partial and requests
share prefixes, as in a real batch.

Flows, all on the same store and requests:
  vllm        vLLM's Mooncake store worker lookup as vLLM writes it, in Python, one request at a
              time: align_lookup_length, lookup_mask, one key string per masked chunk per
              namespace, one batch_is_exist per request, the all-namespaces set, then
              find_longest_cache_hit (and the second lookup at a whole-prompt hit). Its
              coordinator calls use prefixhit's Coordinator, which makes this flow faster than
              vLLM's own: the ratios below are conservative.
  one-round   prefixhit.store.worker_lookups: the whole batch, deduplicated keys, ONE batch_is_exist
  multi-round the same with multi_round=True: full attention first, then only the keys read
  mirror      mirror mode: no RPC at all. A resident BlockIndex is fed the same saved chunks
              through an EventMirror from a local pyzmq PUB socket speaking vLLM's KV-event
              format (BlockStored, 32-byte hashes, group_idx; the PyPI mooncake_master is built
              without its event publisher, docs/perf/store.md), and the batch's worker lookups
              run on it: find_longest_cache_hits over the whole batch, then again for the
              requests whose hit reached num_tokens (vLLM's second lookup). Its hits must equal
              the vLLM flow's, which asked the real master.

Part 1 runs them against a real mooncake_master (started here on free loopback ports), part 2
against an in-memory batch_is_exist (a Python set), for the worker-side lookup target (>= 20x).
Run: python benchmarks/store_remote.py [--requests 64] [--tokens 131072] [--repeats 3]
     [--no-mirror]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import struct
import sys
import time
from pathlib import Path

import prefixhit
from prefixhit import store as pstore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))

H, S = 4, 256
GROUPS = [
    {"kind": "full_attention", "block_size": 256},
    {"kind": "sliding_window", "block_size": 64, "sliding_window": 128},
    {"kind": "sliding_window", "block_size": 64, "sliding_window": 128, "eagle": True,
     "head_size": 1},
    {"kind": "sliding_window", "block_size": 4, "sliding_window": 8},
    {"kind": "sliding_window", "block_size": 8, "sliding_window": 128},
]
MODEL = "DeepSeek-V4-Flash"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def vllm_lookup(coord, prefixes, block_sizes, exist_fn, num_tokens, block_hashes) -> tuple[int, int]:
    """vLLM's MooncakeStoreWorker.lookup, written from the issue's description. Returns
    (hit_length, keys asked)."""
    token_len = coord.align_lookup_length(num_tokens)
    if not block_hashes or token_len <= 0:
        return 0, 0
    candidate_keys: list[str] = []
    candidate_meta: list[tuple[int, bytes]] = []
    fine_grained = coord.enable_partial_hash_hits
    lookup_masks = None if fine_grained else coord.lookup_mask(token_len)
    for g_idx, spec_block_size in enumerate(block_sizes):
        key_prefixes = prefixes[g_idx]
        if fine_grained:
            unit_ids = range(min(len(block_hashes), token_len // H))
            group_hashes = block_hashes
        else:
            lookup_mask = lookup_masks[g_idx]
            scale = spec_block_size // H
            group_hashes = block_hashes[scale - 1::scale]  # each chunk's last hash
            max_chunks = min(len(group_hashes), cdiv(token_len, spec_block_size))
            mask_limit = max_chunks if lookup_mask is None else min(max_chunks, len(lookup_mask))
            unit_ids = [c for c in range(mask_limit) if lookup_mask is None or lookup_mask[c]]
        for chunk_id in unit_ids:
            h = group_hashes[chunk_id]
            hash_hex = h.hex()
            for key_prefix in key_prefixes:
                candidate_keys.append(f"{key_prefix}@{hash_hex}")
            candidate_meta.append((g_idx, bytes(h)))
    if not candidate_keys:
        return 0, 0
    res = exist_fn(candidate_keys)
    exists_set = set()
    pos = 0
    for g_idx, hash_bytes in candidate_meta:
        count = len(prefixes[g_idx])
        if all(res[pos + j] == 1 for j in range(count)):
            exists_set.add((g_idx, hash_bytes))
        pos += count
    _, hit = coord.find_longest_cache_hit(block_hashes, token_len, exists_set)
    if hit >= num_tokens:
        usable = coord.align_lookup_length(num_tokens - 1)
        if usable <= 0:
            return 0, len(candidate_keys)
        _, hit = coord.find_longest_cache_hit(block_hashes, usable, exists_set)
    return hit, len(candidate_keys)


def saved_keys(coord, layout, hashes: list[bytes]) -> list[str]:
    aligned = coord.align_lookup_length(len(hashes) * H)
    masks = coord.store_mask(aligned, 0, len(hashes) * H)
    keys = []
    for g, mask in enumerate(masks):
        block = GROUPS[g]["block_size"]
        chunk_keys = coord.chunk_keys(hashes, block)
        for j in range(aligned // block):
            if mask is None or mask[j]:
                keys.extend(layout.keys(g, chunk_keys[j]))
    return keys


def timed(fn, repeats: int):
    fn()  # warm-up: first-call costs (imports, allocator growth) are not the flow's
    times = []
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, min(times), statistics.median(times)


def saved_pairs(coord, hashes: list[bytes]) -> list[tuple[int, bytes]]:
    """The (group, chunk digest) pairs of saved_keys, in the same order (one per chunk)."""
    aligned = coord.align_lookup_length(len(hashes) * H)
    masks = coord.store_mask(aligned, 0, len(hashes) * H)
    pairs = []
    for g, mask in enumerate(masks):
        block = GROUPS[g]["block_size"]
        chunk_keys = coord.chunk_keys(hashes, block)
        pairs.extend((g, chunk_keys[j]) for j in range(aligned // block) if mask is None or mask[j])
    return pairs


def mirrored_index(pairs, per_event: int = 1024):
    """A BlockIndex fed `pairs` by an EventMirror from a local PUB socket in vLLM's KV-event
    format (tagged BlockStored maps, 32-byte hashes, 16 events per message). Returns the index,
    the mirror's stats and the ingestion wall time (first send to last message applied)."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    index = prefixhit.BlockIndex()
    mirror = prefixhit.EventMirror(index, [f"tcp://127.0.0.1:{port}"])
    time.sleep(0.3)  # ZeroMQ's slow joiner: the subscription must reach the PUB socket first
    by_group: dict[int, list[bytes]] = {}
    for g, digest in pairs:
        by_group.setdefault(g, []).append(digest)
    events = []
    for g, digests in sorted(by_group.items()):
        for i in range(0, len(digests), per_event):
            events.append({"type": "BlockStored", "block_hashes": digests[i:i + per_event],
                           "parent_block_hash": None, "token_ids": [],
                           "block_size": GROUPS[g]["block_size"], "lora_id": None,
                           "medium": "GPU", "group_idx": g})
    payloads = [msgpack.packb([time.time(), events[i:i + 16], 0])
                for i in range(0, len(events), 16)]
    t = time.perf_counter()
    for seq, payload in enumerate(payloads):
        pub.send_multipart([b"kv", struct.pack(">Q", seq), payload])
    if not mirror.wait_for_seq(len(payloads) - 1, timeout=120.0):
        raise SystemExit(f"the mirror did not catch up: {mirror.stats()}")
    ingest_s = time.perf_counter() - t
    mirror.stop()
    pub.close()
    ctx.term()
    stats = mirror.stats()
    assert stats["gaps"] == 0 and stats["malformed_events"] == 0, stats
    return index, stats, ingest_s


def mirror_lookups_flat(coord, index, digests, offsets, num_tokens) -> list[int]:
    """vLLM's worker lookup for a flattened batch on a resident index, no RPC: one batched
    find_longest_cache_hits, then one more for the requests whose hit reached num_tokens
    (vLLM looks up again one token short). `digests`: a list of 32-byte bytes or a uint8
    [n, 32] array."""
    token_lens = [max(0, coord.align_lookup_length(t)) if offsets[r + 1] > offsets[r] else 0
                  for r, t in enumerate(num_tokens)]
    hits = [int(h) for h in
            coord.find_longest_cache_hits(digests, offsets, token_lens, index).hit_lengths]
    again = [r for r, t in enumerate(num_tokens) if token_lens[r] > 0 and hits[r] >= t]
    if again:
        usable = [max(0, coord.align_lookup_length(num_tokens[r] - 1)) for r in again]
        parts = [digests[offsets[r]:offsets[r + 1]] for r in again]
        sub_offsets = [0]
        for part in parts:
            sub_offsets.append(sub_offsets[-1] + len(part))
        if isinstance(digests, list):
            sub = [d for part in parts for d in part]
        else:
            import numpy as np

            sub = np.concatenate(parts)
        second = coord.find_longest_cache_hits(sub, sub_offsets, usable, index)
        for k, r in enumerate(again):
            hits[r] = int(second.hit_lengths[k]) if usable[k] > 0 else 0
    return hits


def mirror_worker_lookups(coord, index, requests) -> list[int]:
    """The batch as vLLM's worker holds it (lists of bytes per request), flattened here."""
    offsets = [0]
    digests: list[bytes] = []
    for _, hashes in requests:
        digests.extend(hashes)
        offsets.append(len(digests))
    return mirror_lookups_flat(coord, index, digests, offsets, [t for t, _ in requests])


def run_flows(label, coord, layout, exist_fn, requests, repeats, results, index=None):
    prefixes = [[p.rsplit("@", 1)[0] for p in layout.keys(g, b"\0" * 32)]
                for g in range(len(GROUPS))]
    block_sizes = [g["block_size"] for g in GROUPS]

    def vllm_all():
        asked = 0
        hits = []
        for num_tokens, hashes in requests:
            hit, n = vllm_lookup(coord, prefixes, block_sizes, exist_fn, num_tokens, hashes)
            hits.append(hit)
            asked += n
        return hits, asked, len(requests)

    def prefixhit_all(multi):
        stats: dict = {}
        hits = pstore.worker_lookups(exist_fn, coord, layout, requests, multi_round=multi,
                                     stats=stats)
        return hits, stats["keys_asked"], stats["rounds"]

    rows = []
    ref, vbest, vmed = timed(vllm_all, repeats)
    rows.append(("vllm (per request)", ref[1], ref[2], vbest, vmed))
    for name, multi in (("prefixhit one-round", False), ("prefixhit multi-round", True)):
        got, best, med = timed(lambda m=multi: prefixhit_all(m), repeats)
        assert got[0] == ref[0], f"{label}: {name} disagrees with the vLLM flow"
        rows.append((name, got[1], got[2], best, med))
    if index is not None:
        got, best, med = timed(lambda: mirror_worker_lookups(coord, index, requests), repeats)
        assert got == ref[0], f"{label}: mirror mode disagrees with the vLLM flow"
        rows.append(("prefixhit mirror mode (resident index)", 0, 0, best, med))
        import numpy as np

        flat = np.frombuffer(b"".join(d for _, hs in requests for d in hs),
                             dtype=np.uint8).reshape(-1, 32)
        offsets = np.cumsum([0] + [len(hs) for _, hs in requests]).tolist()
        tokens = [t for t, _ in requests]
        got, best, med = timed(lambda: mirror_lookups_flat(coord, index, flat, offsets, tokens),
                               repeats)
        assert got == ref[0], f"{label}: mirror mode (array batch) disagrees with the vLLM flow"
        rows.append(("prefixhit mirror mode, batch as one uint8 [n, 32] array", 0, 0, best, med))
    results[label] = rows
    print(f"\n{label}: {len(requests)} requests, hits {sorted(set(ref[0]))[:6]}...")
    print(f"| flow | keys asked | batch_is_exist calls | wall ms (best) | wall ms (median) | vs vLLM |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, keys, calls, best, med in rows:
        print(f"| {name} | {keys} | {calls} | {best * 1e3:.2f} | {med * 1e3:.2f} | "
              f"{rows[0][3] / best:.1f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--roots", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("PREFIXHIT_SEED") or 0) or None)
    ap.add_argument("--skip-real", action="store_true", help="only the in-memory part")
    ap.add_argument("--no-mirror", action="store_true", help="leave out mirror mode")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    print(f"seed={seed} python={platform.python_version()} cpus={os.cpu_count()} "
          f"prefixhit={prefixhit.__version__}")
    coord = prefixhit.Coordinator(GROUPS, scheduler_block_size=S, hash_block_size=H,
                                  use_eagle=True)
    layout = pstore.StoreLayout(coord, MODEL)
    n = args.tokens // H

    def digest() -> bytes:
        return rng.getrandbits(256).to_bytes(32, "little")

    roots = [[digest() for _ in range(n)] for _ in range(args.roots)]
    requests = []
    for _ in range(args.requests):
        root = rng.choice(roots)
        cut = rng.randrange(n // 8, n + 1)  # shared prefix, then a new tail
        hashes = root[:cut] + [digest() for _ in range(n - cut)]
        requests.append((args.tokens, hashes))
    keys = [k for root in roots for k in saved_keys(coord, layout, root)]
    keys = list(dict.fromkeys(keys))
    print(f"store: {len(keys)} keys (the saves of {args.roots} whole prompts)")
    results: dict = {}
    index = None
    if not args.no_mirror and prefixhit.mirror_available():
        pairs = list(dict.fromkeys(p for root in roots for p in saved_pairs(coord, root)))
        index, mstats, ingest_s = mirrored_index(pairs)
        print(f"mirror: {len(pairs)} chunks ({mstats['events_stored']} BlockStored events, "
              f"{mstats['messages']} messages) ingested in {ingest_s * 1e3:.1f} ms "
              f"({len(pairs) / ingest_s / 1e6:.2f}M hashes/s incl. the Python publisher), "
              f"index keys {len(index)}")

    memory = set(keys)

    def memory_exist(ks):
        return [1 if k in memory else 0 for k in ks]

    if not args.skip_real:
        from mooncake_fixture import running_store

        with running_store(lease_ttl_ms=1000) as (master, store):
            t = time.perf_counter()
            for i in range(0, len(keys), 8192):
                chunk = keys[i:i + 8192]
                rc = store.put_batch(chunk, [b"x"] * len(chunk))
                assert rc == 0, f"put_batch failed: {rc}"
            print(f"put {len(keys)} keys into mooncake_master in {time.perf_counter() - t:.1f} s")
            run_flows(f"real mooncake_master, {args.requests} requests", coord, layout,
                      store.batch_is_exist, requests, args.repeats, results, index)
            run_flows("real mooncake_master, 1 request", coord, layout, store.batch_is_exist,
                      requests[:1], args.repeats * 3, results, index)

    run_flows(f"in-memory batch_is_exist, {args.requests} requests", coord, layout, memory_exist,
              requests, args.repeats, results, index)
    run_flows("in-memory batch_is_exist, 1 request (the worker-side lookup)", coord, layout,
              memory_exist, requests[:1], args.repeats * 5, results, index)


if __name__ == "__main__":
    main()
