"""Versioned semantics (issue 15), spec identity and max_length past the hashes (issue 10)
through the Python API, on hand-worked examples (the vector folders cover the rest)."""

from __future__ import annotations

import pytest

import prefixhit

FA = {"kind": "full_attention", "block_size": 64, "num_kv_heads": 8, "head_size": 64,
      "dtype": "bfloat16"}
SWA = {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "num_kv_heads": 8,
       "head_size": 64, "dtype": "bfloat16"}


@pytest.mark.parametrize("semantics", ["pr49069", "vllm-0.33"])
def test_issue_10_identity_example(semantics: str) -> None:
    groups = [FA, SWA, dict(SWA, head_size_v=128, eagle=True)]
    coord = prefixhit.Coordinator(groups, 64, 16, use_eagle=True, semantics=semantics)
    assert coord.semantics == semantics
    assert coord.eagle_group_ids == [2]
    assert len(coord.spec_groups) == 3
    masks = coord.store_mask(128, num_prompt_tokens=130)
    assert masks[1] == [False, False, True, True, False, False, True, True]
    assert masks[2] == [False, False, True, True, True, False, True, True]


def test_identity_is_canonical_and_round_trips() -> None:
    a = prefixhit.GroupSpec.from_dict(dict(SWA, kv_quant_mode={"b": (1, 2), "a": None}))
    b = prefixhit.GroupSpec.from_dict(dict(SWA, kv_quant_mode={"a": None, "b": [1, 2]}))
    assert a.identity == b.identity == '{"kv_quant_mode":{"a":null,"b":[1,2]}}'
    assert a.same_spec(b)
    assert not a.same_spec(prefixhit.GroupSpec.from_dict(SWA))
    assert prefixhit.GroupSpec.from_dict(a.to_dict()) == a
    c = prefixhit.GroupSpec("sliding_window", 16, sliding_window=32, num_kv_heads=8, head_size=64,
                            dtype="bfloat16", identity={"kv_quant_mode": {"b": [1, 2], "a": None}})
    assert c == a


@pytest.mark.parametrize("typo", ["blok_size", "Block-Size", "slidingwindow", "eagel"])
def test_typos_of_known_fields_are_errors(typo: str) -> None:
    spec = dict(SWA)
    spec[typo] = 16
    with pytest.raises(prefixhit.InvalidConfigError, match="misspelling"):
        prefixhit.Coordinator([FA, spec], 64, 16)


def test_vllm_033_fields_and_partial_hits() -> None:
    mamba = {"kind": "mamba", "block_size": 32, "mamba_cache_mode": "align", "state_dim": 1}
    fa32 = {"kind": "full_attention", "block_size": 32}
    assert prefixhit.partial_hits_rule([fa32, mamba], 16)
    assert not prefixhit.partial_hits_rule([mamba], 16)
    wide = {"kind": "sliding_window", "block_size": 32, "sliding_window": 64}
    assert not prefixhit.partial_hits_rule([fa32, mamba, wide], 16)
    coord = prefixhit.Coordinator([fa32, mamba, wide], 32, 16, semantics="vllm-0.33")
    assert not coord.enable_partial_hash_hits and coord.lookup_alignment == 32
    forced = prefixhit.Coordinator([fa32, wide], 32, 16, semantics="vllm-0.33",
                                   enable_partial_hash_hits=True)
    assert forced.enable_partial_hash_hits and forced.lookup_alignment == 16
    with pytest.raises(prefixhit.InvalidConfigError, match="contradicts semantics pr49069"):
        prefixhit.Coordinator([fa32, wide], 32, 16, enable_partial_hash_hits=True)
    with pytest.raises(prefixhit.InvalidConfigError, match="semantics"):
        prefixhit.Coordinator([fa32, wide], 32, 16, semantics="vllm-0.34")
    buffer = {"kind": "circular_buffer", "block_size": 8}
    with pytest.raises(prefixhit.InvalidConfigError, match="vllm-0.33"):
        prefixhit.Coordinator([fa32, buffer], 32, 16)
    coord = prefixhit.Coordinator.from_config(
        {"semantics": "vllm-0.33", "hash_block_size": 16, "scheduler_block_size": 32,
         "use_eagle": False, "retention_interval": None, "groups": [fa32, buffer],
         "enable_partial_hash_hits": None})
    assert coord.spec_groups == [[[0], False]]
    hashes = prefixhit.hash_prompt(list(range(64)), hash_block_size=16)
    masks, hit = coord.find_longest_cache_hit(hashes, 64, set())
    assert hit == 0 and masks[1] == []
    extra = dict(SWA, extra_retained_tokens=16)
    merged = prefixhit.Coordinator([FA, extra, dict(SWA, sliding_window=48)], 64, 16,
                                   semantics="vllm-0.33")
    assert merged.spec_groups == [[[0], False], [[1, 2], False]]


def test_max_length_past_the_hashes() -> None:
    hashes = prefixhit.hash_prompt(list(range(64)), hash_block_size=16)  # 4 hashes
    fa = prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16}], 16, 16)
    store = {(0, bytes(h)) for h in hashes}
    masks, hit = fa.find_longest_cache_hit(hashes, 128, store)
    assert hit == 64 and masks[0] == [True] * 4
    swa = prefixhit.Coordinator(
        [{"kind": "sliding_window", "block_size": 16, "sliding_window": 32}], 16, 16)
    with pytest.raises(prefixhit.InvalidArgumentError, match="past the last of the 4 hashes"):
        swa.find_longest_cache_hit(hashes, 128, store)
    with pytest.raises(prefixhit.InvalidArgumentError, match="outside"):
        fa.find_longest_cache_hit(hashes, -1, store)
