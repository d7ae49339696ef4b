"""prefixhit.Mask: lazy results that behave like the reference's lists."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import prefixhit

from helpers import hash_chain

GROUPS = [
    {"kind": "full_attention", "block_size": 64},
    {"kind": "sliding_window", "block_size": 16, "sliding_window": 32},
    {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "eagle": True},
]


@pytest.fixture
def coord() -> prefixhit.Coordinator:
    return prefixhit.Coordinator(GROUPS, 64, 16, use_eagle=True)


def test_lazy_lookup_equals_lists(coord: prefixhit.Coordinator) -> None:
    hashes = hash_chain(40)
    store = {(g, h) for g in range(3) for h in hashes}
    lists, hit = coord.find_longest_cache_hit(hashes, 639, store)
    masks, hit2 = coord.find_longest_cache_hit(hashes, 639, store, lazy=True)
    assert hit == hit2 == coord.find_longest_cache_hit_length(hashes, 639, store)
    assert isinstance(masks, tuple) and len(masks) == 3
    for mask, ref in zip(masks, lists):
        assert isinstance(mask, prefixhit.Mask) and isinstance(mask, Sequence)
        assert mask == ref and ref == mask and not (mask != ref)
        assert list(mask) == ref == mask.tolist() == mask[:]
        assert len(mask) == len(ref) and bool(mask) == bool(ref)
        assert mask[::-1] == ref[::-1] and list(reversed(mask)) == ref[::-1]
        assert mask.count(True) == ref.count(True) and mask.count(False) == ref.count(False)
        assert (True in mask) == (True in ref)
        if ref:
            assert mask[-1] == ref[-1] and mask[0] == ref[0]
            assert mask.index(ref[-1]) == ref.index(ref[-1])
        assert repr(mask) == repr(ref)
        assert mask != [*ref, True] and mask != tuple(ref) + (True,)
    with pytest.raises(IndexError):
        masks[0][len(masks[0])]
    with pytest.raises(TypeError):
        hash(masks[0])


def test_lazy_masks_equal_lists(coord: prefixhit.Coordinator) -> None:
    for length in (0, 64, 640, 6400):
        for got, ref in ((coord.lookup_mask(length, lazy=True), coord.lookup_mask(length)),
                         (coord.store_mask(length, 17, 300, lazy=True),
                          coord.store_mask(length, 17, 300)),
                         (coord.load_mask(length // 16, length, lazy=True),
                          coord.load_mask(length // 16, length))):
            assert isinstance(got, tuple)
            assert list(got) == ref
            for m, r in zip(got, ref):
                assert (m is None) == (r is None)
                if m is not None:
                    assert np.array_equal(np.array(list(m), bool), np.array(r, bool))


def test_mask_pickles_and_copies_as_a_list(coord: prefixhit.Coordinator) -> None:
    import copy
    import pickle

    hashes = hash_chain(16)
    masks, _ = coord.find_longest_cache_hit(hashes, 255, {(g, h) for g in range(3)
                                                          for h in hashes}, lazy=True)
    for mask in masks:
        for clone in (pickle.loads(pickle.dumps(mask)), copy.copy(mask), copy.deepcopy(mask)):
            assert type(clone) is list and clone == mask
