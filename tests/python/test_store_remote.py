"""prefixhit.store: vLLM's store keys, and remote mode against a real Mooncake store.

Prompts are saved the way vLLM's store worker saves them (store_mask chunks, one key per rank
namespace, vLLM's key format); holes, evictions (`remove`) and `remove_all` change the store.
Remote mode (one round and multi-round, batch and worker flow) must then give the hit lengths
and masks of a plain set of the same (group, digest) pairs.
"""

from __future__ import annotations

import os
import random
import time

import numpy as np
import pytest
from mooncake_fixture import require_mooncake, running_store

import prefixhit
from prefixhit import store as pstore

CONFIGS = {
    # dsv4-flash's shape with a small scheduler block (fast enough for a test).
    "dsv4-like": dict(
        groups=[
            {"kind": "full_attention", "block_size": 64},
            {"kind": "sliding_window", "block_size": 16, "sliding_window": 32},
            {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "eagle": True,
             "head_size": 1},
            {"kind": "sliding_window", "block_size": 4, "sliding_window": 8},
        ],
        scheduler_block_size=64, hash_block_size=4, use_eagle=True,
    ),
    "fa-mamba-align": dict(
        groups=[
            {"kind": "full_attention", "block_size": 32},
            {"kind": "mamba", "block_size": 32, "mamba_cache_mode": "align"},
        ],
        scheduler_block_size=32, hash_block_size=8,
    ),
    "fa-swa-tp": dict(
        groups=[
            {"kind": "mla_attention", "block_size": 32},
            {"kind": "sliding_window", "block_size": 16, "sliding_window": 48},
        ],
        scheduler_block_size=32, hash_block_size=16,
    ),
}
LAYOUTS = {
    "dsv4-like": dict(),
    "fa-mamba-align": dict(cache_prefix="tenant-a"),
    "fa-swa-tp": dict(tp_size=4, pp_size=2, num_kv_heads=2),
}


class MemoryStore:
    """An in-memory batch_is_exist over a set of key strings."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.calls = 0

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        self.calls += 1
        return [1 if k in self.keys else 0 for k in keys]


def make_prompts(rng: random.Random, coord, count: int) -> list[list[bytes]]:
    """Hash chains that share prefixes: branches of a few roots."""
    h = coord.hash_block_size
    roots = [[rng.randrange(50000) for _ in range(h * rng.randint(8, 40))] for _ in range(2)]
    prompts = []
    for _ in range(count):
        root = rng.choice(roots)
        cut = rng.randint(0, len(root))
        tokens = root[:cut] + [rng.randrange(50000) for _ in range(rng.randint(0, 6 * h))]
        prompts.append([bytes(d) for d in prefixhit.hash_prompt(np.array(tokens, np.int32), h)])
    return prompts


def saved_pairs(coord, hashes: list[bytes]) -> set[tuple[int, bytes]]:
    """The (group, digest) pairs vLLM's save of a whole prompt writes (store_mask chunks)."""
    h = coord.hash_block_size
    aligned = coord.align_lookup_length(len(hashes) * h)
    masks = coord.store_mask(aligned, 0, len(hashes) * h)
    out = set()
    for g, mask in enumerate(masks):
        block = coord.groups[g].block_size
        keys = coord.chunk_keys(hashes, block)
        for j in range(aligned // block):
            if mask is None or mask[j]:
                out.add((g, keys[j]))
    return out


def reference_worker(coord, hashes: list[bytes], num_tokens: int, present: set) -> int:
    """vLLM's worker flow against a plain set."""
    token_len = coord.align_lookup_length(num_tokens)
    if not hashes or token_len <= 0:
        return 0
    _, hit = coord.find_longest_cache_hit(hashes, token_len, present)
    if hit >= num_tokens:
        usable = coord.align_lookup_length(num_tokens - 1)
        if usable <= 0:
            return 0
        _, hit = coord.find_longest_cache_hit(hashes, usable, present)
    return hit


def check_all_modes(store, coord, layout, prompts, present, rng, note) -> None:
    h = coord.hash_block_size
    digests = [d for p in prompts for d in p]
    offsets = np.cumsum([0] + [len(p) for p in prompts])
    max_lengths = [rng.randint(0, len(p) * h + h - 1) for p in prompts]
    expected = coord.find_longest_cache_hits(digests, offsets, max_lengths, present)
    num_tokens = [len(p) * h + rng.randint(0, h - 1) for p in prompts]
    expected_hits = [reference_worker(coord, p, t, present) for p, t in zip(prompts, num_tokens)]
    for multi in (False, True):
        stats: dict = {}
        got = pstore.remote_lookup(store, coord, layout, digests, offsets, max_lengths,
                                   multi_round=multi, stats=stats)
        what = f"{note} multi_round={multi} stats={stats}"
        assert got.hit_lengths.tolist() == expected.hit_lengths.tolist(), what
        assert got.num_blocks.tolist() == expected.num_blocks.tolist(), what
        assert got.num_placeholders.tolist() == expected.num_placeholders.tolist(), what
        for r in range(len(prompts)):
            assert got.masks(r) == expected.masks(r), f"{what} request {r}"
        hits = pstore.worker_lookups(store, coord, layout, list(zip(num_tokens, prompts)),
                                     multi_round=multi)
        assert hits == expected_hits, what
        for r in range(min(3, len(prompts))):
            assert pstore.worker_lookup(store, coord, layout, num_tokens[r], prompts[r],
                                        multi_round=multi) == expected_hits[r], what


def put_pairs(store, layout, pairs, rng, *, partial_rate=0.0) -> set:
    """Puts every namespace key of the pairs; a few miss one namespace. Returns what is present."""
    present = set()
    keys = []
    for g, d in pairs:
        ks = layout.keys(g, d)
        if len(ks) > 1 and rng.random() < partial_rate:
            ks = ks[1:]  # one rank never saved it: absent under the all-namespaces rule
        else:
            present.add((g, d))
        keys.extend(ks)
    if hasattr(store, "put_batch"):
        rc = store.put_batch(keys, [b"x"] * len(keys))
        assert rc == 0, f"put_batch failed: {rc}"
    else:
        store.keys.update(keys)
    return present


def remove_pairs(store, layout, pairs) -> None:
    for g, d in pairs:
        for k in layout.keys(g, d):
            if hasattr(store, "remove"):
                rc = store.remove(k)
                assert rc == 0, f"remove({k}) failed: {rc}"
            else:
                store.keys.discard(k)


def run_scenario(store, seed: int, name: str, lease_s: float = 0.0) -> None:
    rng = random.Random(seed)
    coord = prefixhit.Coordinator(**CONFIGS[name])
    layout = pstore.StoreLayout(coord, "DeepSeek-V4-Flash", **LAYOUTS[name])
    prompts = make_prompts(rng, coord, 6)
    written = set()
    for p in rng.sample(prompts, 3):  # some prompts were saved, the others are new
        written |= saved_pairs(coord, p)
    holes = {pair for pair in written if rng.random() < 0.05}
    present = put_pairs(store, layout, sorted(written - holes), rng, partial_rate=0.03)
    note = f"seed={seed} config={name}"
    check_all_modes(store, coord, layout, prompts, present, rng, note + " (holes)")

    # Evictions: remove some blocks (after the lease that protects a fresh put).
    time.sleep(lease_s)
    evicted = {pair for pair in present if rng.random() < 0.1}
    remove_pairs(store, layout, sorted(evicted))
    present -= evicted
    check_all_modes(store, coord, layout, prompts, present, rng, note + " (evictions)")

    # remove_all: nothing is left.
    time.sleep(lease_s)
    if hasattr(store, "remove_all"):
        store.remove_all()
    else:
        store.keys.clear()
    check_all_modes(store, coord, layout, prompts, set(), rng, note + " (remove_all)")


def test_store_keys_format_and_parse() -> None:
    coord = prefixhit.Coordinator(**CONFIGS["fa-swa-tp"])
    layout = pstore.StoreLayout(coord, "m", cache_prefix="tenant", **LAYOUTS["fa-swa-tp"])
    digest = bytes(range(32))
    # MLA: one TP namespace; the window group: tp 4 / (4 // 2 heads) = 2 TP shards, x 2 pp.
    assert layout.namespaces[0] == [(0, 0, 0, 0), (0, 0, 0, 1)]
    assert len(layout.namespaces[1]) == 4
    key = layout.key(1, digest, (1, 0, 0, 1))
    assert key == "tenant@m@tp_rank:1@pcp0@dcp0@pp_rank:1@group:1@" + digest.hex()
    parsed = pstore.parse_store_key(key)
    assert parsed == {"cache_prefix": "tenant", "model_name": "m", "namespace": (1, 0, 0, 1),
                      "has_group": True, "group_id": 1, "digest": digest}
    assert pstore.parse_store_key("12345") is None
    with pytest.raises(prefixhit.InvalidArgumentError):
        pstore.StoreLayout(coord, "")
    with pytest.raises(TypeError, match="batch_is_exist"):
        pstore.worker_lookup(object(), coord, layout, 64, [digest] * 4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_remote_mode_against_an_in_memory_store(seed: int, name: str) -> None:
    run_scenario(MemoryStore(), seed, name)


def test_remote_lookup_asks_one_call_per_round(seed: int) -> None:
    rng = random.Random(seed)
    coord = prefixhit.Coordinator(**CONFIGS["dsv4-like"])
    layout = pstore.StoreLayout(coord, "m")
    h = coord.hash_block_size
    # make_prompts may draw only prompts shorter than one scheduler block (nothing to ask): one
    # prompt of 40 hash blocks makes sure there is (seed 3493471871 drew none).
    long_prompt = prefixhit.hash_prompt(np.array([rng.randrange(50000) for _ in range(40 * h)],
                                                 np.int32), h)
    prompts = make_prompts(rng, coord, 8) + [[bytes(d) for d in long_prompt]]
    store = MemoryStore()
    for p in prompts:
        put_pairs(store, layout, saved_pairs(coord, p), rng)
    stats: dict = {}
    pstore.worker_lookups(store, coord, layout, [(len(p) * h, p) for p in prompts],
                          multi_round=False, stats=stats)
    assert stats["candidates_total"] > 0
    assert store.calls == stats["rounds"] == 1
    # Shared prefixes are asked once for the whole batch.
    assert stats["candidates_asked"] <= stats["candidates_total"]
    multi: dict = {}
    store.calls = 0
    pstore.worker_lookups(store, coord, layout, [(len(p) * h, p) for p in prompts],
                          multi_round=True, stats=multi)
    assert store.calls == multi["rounds"] >= 1
    assert multi["keys_asked"] <= stats["keys_asked"]
    # A batch with nothing to ask (every prompt shorter than a scheduler block) calls no one.
    short = [p[: coord.scheduler_block_size // h - 1] for p in prompts]
    for multi_round in (False, True):
        nothing: dict = {}
        store.calls = 0
        hits = pstore.worker_lookups(store, coord, layout, [(len(p) * h, p) for p in short],
                                     multi_round=multi_round, stats=nothing)
        assert store.calls == nothing["rounds"] == nothing["candidates_total"] == 0
        assert list(hits) == [0] * len(short)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_remote_mode_against_the_real_mooncake_store(seed: int, name: str) -> None:
    require_mooncake()
    lease_ms = 300
    with running_store(lease_ttl_ms=lease_ms) as (_master, store):
        run_scenario(store, seed, name, lease_s=lease_ms / 1000 + 0.1)


def test_answers_reach_the_gpu_engine(seed: int) -> None:
    if not prefixhit.build_info().get("gpu_available"):
        pytest.skip(f"no usable CUDA device ({prefixhit.build_info()['device']})")
    rng = random.Random(seed)
    coord = prefixhit.Coordinator(**CONFIGS["dsv4-like"])
    layout = pstore.StoreLayout(coord, "m")
    prompts = make_prompts(rng, coord, 6)
    store = MemoryStore()
    present = set()
    for p in prompts[:3]:
        present |= put_pairs(store, layout, saved_pairs(coord, p), rng)
    digests = [d for p in prompts for d in p]
    offsets = np.cumsum([0] + [len(p) for p in prompts])
    max_lengths = [len(p) * 4 for p in prompts]
    cpu = pstore.remote_lookup(store, coord, layout, digests, offsets, max_lengths)
    gpu = pstore.remote_lookup(store, coord, layout, digests, offsets, max_lengths, gpu=True)
    assert gpu.hit_lengths.tolist() == cpu.hit_lengths.tolist()
    assert gpu.num_blocks.tolist() == cpu.num_blocks.tolist()
    assert gpu.num_placeholders.tolist() == cpu.num_placeholders.tolist()
