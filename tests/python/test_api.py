"""The Python surface: construction spellings, properties, stores, key plans and errors."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

import prefixhit

from helpers import hash_chain, random_config, save

FA64 = {
    "kind": "full_attention",
    "block_size": 64,
    "num_kv_heads": 8,
    "head_size": 128,
    "dtype": "bfloat16",
}
SWA16 = {
    "kind": "sliding_window",
    "block_size": 16,
    "sliding_window": 32,
    "num_kv_heads": 8,
    "head_size": 128,
    "dtype": "bfloat16",
}


def three_groups(**kwargs: object) -> prefixhit.Coordinator:
    return prefixhit.Coordinator(
        [FA64, SWA16, dict(SWA16, eagle=True)], 64, 16, use_eagle=True, **kwargs
    )


def test_dicts_and_group_specs_build_the_same_coordinator() -> None:
    specs = [
        prefixhit.GroupSpec("full_attention", 64, num_kv_heads=8, head_size=128, dtype="bfloat16"),
        prefixhit.GroupSpec(
            "sliding_window", 16, sliding_window=32, num_kv_heads=8, head_size=128, dtype="bfloat16"
        ),
        prefixhit.GroupSpec(
            "sliding_window",
            16,
            True,
            sliding_window=32,
            num_kv_heads=8,
            head_size=128,
            dtype="bfloat16",
        ),
    ]
    a = three_groups()
    b = prefixhit.Coordinator(specs, scheduler_block_size=64, hash_block_size=16, use_eagle=True)
    mixed = prefixhit.Coordinator([specs[0], SWA16, specs[2]], 64, 16, True)
    for c in (b, mixed):
        assert c.spec_groups == a.spec_groups
        assert c.eagle_group_ids == a.eagle_group_ids
        assert c.groups == a.groups
    assert a.groups[2] == specs[2] and a.groups[1] != specs[2]
    assert a.groups[1].same_spec(specs[2])


def test_properties() -> None:
    c = three_groups(retention_interval=128)
    assert c.num_groups == 3
    assert (c.hash_block_size, c.scheduler_block_size, c.use_eagle) == (16, 64, True)
    assert c.retention_interval == 128
    assert c.lookup_alignment == 64 and c.enable_partial_hash_hits is False
    assert c.align_lookup_length(150) == 128 and c.align_lookup_length(-1) == -64
    assert "spec_groups" in repr(c)


def test_spec_groups_compare_with_tuples_and_lists() -> None:
    c = three_groups()
    assert c.spec_groups == [([0], False), ([1, 2], True)]
    assert c.spec_groups == [[[0], False], [[1, 2], True]]
    first = c.spec_groups[0]
    assert first.group_ids == [0] and first.use_eagle is False
    assert first != ([0], True) and hash(first) == hash(prefixhit.SpecGroup([0], False))


def test_partial_hash_hits_change_the_alignment() -> None:
    c = prefixhit.Coordinator(
        [FA64, {"kind": "mamba", "block_size": 64, "mamba_cache_mode": "align", "state_dim": 16}],
        64,
        16,
    )
    assert c.enable_partial_hash_hits and c.lookup_alignment == 16


def test_from_config_matches_the_constructor() -> None:
    config = {
        "hash_block_size": 16,
        "scheduler_block_size": 64,
        "use_eagle": True,
        "retention_interval": None,
        "enable_partial_hash_hits": False,
        "groups": [FA64, SWA16, dict(SWA16, eagle=True)],
    }
    assert prefixhit.Coordinator.from_config(config).spec_groups == three_groups().spec_groups
    with pytest.raises(prefixhit.InvalidConfigError, match="unknown config field"):
        prefixhit.Coordinator.from_config(dict(config, colour="red"))


def test_group_spec_value_semantics() -> None:
    spec = prefixhit.GroupSpec.from_dict(dict(SWA16, eagle=True))
    assert spec.kind == "sliding_window" and spec.sliding_window == 32 and spec.eagle
    assert spec.attention_chunk_size is None and spec.mamba_cache_mode == "none"
    assert prefixhit.GroupSpec.from_dict(spec.to_dict()) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert len({spec, prefixhit.GroupSpec.from_dict(spec.to_dict())}) == 1
    assert "sliding_window=32" in repr(spec)
    with pytest.raises(AttributeError):
        spec.block_size = 32  # type: ignore[misc]


def test_torch_style_dtype_names_are_normalised() -> None:
    class FakeDtype:
        def __str__(self) -> str:
            return "torch.bfloat16"

    assert prefixhit.GroupSpec("full_attention", 16, dtype=FakeDtype()).dtype == "bfloat16"


def test_masks_none_and_empty_differ() -> None:
    c = three_groups()
    assert c.store_mask(0) == [None, [], []]
    assert c.lookup_mask(64) == [None, [False, False, True, True], [False, False, True, True]]
    # start_token moves the first chunk: ceil(40 / 16) = 3.
    tail = [True, True, False, True, True]
    assert c.store_mask(128, start_token=40) == [None, tail, tail]


def test_store_types_agree(seed: int) -> None:
    c = three_groups()
    hashes = hash_chain(16)
    pairs = save(c, hashes, 256)
    rng = random.Random(seed)
    for entry in rng.sample(sorted(pairs), k=3):
        pairs.discard(entry)
    expected = c.find_longest_cache_hit(hashes, 255, pairs)
    index = prefixhit.BlockIndex()
    for gid, key in pairs:
        index.insert(gid, [key], namespace=3)
    stores = {
        "frozenset": frozenset(pairs),
        "dict keys": dict.fromkeys(pairs).keys(),
        "list": list(pairs),
        "generator": (p for p in pairs),
        "KeySet": prefixhit.KeySet(pairs),
    }
    for name, store in stores.items():
        assert c.find_longest_cache_hit(hashes, 255, store) == expected, (seed, name)
    assert c.find_longest_cache_hit(hashes, 255, index, namespace=3) == expected, seed
    assert c.find_longest_cache_hit(hashes, 255, index, namespace=4)[1] == 0
    as_array = np.frombuffer(b"".join(hashes), dtype=np.uint8).reshape(-1, 32)
    assert c.find_longest_cache_hit(as_array, 255, pairs) == expected
    assert c.find_longest_cache_hit(as_array.view("S32").ravel(), 255, pairs) == expected


def test_store_errors_propagate() -> None:
    class Exploding(set):  # type: ignore[type-arg]
        def __contains__(self, item: object) -> bool:
            raise KeyError("store is down")

    c = three_groups()
    with pytest.raises(KeyError, match="store is down"):
        c.find_longest_cache_hit(hash_chain(8), 127, Exploding())


def test_key_plan_answers_a_remote_store(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        config = random_config(rng)
        c = prefixhit.Coordinator.from_config(config)
        hashes = hash_chain(40, salt=bytes([rng.randrange(256)]))
        a = c.lookup_alignment
        store = save(c, hashes, rng.randint(0, 40 * c.hash_block_size // a) * a)
        max_length = rng.randint(0, 41 * c.hash_block_size - 1)
        plan = c.key_plan(hashes, max_length)
        assert len(plan.pairs()) == len(plan) == plan.keys.shape[0]
        assert plan.num_hashes == 40 and plan.keys.shape[1:] == (32,)
        for gid, idx, key in zip(plan.group_ids, plan.hash_indices, plan.keys):
            assert hashes[idx] == key.tobytes() and 0 <= gid < c.num_groups
        answers = plan.answers([pair in store for pair in plan.pairs()])
        try:
            expected = c.find_longest_cache_hit(hashes, max_length, store)
        except prefixhit.PrefixhitError as e:
            with pytest.raises(type(e)):
                c.find_longest_cache_hit(hashes, max_length, answers)
            continue
        assert c.find_longest_cache_hit(hashes, max_length, answers) == expected, (seed, config)
        digests = np.frombuffer(b"".join(hashes), np.uint8).reshape(-1, 32)
        batch = c.find_longest_cache_hits(digests, [0, 40], [max_length], answers)
        assert batch[0] == expected, (seed, config)
    with pytest.raises(ValueError, match="belong to a key plan of 40 hashes"):
        c.find_longest_cache_hit(hashes[:10], 16, answers)
    digests = np.frombuffer(b"".join(hashes), np.uint8).reshape(-1, 32)
    with pytest.raises(ValueError, match="PlanAnswers answer one request's key plan"):
        c.find_longest_cache_hits(digests, [0, 20, 40], [0, 0], answers)


def test_key_set_operations() -> None:
    keys = hash_chain(5)
    ks = prefixhit.KeySet([(0, keys[0])])
    assert ks.add(1, keys[1]) and not ks.add(1, keys[1])
    ks.update([(2, k) for k in keys])
    assert ks.insert(3, np.frombuffer(b"".join(keys), np.uint8).reshape(5, 32)) == 5
    assert ks.insert([4, 5], keys[:2]) == 2
    assert len(ks) == 1 + 1 + 5 + 5 + 2
    assert (2, keys[4]) in ks and (0, keys[1]) not in ks and "junk" not in ks
    ks.clear()
    assert len(ks) == 0


def test_error_classes() -> None:
    c = three_groups()
    with pytest.raises(prefixhit.UnalignedLengthError) as info:
        c.store_mask(100)
    assert info.value.kind == "unaligned_length"
    assert isinstance(info.value, prefixhit.PrefixhitError) and isinstance(info.value, ValueError)
    with pytest.raises(prefixhit.InvalidConfigError) as config_error:
        prefixhit.Coordinator([FA64], 48, 16)
    assert config_error.value.kind == "invalid_config"
    assert "scheduler_block_size (48)" in str(config_error.value)
    local = prefixhit.Coordinator(
        [{"kind": "chunked_local", "block_size": 16, "attention_chunk_size": 64, "eagle": True}],
        16,
        16,
    )
    with pytest.raises(prefixhit.UnsupportedEagleChunkedLocalError) as finder_error:
        local.find_longest_cache_hit(hash_chain(4), 64, set())
    assert isinstance(finder_error.value, prefixhit.UnsupportedLookupError)
    assert finder_error.value.kind == "unsupported_eagle_chunked_local"
    assert local.find_longest_cache_hit(hash_chain(4), 64, set(), apply_eagle=False)[1] == 64
    assert issubclass(prefixhit.BackendUnavailableError, RuntimeError)
    assert issubclass(prefixhit.PrefixhitIOError, OSError)
    assert prefixhit.errors._from_kind("no_such_kind", "x").kind == "no_such_kind"


def test_hash_prompt_is_a_sha256_chain() -> None:
    import hashlib
    import struct

    tokens = list(range(1000, 1050))
    digests = prefixhit.hash_prompt(np.array(tokens, dtype=np.int64), 16)
    assert digests.shape == (3, 32) and digests.dtype == np.uint8  # whole blocks only
    for root in (bytes(32), b"salt" * 8):
        got = prefixhit.hash_prompt(tokens, 16, root=root)
        prev = root
        for i in range(3):
            block = struct.pack("<16i", *tokens[16 * i : 16 * (i + 1)])
            prev = hashlib.sha256(prev + block).digest()
            assert got[i].tobytes() == prev
    # Shared prefixes share digests; the digests feed lookups directly.
    longer = prefixhit.hash_prompt(tokens + [7] * 30, 16)
    np.testing.assert_array_equal(longer[:3], digests)
    with pytest.raises(ValueError):
        prefixhit.hash_prompt(tokens, 0)
    with pytest.raises(ValueError, match="out of range"):
        prefixhit.hash_prompt([1 << 40], 1)
