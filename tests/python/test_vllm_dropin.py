"""prefixhit.vllm against vLLM-shaped objects: the coordinator-test scenarios of vLLM (re-created
from SEMANTICS.md and the issue text) run with nothing but the import swap."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import prefixhit
from prefixhit import vllm as drop_in
from prefixhit.vllm import ExternalCachedBlockPool, MooncakeStoreCoordinator

from helpers import hash_chain
from vllm_shapes import (
    FA,
    SWA,
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    UniformTypeKVCacheSpecs,
    groups,
)


def _core_has_semantics() -> bool:
    try:
        prefixhit.Coordinator.from_config(
            {"groups": [{"kind": "full_attention", "block_size": 16, "x.identity": 1}],
             "scheduler_block_size": 16, "hash_block_size": 16, "semantics": "pr49069"})
    except prefixhit.InvalidConfigError:
        return False
    return True


# The drop-in passes "semantics" and identity keys to the core (issues 10/15); until the core
# takes them these tests cannot run.
pytestmark = pytest.mark.skipif(
    not _core_has_semantics(),
    reason="the core Coordinator does not take 'semantics' / identity keys yet",
)

BOTH = ("pr49069", "vllm-0.33")
F, T = False, True


def save(coord: MooncakeStoreCoordinator, hashes: list[bytes], length: int,
         num_prompt_tokens: int | None = None) -> set[tuple[int, bytes]]:
    """What vLLM's store worker writes for tokens [0, length): per group the chunks its store
    mask keeps, keyed by block_hashes_for_spec."""
    out: set[tuple[int, bytes]] = set()
    masks = coord.store_mask(length, 0, num_prompt_tokens)
    for gid, (g, mask) in enumerate(zip(coord.kv_cache_groups, masks)):
        keys = coord.block_hashes_for_spec(hashes, g.kv_cache_spec)
        n = length // g.kv_cache_spec.block_size
        for i in range(n):
            if mask is None or mask[i]:
                out.add((gid, keys[i]))
    return out


@pytest.mark.parametrize("semantics", BOTH)
def test_spec_identity_example_of_issue_10(semantics: str) -> None:
    coord = MooncakeStoreCoordinator(
        groups(FA(64, num_kv_heads=8, head_size=64, dtype="bfloat16"), SWA(16, 32),
               SWA(16, 32, head_size_v=128), eagle=(2,)),
        scheduler_block_size=64, hash_block_size=16, use_eagle=True, semantics=semantics)
    assert coord.eagle_group_ids == {2}
    assert isinstance(coord.eagle_group_ids, set)
    assert len(coord.attention_groups) == 3
    assert coord.store_mask(128, num_prompt_tokens=130)[1] == [F, F, T, T, F, F, T, T]


@pytest.mark.parametrize("semantics", BOTH)
def test_merged_eagle_flags(semantics: str) -> None:
    coord = MooncakeStoreCoordinator(
        groups(FA(64), SWA(16, 32), SWA(16, 32), eagle=(2,)), 64, 16, use_eagle=True,
        semantics=semantics)
    assert [ids for _, ids, _ in coord.attention_groups] == [[0], [1, 2]]
    assert coord.eagle_group_ids == {1, 2}
    assert coord.eagle_attn_group_indices == {1}
    spec, ids, kind = coord.attention_groups[1]
    assert spec == SWA(16, 32) and kind == "sliding_window"


@pytest.mark.parametrize("semantics", BOTH)
def test_attributes_and_types(semantics: str) -> None:
    gs = groups(FA(64), SWA(16, 32))
    coord = MooncakeStoreCoordinator(gs, 64, 16, semantics=semantics)
    assert coord.kv_cache_groups == gs
    assert coord.hash_block_size == 16 and coord.lcm_block_size == 64
    assert coord.use_eagle is False and coord.eagle_group_ids == set()
    assert coord.enable_partial_hash_hits is False
    assert coord.align_lookup_length(200) == 192
    hashes = hash_chain(12)
    masks, hit = coord.find_longest_cache_hit(hashes, 191, ExternalCachedBlockPool(16, set()))
    assert isinstance(masks, tuple) and isinstance(hit, int) and hit == 0
    assert masks == ([], [])
    assert isinstance(coord.store_mask(128), tuple) and isinstance(coord.lookup_mask(128), tuple)
    assert isinstance(coord.load_mask(hashes, 128), tuple)
    assert coord.lookup_mask(128) == (None, [F, F, T, T, F, F, T, T])
    assert coord.block_hashes_for_spec(hashes, FA(64)) == [hashes[3], hashes[7], hashes[11]]
    assert coord.block_hashes_for_spec(hashes, SWA(16, 32)) == hashes
    if semantics == "vllm-0.33":
        assert coord.mamba_group_ids == set()
        assert coord.eagle_proof_margin_by_group == {}


@pytest.mark.parametrize("semantics", BOTH)
def test_sliding_window_examples(semantics: str) -> None:
    coord = MooncakeStoreCoordinator(groups(SWA(16, 32)), 16, 16, semantics=semantics)
    hashes = hash_chain(8)
    pool = ExternalCachedBlockPool(16, {(0, hashes[i]) for i in (0, 1, 2, 4, 5)})
    masks, hit = coord.find_longest_cache_hit(hashes, 128, pool)
    assert (masks, hit) == (([F, F, F, F, T, T],), 96)
    pool = ExternalCachedBlockPool(16, {(0, hashes[i]) for i in (0, 2, 4, 7)})
    assert coord.find_longest_cache_hit(hashes, 128, pool) == (([T],), 16)
    # A plain set and vLLM's own pool object work as the store too.
    assert coord.find_longest_cache_hit(hashes, 128, pool._exists)[1] == 16

    class VllmPool:  # only get_cached_block, as vLLM's BlockPool
        def get_cached_block(self, block_hash, group_ids):
            return [object()] if all((g, bytes(block_hash)) in pool._exists
                                     for g in group_ids) else None

    assert coord.find_longest_cache_hit(hashes, 128, VllmPool())[1] == 16


def test_dsv4_round_trip_pr49069() -> None:
    coord = MooncakeStoreCoordinator(
        groups(FA(256), SWA(64, 128), SWA(64, 128), SWA(4, 8), SWA(8, 128), eagle=(2,)),
        256, 4, use_eagle=True, semantics="pr49069")
    assert [ids for _, ids, _ in coord.attention_groups] == [[0], [1, 2], [3], [4]]
    hashes = hash_chain(768 // 4)
    stored = save(coord, hashes, 768)
    pool = ExternalCachedBlockPool(4, stored)
    masks, hit = coord.find_longest_cache_hit(hashes, 768, pool)
    assert hit == 512
    assert masks[0] == [T, T]
    # load_mask uses apply_eagle=False against an all-present pool.
    assert coord.load_mask(hashes, hit) == coord.find_longest_cache_hit(
        hashes, hit, ExternalCachedBlockPool(4), apply_eagle=False)[0]


@pytest.mark.parametrize("semantics", BOTH)
def test_vllm_errors_are_assertion_errors(semantics: str) -> None:
    with pytest.raises(AssertionError):
        MooncakeStoreCoordinator(groups(FA(24)), 48, 16, semantics=semantics)
    with pytest.raises(prefixhit.InvalidConfigError):
        MooncakeStoreCoordinator(groups(FA(16)), 40, 16, semantics=semantics)
    coord = MooncakeStoreCoordinator(groups(FA(64), SWA(16, 32)), 64, 16, semantics=semantics)
    with pytest.raises(AssertionError):
        coord.store_mask(100)
    with pytest.raises(prefixhit.UnalignedLengthError):
        coord.lookup_mask(100)
    chunked = MooncakeStoreCoordinator(
        groups(ChunkedLocalAttentionSpec(block_size=16, attention_chunk_size=64)), 16, 16,
        use_eagle=True, semantics=semantics)
    with pytest.raises(AssertionError):
        chunked.find_longest_cache_hit(hash_chain(4), 64, set())
    with pytest.raises(prefixhit.errors.UnsupportedEagleChunkedLocalError):
        chunked.find_longest_cache_hit(hash_chain(4), 64, set())
    with pytest.raises(prefixhit.InvalidConfigError, match="semantics"):
        MooncakeStoreCoordinator(groups(FA(16)), 16, 16, semantics="0.34")


def test_every_field_is_identity() -> None:
    for a, b in [
        (MLAAttentionSpec(block_size=16, compress_ratio=1), MLAAttentionSpec(block_size=16,
                                                                            compress_ratio=4)),
        (FA(16, page_size_padded=None), FA(16, page_size_padded=4096)),
        (MambaSpec(block_size=16, shapes=((1, 2),)), MambaSpec(block_size=16, shapes=((2, 2),))),
        (MambaSpec(block_size=16, dtypes=("float16",)), MambaSpec(block_size=16,
                                                                  dtypes=("float32",))),
    ]:
        coord = MooncakeStoreCoordinator(groups(a, b), 16, 16)
        assert len(coord.attention_groups) == 2, (a, b)
        same = MooncakeStoreCoordinator(groups(a, a), 16, 16)
        assert len(same.attention_groups) == 1


def test_kinds_and_wrappers() -> None:
    inner = FA(32)
    wrapped = UniformTypeKVCacheSpecs(block_size=32, kv_cache_specs={"layer.0": inner})
    coord = MooncakeStoreCoordinator(
        groups(wrapped, SlidingWindowMLASpec(block_size=16, sliding_window=32),
               MambaSpec(block_size=64, mamba_cache_mode="align")), 64, 16)
    kinds = sorted(kind for _, _, kind in coord.attention_groups)
    assert kinds == ["full_attention", "mamba", "sliding_window_mla"]
    assert coord.attention_groups[0][0] == inner  # unwrapped for lookup logic
    assert coord.mamba_group_ids == {2}
    # A circular buffer is not prefix-cacheable under 0.33: no spec group, [] from lookups.
    coord = MooncakeStoreCoordinator(groups(FA(16), CircularBufferSpec(block_size=8)), 16, 16)
    assert [ids for _, ids, _ in coord.attention_groups] == [[0]]
    masks, _ = coord.find_longest_cache_hit(hash_chain(2), 32, set())
    assert masks[1] == []


def test_from_kv_cache_config_duck_typed() -> None:
    class SpecConfig:
        method = "eagle"

    class VllmConfig:
        speculative_config = SpecConfig()
        cache_config = type("C", (), {"retention_interval": None})()

    class KVCacheConfig:
        kv_cache_groups = groups(FA(64), SWA(16, 32), eagle=(1,))

    coord = MooncakeStoreCoordinator.from_kv_cache_config(KVCacheConfig(), VllmConfig(), 64, 16)
    assert coord.use_eagle and coord.eagle_group_ids == {1}
    assert coord.eagle_proof_margin_by_group == {1: 16}


def test_flat_buffer_and_hit_length_only() -> None:
    coord = MooncakeStoreCoordinator(groups(FA(16)), 16, 16)
    hashes = hash_chain(8)
    store = {(0, h) for h in hashes}
    flat = b"".join(hashes)
    assert coord.find_longest_cache_hit(flat, 127, store)[1] == 112
    assert coord.find_longest_cache_hit_length(memoryview(flat), 127, store) == 112
    assert isinstance(coord.find_longest_cache_hit(hashes, 127, store)[0][0], Sequence)


def test_drop_in_module_needs_no_vllm() -> None:
    import sys

    assert not any(name == "vllm" or name.startswith("vllm.") for name in sys.modules)
    assert drop_in.MooncakeStoreCoordinator is MooncakeStoreCoordinator


def test_public_names_keep_their_home() -> None:
    # The errors, spec reading and pools live in private modules; every public name is still
    # imported (and pickled, and shown in tracebacks) from prefixhit.vllm, with the same bases.
    import pickle

    errs = prefixhit.errors
    bases = {
        "VllmAssertionError": (errs.PrefixhitError, AssertionError),
        "VllmConfigAssertionError": (errs.InvalidConfigError, AssertionError),
        "VllmUnalignedLengthAssertionError": (errs.UnalignedLengthError, AssertionError),
        "VllmEagleChunkedLocalAssertionError": (
            errs.UnsupportedEagleChunkedLocalError, AssertionError),
        "VllmAlignmentChunkedLocalAssertionError": (
            errs.UnsupportedAlignmentChunkedLocalError, AssertionError),
        "VllmAlignmentSlidingWindowAssertionError": (
            errs.UnsupportedAlignmentSlidingWindowError, AssertionError),
    }
    others = {"ExternalCachedBlockPool", "MooncakeStoreCoordinator", "group_dict_from_vllm"}
    assert sorted(drop_in.__all__) == sorted(set(bases) | others)
    for name in drop_in.__all__:
        obj = getattr(drop_in, name)
        assert obj.__module__ == "prefixhit.vllm", name
        assert pickle.loads(pickle.dumps(obj)) is obj, name
    for name, want in bases.items():
        assert getattr(drop_in, name).__bases__ == want, name
    with pytest.raises(drop_in.VllmConfigAssertionError) as info:
        MooncakeStoreCoordinator(groups(FA(24)), 48, 16)
    clone = pickle.loads(pickle.dumps(info.value))
    assert type(clone) is drop_in.VllmConfigAssertionError
    assert str(clone) == str(info.value)


def _reference():
    import sys

    from vector_runner import REPO_ROOT

    sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "reference"))
    import mooncake_reference

    return mooncake_reference


ROUND_TRIPS = {
    # name: (vLLM-shaped specs, the same as vector dicts, eagle ids, S, H)
    "3-group eagle": (
        [FA(64), SWA(16, 32), SWA(16, 32)],
        [{"kind": "full_attention", "block_size": 64, "num_kv_heads": 8, "head_size": 64},
         {"kind": "sliding_window", "block_size": 16, "sliding_window": 32},
         {"kind": "sliding_window", "block_size": 16, "sliding_window": 32}],
        (2,), 64, 16),
    "dsv4": (
        [FA(256), SWA(64, 128), SWA(64, 128), SWA(4, 8), SWA(8, 128)],
        [{"kind": "full_attention", "block_size": 256},
         {"kind": "sliding_window", "block_size": 64, "sliding_window": 128},
         {"kind": "sliding_window", "block_size": 64, "sliding_window": 128},
         {"kind": "sliding_window", "block_size": 4, "sliding_window": 8},
         {"kind": "sliding_window", "block_size": 8, "sliding_window": 128}],
        (2,), 256, 4),
    "fa-mamba-align": (
        [FA(64), MambaSpec(block_size=64, mamba_cache_mode="align")],
        [{"kind": "full_attention", "block_size": 64},
         {"kind": "mamba", "block_size": 64, "mamba_cache_mode": "align"}],
        (), 64, 16),
}


@pytest.mark.parametrize("semantics", BOTH)
@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_save_then_lookup_matches_the_reference(name: str, semantics: str) -> None:
    """The vLLM scenario: save a prompt through store_mask, look it up again; the drop-in
    (vLLM-shaped objects) and the Python reference (checked against every vector) agree."""
    ref = _reference()
    specs, dicts, eagle, S, H = ROUND_TRIPS[name]
    dicts = [dict(d, eagle=i in eagle) for i, d in enumerate(dicts)]
    partial = ref.partial_hits_rule(dicts, H) if semantics == "vllm-0.33" else None
    kwargs = {"enable_partial_hash_hits": partial} if semantics == "vllm-0.33" else {}
    ours = MooncakeStoreCoordinator(groups(*specs, eagle=eagle), S, H, use_eagle=True,
                                    semantics=semantics, **kwargs)
    theirs = ref.MooncakeStoreCoordinator(dicts, S, H, True, None,
                                          enable_partial_hash_hits=partial, semantics=semantics)
    assert ours.eagle_group_ids == theirs.eagle_group_ids
    assert ours.lcm_block_size == theirs.lcm_block_size
    hashes = hash_chain(3 * S // H + 2)
    for saved in (S, 2 * S, 3 * S):
        for prompt in (None, saved, saved - 1):
            pool = ExternalCachedBlockPool(H, save(ours, hashes, saved, prompt))
            assert list(ours.store_mask(saved, 0, prompt)) == list(
                theirs.store_mask(saved, 0, prompt))
            for max_length in (saved, saved - 1, len(hashes) * H):
                got = ours.find_longest_cache_hit(hashes, max_length, pool)
                want = theirs.find_longest_cache_hit(
                    hashes, max_length, ref.ExternalCachedBlockPool(H, pool._exists))
                assert (list(got[0]), got[1]) == (list(want[0]), want[1]), (saved, prompt,
                                                                            max_length)


def test_worker_lookup_delegates_to_prefixhit_store() -> None:
    store_module = pytest.importorskip("prefixhit.store")
    specs = [FA(64), SWA(16, 32), SWA(16, 32)]
    coord = MooncakeStoreCoordinator(groups(*specs, eagle=(2,)), 64, 16, use_eagle=True)
    layout = coord.store_layout("model", tp_size=2)
    hashes = hash_chain(16)
    keys = {k for gid, spec in enumerate(specs) for h in coord.block_hashes_for_spec(hashes, spec)
            for k in layout.keys(gid, h)}

    def batch_is_exist(asked: list[str]) -> list[int]:
        return [1 if k in keys else 0 for k in asked]

    hit = coord.worker_lookup(batch_is_exist, layout, 256, hashes)
    assert hit == store_module.worker_lookup(batch_is_exist, coord.core, layout, 256, hashes)
    assert hit == 192  # the whole prompt is stored; the EAGLE drop costs one scheduler block
    # The default asks in a few exact rounds; one round (vLLM's way) gives the same answer.
    multi: dict = {}
    one: dict = {}
    assert coord.worker_lookup(batch_is_exist, layout, 256, hashes, stats=multi) == hit
    assert coord.worker_lookup(batch_is_exist, layout, 256, hashes, multi_round=False,
                               stats=one) == hit
    assert one["rounds"] == 1 and multi["rounds"] >= 1
    assert multi["keys_asked"] < one["keys_asked"]


def test_a_python_set_store_sees_each_probe_as_its_own_pair() -> None:
    """The engine probes a Python set with one (group_id, key) tuple that it reuses while nothing
    else holds it. A store that keeps the pairs it is asked about (a Set's own __contains__, or a
    stored tuple subclass whose __eq__ is called with the probe) must keep them unchanged."""
    from collections.abc import Set

    specs = [FA(64), SWA(16, 32), SWA(16, 32)]
    coord = MooncakeStoreCoordinator(groups(*specs, eagle=(2,)), 64, 16, use_eagle=True)
    hashes = hash_chain(40)
    saved = save(coord, hashes, 512)
    want = coord.find_longest_cache_hit(hashes, 639, saved)

    class Keeping(Set):  # a collections.abc.Set probed through its own __contains__
        def __init__(self) -> None:
            self.kept: list[tuple[tuple[int, bytes], tuple[int, bytes]]] = []

        def __contains__(self, pair: object) -> bool:
            assert isinstance(pair, tuple)
            self.kept.append((pair, (pair[0], pair[1])))  # the object and a copy of its value
            return pair in saved

        def __iter__(self):
            return iter(saved)

        def __len__(self) -> int:
            return len(saved)

    keeping = Keeping()
    got = coord.find_longest_cache_hit(hashes, 639, keeping)
    assert (list(got[0]), got[1]) == (list(want[0]), want[1])
    assert keeping.kept and all(obj == value for obj, value in keeping.kept)
    assert len({id(obj) for obj, _ in keeping.kept}) == len(keeping.kept)

    kept_by_eq: list[tuple[object, tuple[int, bytes]]] = []

    class EqKeeping(tuple):  # stored in a plain set: CPython calls its __eq__ with the probe
        def __eq__(self, other: object) -> bool:
            if isinstance(other, tuple):
                kept_by_eq.append((other, (other[0], other[1])))
            return tuple.__eq__(self, other)

        __hash__ = tuple.__hash__

    store = {EqKeeping(p) for p in saved}
    got = coord.find_longest_cache_hit(hashes, 639, store)
    assert (list(got[0]), got[1]) == (list(want[0]), want[1])
    assert kept_by_eq and all(obj == value for obj, value in kept_by_eq)


@pytest.mark.parametrize("model_name", ["model", "modèle-ü", "模型"])
def test_worker_lookup_key_strings(model_name: str) -> None:
    """The keys batch_is_exist receives are vLLM's strings, ASCII or not (the binding copies
    ASCII keys straight into str objects and decodes any other key as UTF-8)."""
    store_module = pytest.importorskip("prefixhit.store")
    specs = [FA(64), SWA(16, 32)]
    coord = MooncakeStoreCoordinator(groups(*specs), 64, 16)
    layout = coord.store_layout(model_name, cache_prefix="pré" if model_name != "model" else "")
    hashes = hash_chain(8)
    head = f"pré@{model_name}" if model_name != "model" else model_name
    expected = {f"{head}@tp_rank:0@pcp0@dcp0@pp_rank:0@group:{gid}@{h.hex()}"
                for gid, spec in enumerate(specs)
                for h in coord.block_hashes_for_spec(hashes, spec)}
    asked: list[str] = []

    def batch_is_exist(keys: list[str]) -> list[int]:
        asked.extend(keys)
        return [1 if k in expected else 0 for k in keys]

    hit = store_module.worker_lookup(batch_is_exist, coord.core, layout, 128, hashes,
                                     multi_round=False)
    assert hit == 64  # the whole prompt: the last token is recomputed, one scheduler block less
    assert asked and set(asked) <= expected
    assert all(type(k) is str for k in asked)
