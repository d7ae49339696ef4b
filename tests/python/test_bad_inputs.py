"""Bad inputs raise ValueError or TypeError with messages that name the problem."""

from __future__ import annotations

import numpy as np
import pytest

import prefixhit

from helpers import hash_chain

FA = {"kind": "full_attention", "block_size": 16}


@pytest.fixture
def coord() -> prefixhit.Coordinator:
    return prefixhit.Coordinator([FA], 16, 16)


def test_digest_of_the_wrong_length(coord: prefixhit.Coordinator) -> None:
    hashes = hash_chain(3)
    # A list is read lazily: the bad item is reported when the lookup reaches it (max_length 48
    # probes all three), and one it never reaches changes nothing (as in vLLM).
    for store in (set(), prefixhit.KeySet()):
        with pytest.raises(ValueError, match=r"block_hashes\[1\] must be 32 bytes, got 31"):
            coord.find_longest_cache_hit([hashes[0], hashes[1][:31], hashes[2]], 48, store)
    present = {(0, hashes[0])}
    assert coord.find_longest_cache_hit([hashes[0], b"short"], 16, present)[1] == 16
    with pytest.raises(ValueError, match="shape"):
        coord.find_longest_cache_hit(np.zeros((3, 31), np.uint8), 16, set())
    with pytest.raises(ValueError, match="not a whole number of 32-byte digests"):
        coord.find_longest_cache_hits(b"\0" * 33, [0, 1], [16], set())
    with pytest.raises(ValueError, match="must be 32 bytes"):
        prefixhit.KeySet([(0, b"short")])
    with pytest.raises(ValueError, match="must be 32 bytes"):
        coord.chunk_keys([b"x" * 33], 16)
    # And the errors are prefixhit's own, so one except clause catches every engine error.
    with pytest.raises(prefixhit.InvalidArgumentError):
        coord.load_mask([b"x"], 16)


def test_wrong_types(coord: prefixhit.Coordinator) -> None:
    hashes = hash_chain(2)
    with pytest.raises(
        TypeError, match=r"block_hashes\[0\] must be a 32-byte bytes object, got str"
    ):
        coord.find_longest_cache_hit(["00" * 32], 16, set())
    with pytest.raises(TypeError, match="single bytes"):
        coord.find_longest_cache_hit(hashes[0], 16, set())
    with pytest.raises(TypeError, match="block_hashes must be a sequence"):
        coord.find_longest_cache_hit(None, 16, set())
    with pytest.raises(TypeError, match="max_length must be an int, got float"):
        coord.find_longest_cache_hit(hashes, 16.0, set())
    with pytest.raises(TypeError, match="max_length must be an int, got str"):
        coord.find_longest_cache_hit(hashes, "16", set())
    with pytest.raises(TypeError, match="store must be"):
        coord.find_longest_cache_hit(hashes, 16, 42)
    with pytest.raises(TypeError, match="store must be"):
        coord.find_longest_cache_hit(hashes, 16, None)
    with pytest.raises(TypeError, match=r"\(group_id, key\) pair"):
        coord.find_longest_cache_hit(hashes, 16, [hashes[0]])
    with pytest.raises(TypeError, match="must hold uint8 digests"):
        coord.find_longest_cache_hit(np.zeros((2, 32), np.float32), 16, set())
    with pytest.raises(TypeError, match="must hold integers"):
        coord.find_longest_cache_hits(
            np.zeros((2, 32), np.uint8), np.array([0.0, 2.0]), [16], set()
        )
    with pytest.raises(TypeError, match="token_len must be an int"):
        coord.load_mask(hashes, None)
    with pytest.raises(TypeError, match="num_prompt_tokens must be an int"):
        coord.store_mask(16, 0, 1.5)
    # numpy integers are ints.
    assert coord.find_longest_cache_hit(hashes, np.int64(16), set())[1] == 0


def test_negative_and_out_of_range_lengths(coord: prefixhit.Coordinator) -> None:
    hashes = hash_chain(2)
    with pytest.raises(ValueError, match=r"max_length -1 is outside \[0, 1099511627776\]"):
        coord.find_longest_cache_hit(hashes, -1, set())
    with pytest.raises(ValueError, match=r"max_length 1099511627777 is outside"):
        coord.find_longest_cache_hit(hashes, 2**40 + 1, set())
    # Past the hashes, full attention stops at the last hash, as the reference does (issue 10);
    # a window group would index past the hash list, which the reference rejects too.
    assert coord.find_longest_cache_hit(hashes, 48, {(0, h) for h in hashes})[1] == 32
    window = prefixhit.Coordinator(
        [{"kind": "sliding_window", "block_size": 16, "sliding_window": 32}], 16, 16
    )
    with pytest.raises(ValueError, match="reaches past the last of the 2 hashes"):
        window.find_longest_cache_hit(hashes, 48, set())
    with pytest.raises(ValueError, match="token_len"):
        coord.load_mask(hashes, -5)
    with pytest.raises(ValueError, match="request 1: max_length -3"):
        coord.find_longest_cache_hits(hashes * 2, [0, 2, 4], [16, -3], set())
    with pytest.raises(ValueError, match="aligned_token_len must not be negative"):
        coord.store_mask(-16)
    with pytest.raises(ValueError, match="start_token"):
        coord.store_mask(16, -1)
    with pytest.raises(ValueError, match="namespace"):
        coord.find_longest_cache_hit(hashes, 16, prefixhit.BlockIndex(), namespace=-1)
    with pytest.raises(ValueError, match="namespace applies only to a BlockIndex"):
        coord.find_longest_cache_hit(hashes, 16, set(), namespace=2)


def test_batch_shapes(coord: prefixhit.Coordinator) -> None:
    digests = np.zeros((4, 32), np.uint8)
    with pytest.raises(ValueError, match="offsets end at 3 but 4 digests"):
        coord.find_longest_cache_hits(digests, [0, 3], [0], set())
    with pytest.raises(ValueError, match="must not decrease"):
        coord.find_longest_cache_hits(digests, [0, 3, 2, 4], [0, 0, 0], set())
    with pytest.raises(ValueError, match="2 requests but 1 max_lengths"):
        coord.find_longest_cache_hits(digests, [0, 2, 4], [0], set())
    with pytest.raises(ValueError, match="offsets must have num_requests"):
        coord.find_longest_cache_hits(digests, [], [], set())
    with pytest.raises(ValueError, match="apply_eagle has 1 entries for 2 requests"):
        coord.find_longest_cache_hits(digests, [0, 2, 4], [0, 0], set(), apply_eagle=[True])
    with pytest.raises(ValueError, match="must be 1-D"):
        coord.find_longest_cache_hits(digests, np.zeros((2, 2), np.int64), [0], set())


def test_bad_group_specs() -> None:
    # Unknown fields are the spec's identity (issue 10); near misses of known ones are errors.
    assert len(prefixhit.Coordinator([FA, dict(FA, window=3)], 16, 16).spec_groups) == 2
    with pytest.raises(ValueError, match="'blok_size' looks like a misspelling of 'block_size'"):
        prefixhit.Coordinator([dict(FA, blok_size=3)], 16, 16)
    with pytest.raises(prefixhit.InvalidConfigError, match="kind"):
        prefixhit.Coordinator([{"kind": "attention", "block_size": 16}], 16, 16)
    with pytest.raises(prefixhit.InvalidConfigError, match="needs 'block_size'"):
        prefixhit.Coordinator([{"kind": "full_attention"}], 16, 16)
    with pytest.raises(TypeError, match=r"groups\[0\].block_size must be an int, got float"):
        prefixhit.Coordinator([dict(FA, block_size=16.0)], 16, 16)
    with pytest.raises(TypeError, match=r"groups\[0\].eagle must be a bool"):
        prefixhit.Coordinator([dict(FA, eagle="yes")], 16, 16)
    with pytest.raises(TypeError, match=r"groups\[0\] must be a prefixhit.GroupSpec or a dict"):
        prefixhit.Coordinator([("full_attention", 16)], 16, 16)
    with pytest.raises(TypeError, match="groups must be a list"):
        prefixhit.Coordinator(FA, 16, 16)
    with pytest.raises(prefixhit.InvalidConfigError, match="needs sliding_window"):
        prefixhit.Coordinator([{"kind": "sliding_window", "block_size": 16}], 16, 16)
    with pytest.raises(prefixhit.InvalidConfigError, match="at least one"):
        prefixhit.Coordinator([], 16, 16)
    with pytest.raises(prefixhit.InvalidConfigError, match="retention_interval"):
        prefixhit.Coordinator([FA], 16, 16, retention_interval=-2)
    with pytest.raises(TypeError, match="use_eagle must be a bool"):
        prefixhit.Coordinator([FA], 16, 16, use_eagle="no")
    with pytest.raises(ValueError, match="unknown"):
        prefixhit.GroupSpec("nope", 16)


def test_block_index_arguments() -> None:
    index = prefixhit.BlockIndex()
    keys = hash_chain(3)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        prefixhit.BlockIndex("tpu")
    with pytest.raises(ValueError, match="group_ids has 2 entries but there are 3 keys"):
        index.insert([0, 1], keys)
    with pytest.raises(ValueError, match="namespace must be in"):
        index.insert(0, keys, namespace=1 << 24)
    with pytest.raises(ValueError):
        index.insert(32, keys)  # group ids are below 32
    assert len(index) == 0  # nothing was applied
