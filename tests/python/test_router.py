"""Router mode (issue 12) through Python: score_workers equals W independent lookups
(find_longest_cache_hit against each worker's own Python set) on random configurations and
residencies; tiers, namespaces, widths, clear_worker, top_k_workers; bad inputs are typed errors.
score_workers(gpu=True) equals the CPU scorer (skipped without a usable GPU; in the emulated
build, preset emu-python, it runs on tools/cuemu) and is a typed error without one."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

import prefixhit
from prefixhit.errors import BackendUnavailableError, InvalidArgumentError

from conftest import gpu_available, requires_gpu
from helpers import coordinator, hash_chain, random_config, random_requests
from test_batch import flatten


def residency_sets(
    rng: random.Random, pairs: set[tuple[int, bytes]], num_workers: int
) -> list[set[tuple[int, bytes]]]:
    """Each worker's (group_id, key) set: random subsets of the saved pairs, with workers that
    hold everything, nothing, the same set as another worker, or the rest of another's set."""
    ordered = sorted(pairs)
    sets: list[set[tuple[int, bytes]]] = []
    for w in range(num_workers):
        choice = rng.random()
        if choice < 0.15:
            sets.append(set(ordered))
        elif choice < 0.25:
            sets.append(set())
        elif w > 0 and choice < 0.4:
            sets.append(set(rng.choice(sets)))  # identical to an earlier worker
        elif w > 0 and choice < 0.5:
            sets.append(set(ordered) - rng.choice(sets))  # disjoint from an earlier worker
        else:
            keep = rng.choice([0.3, 0.7, 0.9, 0.97])
            sets.append({p for p in ordered if rng.random() < keep})
    return sets


def fill(
    residency: prefixhit.ResidencyIndex,
    sets: list[set[tuple[int, bytes]]],
    namespace: int = 0,
    tier: int = 0,
    width: int = 32,
) -> None:
    for w, pairs in enumerate(sets):
        by_group: dict[int, list[bytes]] = {}
        for gid, key in pairs:
            by_group.setdefault(gid, []).append(key)
        for gid, keys in by_group.items():
            residency.insert(w, gid, keys, tier=tier, namespace=namespace, digest_size=width)


def lookups(
    coord: prefixhit.Coordinator,
    requests: list[list[bytes]],
    lengths: list[int],
    store: set[tuple[int, bytes]],
    flags: list[bool],
) -> list[object]:
    """Each request's (masks, hit_length) on one store, or its error kind."""
    out: list[object] = []
    for hashes, length, flag in zip(requests, lengths, flags):
        try:
            out.append(coord.find_longest_cache_hit(hashes, length, store, apply_eagle=flag))
        except prefixhit.PrefixhitError as e:
            out.append(e.kind)
    return out


def check_scores(
    scores: prefixhit.RouterScores,
    expected: list[list[object]],
    num_groups: int,
    where: str,
) -> None:
    num_workers = len(expected)
    num_requests = len(expected[0]) if expected else 0
    assert scores.hit_lengths.shape == (num_requests, num_workers), where
    assert scores.num_blocks.shape == (num_requests, num_workers, num_groups), where
    assert scores.num_placeholders.shape == scores.num_blocks.shape, where
    for w, per_worker in enumerate(expected):
        for r, result in enumerate(per_worker):
            masks, hit = result  # type: ignore[misc]
            at = f"{where} request {r} worker {w}"
            assert scores.hit_lengths[r, w] == hit, at
            assert scores.num_blocks[r, w].tolist() == [len(m) for m in masks], at
            loaded = scores.num_blocks[r, w] - scores.num_placeholders[r, w]
            assert loaded.tolist() == [sum(m) for m in masks], at


def test_scores_equal_independent_lookups(seed: int) -> None:
    print(f"seed {seed} (replay with PREFIXHIT_SEED={seed})")
    rng = random.Random(seed)
    checked = errors = 0
    for trial in range(30):
        config = random_config(rng)
        coord = coordinator(config)
        requests, lengths, pairs = random_requests(rng, coord, rng.randint(1, 12))
        flags = [rng.random() < 0.8 for _ in requests]
        num_workers = rng.randint(1, 9)
        sets = residency_sets(rng, pairs, num_workers)
        namespace = rng.choice([0, 3])
        residency = prefixhit.ResidencyIndex(num_workers, 2, seed=rng.randrange(1, 2**32))
        fill(residency, sets, namespace=namespace)
        # Keys on another tier and in another namespace must not count.
        decoy = rng.randrange(num_workers)
        fill(residency, [set()] * decoy + [pairs], namespace=namespace, tier=1)
        fill(residency, [pairs] * num_workers, namespace=namespace + 1)
        expected = [lookups(coord, requests, lengths, s, flags) for s in sets]
        digests, offsets = flatten(requests)
        where = f"seed {seed} trial {trial} config {config}"
        kwargs = dict(
            apply_eagle=np.array(flags),
            namespace=namespace,
            tier_mask=1,
            num_threads=rng.choice([0, 1, 2]),
        )
        failing = [r for r in range(len(requests)) if any(isinstance(e[r], str) for e in expected)]
        if failing:
            r = failing[0]
            with pytest.raises(prefixhit.PrefixhitError) as info:
                prefixhit.score_workers(coord, digests, offsets, lengths, residency, **kwargs)
            kinds = {e[r] for e in expected if isinstance(e[r], str)}
            assert info.value.kind in kinds, where
            assert f"request {r}:" in str(info.value), where
            errors += 1
            continue
        scores = prefixhit.score_workers(coord, digests, offsets, lengths, residency, **kwargs)
        assert (scores.num_requests, scores.num_workers) == (len(requests), num_workers)
        assert scores.num_groups == coord.num_groups
        check_scores(scores, expected, coord.num_groups, where)
        checked += 1
        # The decoy worker holds everything on tier 1: with every tier it hits as the full set.
        full = lookups(coord, requests, lengths, pairs, flags)
        every_tier = prefixhit.score_workers(
            coord,
            digests,
            offsets,
            lengths,
            residency,
            apply_eagle=np.array(flags),
            namespace=namespace,
        )
        want_full = [e[1] for e in full]  # type: ignore[index]
        assert every_tier.hit_lengths[:, decoy].tolist() == want_full, where
        # top_k: the reference order, computed here by sorting.
        load = [rng.choice([0.0, 1.0, 2.5]) for _ in range(num_workers)]
        k = rng.randint(1, num_workers + 2)
        top = prefixhit.top_k_workers(scores.hit_lengths, k, load)
        assert top.shape == (len(requests), k) and top.dtype == np.int32
        hits = scores.hit_lengths
        for r in range(len(requests)):
            order = sorted(range(num_workers), key=lambda w: (-hits[r, w], load[w], w))
            want = (order + [-1] * k)[:k]
            assert top[r].tolist() == want, where
        assert np.array_equal(prefixhit.top_k_workers(scores, k, load), top)
    print(f"{checked} trials scored, {errors} raised the first failing request's error")


def test_clear_worker_and_erase(seed: int) -> None:
    rng = random.Random(seed)
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    chain = hash_chain(20, salt=rng.randbytes(4))
    residency = prefixhit.ResidencyIndex(4)
    for w in range(4):
        keys = np.frombuffer(b"".join(chain[: 5 * (w + 1)]), np.uint8).reshape(-1, 32)
        residency.insert(w, 0, keys)
    assert len(residency) == 20
    digests, offsets = flatten([chain])
    hits = prefixhit.score_workers(coord, digests, offsets, 20 * 16, residency).hit_lengths
    assert hits.tolist() == [[80, 160, 240, 320]]
    residency.clear_worker(3)
    residency.all_blocks_cleared(1)
    assert residency.erase(2, 0, chain[4]) == 1  # a hole: bytes of one key
    assert residency.erase(2, 0, [chain[4]]) == 0
    hits = prefixhit.score_workers(coord, digests, offsets, 20 * 16, residency).hit_lengths
    assert hits.tolist() == [[80, 0, 64, 0]]
    assert residency.contains(2, 0, chain[3:6]).tolist() == [True, False, True]
    memory = residency.memory()
    assert memory["keys"] == len(residency) == 15  # chain[:15] minus the hole, plus none
    assert memory["pairs"] == 5 + 14
    residency.clear()
    assert len(residency) == 0


@pytest.mark.parametrize("width", [8, 16])
def test_narrow_digests(width: int, seed: int) -> None:
    rng = random.Random(seed)
    coord = prefixhit.Coordinator(
        [{"kind": "full_attention", "block_size": 16}], 16, 16, digest_size=width
    )
    chain = [h[:width] for h in hash_chain(12, salt=rng.randbytes(4))]
    residency = prefixhit.ResidencyIndex(2)
    cut = rng.randint(0, 12)
    residency.insert(0, 0, b"".join(chain[:cut]), digest_size=width)
    # The same bytes zero-padded to 32 are another key: worker 1 must not hit.
    residency.insert(1, 0, [h + bytes(32 - width) for h in chain])
    offsets = np.array([0, len(chain)])
    hits = prefixhit.score_workers(coord, b"".join(chain), offsets, [12 * 16], residency)
    assert hits.hit_lengths.tolist() == [[cut * 16, 0]]


def test_scoring_runs_without_the_gil(seed: int) -> None:
    """Writers on other threads keep going while score_workers runs (no deadlock, no crash)."""
    rng = random.Random(seed)
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    chains = [hash_chain(256, salt=rng.randbytes(4)) for _ in range(4)]
    residency = prefixhit.ResidencyIndex(8)
    stop = threading.Event()

    def writer(w: int) -> None:
        while not stop.is_set():
            keys = rng.choice(chains)[: rng.randint(0, 256)]
            residency.insert(w, 0, keys)
            residency.erase(w, 0, keys[len(keys) // 2 :])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    try:
        digests, offsets = flatten(chains * 8)
        for _ in range(20):
            scores = prefixhit.score_workers(coord, digests, offsets, 256 * 16, residency)
            assert scores.hit_lengths.shape == (32, 8)
            assert (scores.hit_lengths[:, 2:] == 0).all()
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_bad_inputs_are_typed_errors() -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    residency = prefixhit.ResidencyIndex(2, 2)
    key = bytes(32)
    bad_calls = [
        lambda: prefixhit.ResidencyIndex(0),
        lambda: prefixhit.ResidencyIndex(2, 5),
        lambda: residency.insert(2, 0, [key]),
        lambda: residency.insert(-1, 0, [key]),
        lambda: residency.insert(0, 32, [key]),
        lambda: residency.insert(0, -1, [key]),
        lambda: residency.insert(0, 0, [key], tier=2),
        lambda: residency.insert(0, 0, [key], namespace=-1),
        lambda: residency.insert(0, 0, [key], digest_size=12),
        lambda: residency.insert(0, 0, [bytes(31)]),
        lambda: residency.insert(0, 0, [bytes(16)], digest_size=8),
        lambda: residency.erase(5, 0, [key]),
        lambda: residency.contains(0, 0, [key], tier_mask=-1),
        lambda: residency.clear_worker(2),
        lambda: prefixhit.score_workers(coord, [key], [0, 2], [16], residency),
        lambda: prefixhit.score_workers(coord, [key], [0, 1], [16, 16], residency),
        lambda: prefixhit.score_workers(coord, [key], [0, 1], [16], residency, namespace=-1),
        lambda: prefixhit.score_workers(coord, [key], [0, 1], [16], residency, tier_mask=2**33),
        lambda: prefixhit.score_workers(
            coord, [key], [0, 1], [16], residency, apply_eagle=[True, False]
        ),
        lambda: prefixhit.top_k_workers(np.zeros((2, 3), np.int64), 0),
        lambda: prefixhit.top_k_workers(np.zeros(3, np.int64), 1),
        lambda: prefixhit.top_k_workers(np.zeros((2, 3)), 1),
        lambda: prefixhit.top_k_workers(np.zeros((2, 3), np.int64), 1, [1.0, 2.0]),
        lambda: prefixhit.top_k_workers(np.zeros((2, 3), np.int64), 1, [1.0, float("nan"), 0.0]),
    ]
    for i, call in enumerate(bad_calls):
        with pytest.raises(InvalidArgumentError):
            call()
            pytest.fail(f"bad call {i} did not raise")
    # A failed bulk call applied nothing.
    assert len(residency) == 0
    with pytest.raises(TypeError):
        prefixhit.score_workers(coord, [key], [0, 1], [16], residency={"not": "an index"})


@requires_gpu
def test_gpu_scores_equal_the_cpu_scorer(seed: int) -> None:
    print(f"seed {seed} (replay with PREFIXHIT_SEED={seed})")
    rng = random.Random(seed)
    compared = errors = classes = rows = 0
    for trial in range(20):
        config = random_config(rng)
        coord = coordinator(config)
        requests, lengths, pairs = random_requests(rng, coord, rng.randint(1, 8))
        flags = [rng.random() < 0.8 for _ in requests]
        num_workers = rng.choice([1, 3, 9, 70])
        residency = prefixhit.ResidencyIndex(num_workers, 2, seed=rng.randrange(1, 2**32))
        fill(residency, residency_sets(rng, pairs, num_workers), tier=rng.randrange(2))
        digests, offsets = flatten(requests)
        kwargs = dict(apply_eagle=np.array(flags), tier_mask=rng.choice([1, 3]))
        where = f"seed {seed} trial {trial} config {config}"
        try:
            cpu = prefixhit.score_workers(coord, digests, offsets, lengths, residency, **kwargs)
        except prefixhit.PrefixhitError as e:
            # Same kind, same message (it names the request) on the GPU.
            with pytest.raises(type(e)) as info:
                prefixhit.score_workers(
                    coord, digests, offsets, lengths, residency, gpu=True, **kwargs
                )
            assert str(info.value) == str(e), where
            errors += 1
            continue
        got = prefixhit.score_workers(
            coord, digests, offsets, lengths, residency, gpu=True, **kwargs
        )
        assert (got.num_requests, got.num_workers, got.num_groups) == (
            cpu.num_requests,
            cpu.num_workers,
            cpu.num_groups,
        ), where
        for name in ("hit_lengths", "num_blocks", "num_placeholders"):
            a, b = getattr(got, name), getattr(cpu, name)
            assert a.dtype == np.int64 and a.shape == b.shape, where
            assert np.array_equal(a, b), f"{where}: {name}"
        # One GPU thread per (request, worker class).
        assert len(requests) <= got.classes <= len(requests) * num_workers, where
        classes += got.classes
        rows += len(requests) * num_workers
        compared += 1
    assert compared > 0
    print(f"{compared} batches equal, {errors} errors equal; {classes} classes for {rows} rows")


@pytest.mark.skipif(gpu_available(), reason="checks the refusal without a usable GPU")
def test_gpu_scoring_without_a_gpu_is_a_typed_error() -> None:
    coord = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    residency = prefixhit.ResidencyIndex(2)
    digests, offsets = flatten([hash_chain(2, b"r")])
    with pytest.raises(BackendUnavailableError, match="gpu=True"):
        prefixhit.score_workers(coord, digests, offsets, 32, residency, gpu=True)
