"""Store-then-lookup round trips in the spirit of the reference's own unit tests, written from
SEMANTICS.md: save a prompt through store_mask, then look it up, and check the exact masks."""

from __future__ import annotations

from typing import Any

import pytest

import prefixhit

from helpers import hash_chain, save


def attention(kind: str, block_size: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "block_size": block_size,
        "num_kv_heads": 8,
        "head_size": 128,
        "dtype": "bfloat16",
        **extra,
    }


def window(block_size: int, size: int, eagle: bool = False) -> dict[str, Any]:
    return attention("sliding_window", block_size, sliding_window=size, eagle=eagle)


F, T = False, True


class TestThreeGroups:
    """FA(64) + SWA(16, w=32) + SWA(16, w=32, eagle), H=16, S=64 (SEMANTICS.md 2.3)."""

    @pytest.fixture
    def coord(self) -> prefixhit.Coordinator:
        return prefixhit.Coordinator(
            [attention("full_attention", 64), window(16, 32), window(16, 32, eagle=True)],
            scheduler_block_size=64,
            hash_block_size=16,
            use_eagle=True,
        )

    def test_merged_window_groups_share_the_eagle_flag(self, coord: prefixhit.Coordinator) -> None:
        # Only group 2 is a draft group, but it merges with group 1, so both are shifted.
        assert coord.spec_groups == [([0], False), ([1, 2], True)]
        assert coord.eagle_group_ids == [1, 2]
        assert coord.lookup_alignment == 64
        assert not coord.enable_partial_hash_hits

    def test_store_masks_shift_both_window_groups(self, coord: prefixhit.Coordinator) -> None:
        eagle_pattern = [F, F, T, T, T, F, T, T]
        assert coord.store_mask(128) == [None, eagle_pattern, eagle_pattern]
        assert coord.lookup_mask(128) == [None, eagle_pattern, eagle_pattern]

    def test_round_trip_finds_the_saved_prefix(self, coord: prefixhit.Coordinator) -> None:
        hashes = hash_chain(16)
        store = save(coord, hashes, 256)
        masks, hit = coord.find_longest_cache_hit(hashes, 255, store)
        # Full attention caps the hit at 3 whole 64-token blocks; the window groups find the
        # streak 10..12 (12 is the EAGLE peek block), then drop the peek: 12 blocks = 192.
        assert hit == 192
        window_list = [F] * 10 + [T, T]
        assert masks == [[T, T, T], window_list, window_list]
        # The receiver reads exactly those blocks back (no second EAGLE drop).
        assert coord.load_mask(hashes, hit) == masks

    def test_lookup_bounded_at_the_saved_length_loses_one_segment(
        self, coord: prefixhit.Coordinator
    ) -> None:
        # The peek block past 256 was never saved, so the last 64-token segment cannot be
        # confirmed: the hit stops one segment short.
        hashes = hash_chain(16)
        store = save(coord, hashes, 256)
        assert coord.find_longest_cache_hit(hashes, 256, store)[1] == 192
        assert coord.find_longest_cache_hit(hashes, 256, store, apply_eagle=False)[1] == 256

    def test_missing_window_block_shortens_the_hit(self, coord: prefixhit.Coordinator) -> None:
        hashes = hash_chain(16)
        store = save(coord, hashes, 256)
        store.discard((2, hashes[11]))  # a window block of the last full segment, group 2 only
        masks, hit = coord.find_longest_cache_hit(hashes, 255, store)
        assert hit == 128
        assert masks[1] == masks[2] == [F] * 6 + [T, T]
        assert masks[0] == [T, T]

    def test_empty_store_and_zero_length(self, coord: prefixhit.Coordinator) -> None:
        hashes = hash_chain(8)
        assert coord.find_longest_cache_hit(hashes, 127, set()) == ([[], [], []], 0)
        assert coord.find_longest_cache_hit([], 0, set()) == ([[], [], []], 0)


class TestDeepSeekV4Flash:
    """FA(256), SWA(64, w=128), SWA(64, w=128, eagle), SWA(4, w=8), SWA(8, w=128); H=4, S=256
    (SEMANTICS.md 5.3)."""

    @pytest.fixture(params=["plain", "mla"])
    def coord(self, request: pytest.FixtureRequest) -> prefixhit.Coordinator:
        fa, sw = ("full_attention", "sliding_window")
        if request.param == "mla":
            fa, sw = ("mla_attention", "sliding_window_mla")
        groups = [attention(fa, 256)] + [
            attention(sw, b, sliding_window=w, eagle=e)
            for b, w, e in [(64, 128, False), (64, 128, True), (4, 8, False), (8, 128, False)]
        ]
        return prefixhit.Coordinator(groups, 256, 4, use_eagle=True)

    def test_spec_groups(self, coord: prefixhit.Coordinator) -> None:
        assert coord.spec_groups == [[[0], F], [[1, 2], T], [[3], F], [[4], F]]
        assert coord.eagle_group_ids == [1, 2]

    def test_save_768_look_up_768(self, coord: prefixhit.Coordinator) -> None:
        # The worked example: the last 256-token segment has no peek block, so 512.
        hashes = hash_chain(192)
        store = save(coord, hashes, 768)
        masks, hit = coord.find_longest_cache_hit(hashes, 768, store)
        assert hit == 512
        assert masks[0] == [T, T]
        assert masks[1] == masks[2] == [F] * 6 + [T, T]
        assert len(masks[3]) == 512 // 4 and masks[3][-2:] == [T, T] and not any(masks[3][:-2])
        assert len(masks[4]) == 512 // 8 and all(masks[4][-16:]) and not any(masks[4][:-16])

    def test_longer_prompt_finds_every_saved_segment(self, coord: prefixhit.Coordinator) -> None:
        # Saving 1024 tokens stores the peek chunk of the 768 boundary too.
        hashes = hash_chain(256)
        store = save(coord, hashes, 1024)
        masks, hit = coord.find_longest_cache_hit(hashes, 1023, store)
        assert hit == 768
        assert masks[1] == masks[2] == [F] * 10 + [T, T]
        assert coord.load_mask(hashes, hit) == masks

    def test_retention_and_prompt_boundary(self) -> None:
        coord = prefixhit.Coordinator(
            [attention("full_attention", 32), window(8, 8)], 32, 8, retention_interval=0
        )
        # R = 0: only the chunks ending at the replay boundary (prompt 100 -> boundary 96).
        expected = [F] * 16
        expected[11] = T
        assert coord.store_mask(128, 0, 100) == [None, expected]
        assert coord.store_mask(128) == [None, [F] * 16]


class TestSingleGroups:
    def test_full_attention_prefix_and_hole(self) -> None:
        coord = prefixhit.Coordinator([attention("full_attention", 16)], 16, 16)
        hashes = hash_chain(4)
        store = {(0, h) for h in hashes}
        assert coord.find_longest_cache_hit(hashes, 64, store) == ([[T, T, T, T]], 64)
        store.discard((0, hashes[2]))
        assert coord.find_longest_cache_hit(hashes, 64, store) == ([[T, T]], 32)
        # A key of another group never counts.
        assert coord.find_longest_cache_hit(hashes, 64, {(1, h) for h in hashes})[1] == 0

    def test_sliding_window_examples(self) -> None:
        coord = prefixhit.Coordinator([window(16, 32)], 16, 16)
        hashes = hash_chain(8)

        def present(*blocks: int) -> set[tuple[int, bytes]]:
            return {(0, hashes[b]) for b in blocks}

        assert coord.find_longest_cache_hit(hashes, 128, present(0, 1, 2, 4, 5)) == (
            [[F, F, F, F, T, T]],
            96,
        )
        assert coord.find_longest_cache_hit(hashes, 128, present(0, 2, 4, 7)) == ([[T]], 16)
        assert coord.find_longest_cache_hit(hashes, 128, present(1)) == ([[]], 0)

    def test_chunked_local_empty_store(self) -> None:
        coord = prefixhit.Coordinator(
            [attention("chunked_local", 16, attention_chunk_size=64)], 16, 16
        )
        hashes = hash_chain(8)
        assert coord.find_longest_cache_hit(hashes, 128, set()) == ([[F] * 8], 128)
        assert coord.find_longest_cache_hit(hashes, 100, set()) == ([[F] * 4], 64)

    def test_chunk_keys_are_the_last_hash_of_each_block(self) -> None:
        coord = prefixhit.Coordinator([attention("full_attention", 64)], 64, 16)
        hashes = hash_chain(10)
        assert coord.chunk_keys(hashes, 64) == [hashes[3], hashes[7]]
        assert coord.chunk_keys(hashes, 16) == hashes
