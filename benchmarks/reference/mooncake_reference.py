"""A plain-Python reference of vLLM's Mooncake store coordinator, written from
tests/data/SEMANTICS.md (sections 1-8 for "pr49069", section 11 for "vllm-0.33") in the style vLLM
uses: lists of blocks, per-block loops, and a pool whose get_cached_block answers one hash for a
set of group ids. It is the denominator of benchmarks/python_dropin.py; it is checked against the
conformance vectors by tests/python/test_reference.py, so its answers (and so its cost) are the
reference's. It is not part of the prefixhit package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FULL_KINDS = ("full_attention", "mla_attention")
WINDOW_KINDS = ("sliding_window", "sliding_window_mla")


class ReferenceError(AssertionError):
    """vLLM asserts; `kind` names the SEMANTICS.md error kind."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(message or kind)
        self.kind = kind


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheBlock:
    __slots__ = ("block_id",)

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id


class ExternalCachedBlockPool:
    """A pool over a set of (group_id, key) pairs; exists=None holds every key."""

    def __init__(self, hash_block_size: int, exists: Any = None) -> None:
        self._exists = exists
        self.hash_block_size = hash_block_size
        self.null_block = KVCacheBlock(0)
        self._present_block = KVCacheBlock(1)

    def get_cached_block(self, block_hash: bytes, group_ids: list[int]) -> list[Any] | None:
        if self._exists is None:
            return [self._present_block] * len(group_ids)
        h = bytes(block_hash)
        if all((g, h) in self._exists for g in group_ids):
            return [self._present_block] * len(group_ids)
        return None


def _window(spec: dict[str, Any], semantics: str) -> int:
    w = spec["sliding_window"]
    if semantics == "vllm-0.33":
        w += spec.get("extra_retained_tokens", 0) or 0
    return w


def _cacheable(spec: dict[str, Any], semantics: str) -> bool:
    if semantics != "vllm-0.33":
        return True
    if spec["kind"] == "circular_buffer":
        return False
    return not (spec["kind"] == "sliding_window_mla" and spec.get("bounded_replay", False))


def _identity(spec: dict[str, Any], semantics: str) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k != "eagle"}
    if semantics == "vllm-0.33" and spec["kind"] in WINDOW_KINDS:
        out["sliding_window"] = _window(spec, semantics)
        out.pop("extra_retained_tokens", None)
    return out


def partial_hits_rule(groups: Sequence[dict[str, Any]], H: int, dcp: int = 1) -> bool:
    """vLLM 0.33's engine rule for enable_partial_hash_hits (SEMANTICS.md 11.1)."""
    if len(groups) <= 1:
        return False
    if not any(
        g["kind"] == "mamba"
        and g.get("mamba_cache_mode") == "align"
        and (g["block_size"] >= H if dcp > 1 else g["block_size"] > H)
        for g in groups
    ):
        return False
    for g in groups:
        if not _cacheable(g, "vllm-0.33") or g["kind"] in (*FULL_KINDS, "mamba"):
            continue
        if g["block_size"] * dcp != H:
            return False
    return True


class MooncakeStoreCoordinator:
    def __init__(
        self,
        groups: list[dict[str, Any]],
        scheduler_block_size: int,
        hash_block_size: int,
        use_eagle: bool = False,
        retention_interval: int | None = None,
        enable_partial_hash_hits: bool | None = None,
        semantics: str = "pr49069",
    ) -> None:
        H, S = hash_block_size, scheduler_block_size
        self.semantics = semantics
        self.groups = groups
        cacheable = [_cacheable(g, semantics) for g in groups]
        if not all(g["block_size"] % H == 0 for g, c in zip(groups, cacheable) if c):
            raise ReferenceError("invalid_config", "block_size must be divisible by H")
        if S % H != 0:
            raise ReferenceError("invalid_config", "S must be a multiple of H")
        if not all(S % g["block_size"] == 0 for g, c in zip(groups, cacheable) if c):
            raise ReferenceError("invalid_config", "S must be a multiple of every block size")
        self.hash_block_size = H
        self.scheduler_block_size = S
        self.use_eagle = use_eagle
        self.retention_interval = retention_interval
        self.cacheable = cacheable
        if semantics == "vllm-0.33":
            self.enable_partial_hash_hits = bool(enable_partial_hash_hits)
        else:
            self.enable_partial_hash_hits = any(
                g["kind"] == "mamba" and g.get("mamba_cache_mode") == "align"
                and g["block_size"] > H
                for g in groups
            )
        self.lcm_block_size = H if self.enable_partial_hash_hits else S
        # Merge equal specs (in id order), full attention first, then the EAGLE flags.
        attention_groups: list[tuple[dict[str, Any], list[int]]] = []
        for i, g in enumerate(groups):
            if not cacheable[i]:
                continue
            ident = _identity(g, semantics)
            for spec, ids in attention_groups:
                if _identity(spec, semantics) == ident:
                    ids.append(i)
                    break
            else:
                attention_groups.append((g, [i]))
        self.attention_groups = sorted(
            attention_groups, key=lambda x: x[0]["kind"] not in FULL_KINDS
        )
        self.eagle_attn_group_indices = {
            k for k, (_, ids) in enumerate(self.attention_groups)
            if any(groups[i].get("eagle", False) for i in ids)
        }
        if use_eagle and not self.eagle_attn_group_indices:
            self.eagle_attn_group_indices = set(range(len(self.attention_groups)))
        self.eagle_group_ids = {
            i for k in self.eagle_attn_group_indices for i in self.attention_groups[k][1]
        }

    # ---- lookups ---------------------------------------------------------------------------

    def align_lookup_length(self, length: int) -> int:
        return length // self.lcm_block_size * self.lcm_block_size

    def block_hashes_for_spec(self, block_hashes: Sequence[bytes], spec: dict[str, Any]) -> list:
        s = spec["block_size"] // self.hash_block_size
        return list(block_hashes[s - 1 :: s]) if s > 1 else list(block_hashes)

    def find_longest_cache_hit(self, block_hashes, max_length, pool, *, apply_eagle=True):
        blocks, hit = self._find_hit_blocks(block_hashes, max_length, pool, apply_eagle)
        null = pool.null_block
        return tuple([b is not null for b in blks] for blks in blocks), hit

    def load_mask(self, block_hashes, token_len):
        masks, _ = self.find_longest_cache_hit(
            block_hashes, token_len, ExternalCachedBlockPool(self.hash_block_size),
            apply_eagle=False)
        return masks

    def _finder(self, spec, ids, hashes, max_length, pool, drop):
        kind = spec["kind"]
        A, B = self.lcm_block_size, spec["block_size"]
        keys = self.block_hashes_for_spec(hashes, spec)
        null = pool.null_block
        if kind in FULL_KINDS:
            blocks = []
            for j in range(min(max_length // B, len(keys))):
                cached = pool.get_cached_block(keys[j], ids)
                if cached is None:
                    break
                blocks.append(cached[0])
            length = len(blocks) * B
            if A < B:
                s = B // A
                first = len(blocks) * s
                for f in range(min(first + s - 1, max_length // A, len(hashes)) - 1, first - 1, -1):
                    cached = pool.get_cached_block(hashes[f], ids)
                    if cached is not None:
                        blocks.append(cached[0])
                        length = (f + 1) * A
                        break
            if drop and length > 0:
                length -= min(A, B)
            length -= length % A
            del blocks[cdiv(length, B):]
            return blocks, length
        if kind in WINDOW_KINDS:
            if self.semantics != "vllm-0.33" and A % B != 0:
                raise ReferenceError("unsupported_alignment_sliding_window")
            need = cdiv(_window(spec, self.semantics) - 1, B) + (1 if drop else 0)
            n = max_length // B
            blocks = [null] * n
            run = 0
            found = False
            for i in range(n - 1, -1, -1):
                cached = pool.get_cached_block(keys[i], ids) if i < len(keys) else None
                if cached is None:
                    run = 0
                    continue
                if run == 0 and B != A:
                    p = i if drop else i + 1
                    if p * B % A != 0:
                        continue
                blocks[i] = cached[0]
                run += 1
                if run >= need:
                    del blocks[i + run:]
                    found = True
                    break
            if not found:
                del blocks[run:]
                if B != A:
                    while blocks and len(blocks) * B % A:
                        blocks.pop()
            if drop and blocks:
                blocks.pop()
                if B != A:
                    while blocks and len(blocks) * B % A:
                        blocks.pop()
            return blocks, len(blocks) * B
        if kind == "chunked_local":
            if drop:
                raise ReferenceError("unsupported_eagle_chunked_local")
            if B != A:
                raise ReferenceError("unsupported_alignment_chunked_local")
            chunk = spec["attention_chunk_size"]
            start = max_length // chunk * chunk if max_length > 0 else 0
            blocks = [null] * (start // B)
            for i in range(start // B, min(max_length // B, len(keys))):
                cached = pool.get_cached_block(keys[i], ids)
                if cached is None:
                    break
                blocks.append(cached[0])
            return blocks, len(blocks) * B
        if kind == "mamba":
            if A < B:
                s = B // A
                for f in range(min(max_length // A, len(hashes)) - 1, -1, -1):
                    cached = pool.get_cached_block(hashes[f], ids)
                    if cached is not None:
                        return [null] * (f // s) + [cached[0]], (f + 1) * A
                return [], 0
            for i in range(min(max_length // B, len(keys)) - 1, -1, -1):
                cached = pool.get_cached_block(keys[i], ids)
                if cached is None:
                    continue
                if B != A and (i + 1) * B % A != 0:
                    continue
                return [null] * i + [cached[0]], (i + 1) * B
            return [], 0
        raise ReferenceError("invalid_config", f"no finder for {kind}")

    def _find_hit_blocks(self, hashes, max_length, pool, apply_eagle):
        G = len(self.groups)
        eagle = self.eagle_attn_group_indices if apply_eagle else set()
        K = len(self.attention_groups)
        if K == 0:
            return tuple([] for _ in range(G)), max_length
        if K == 1:
            spec, ids = self.attention_groups[0]
            blocks, hit = self._finder(spec, ids, hashes, max_length, pool, 0 in eagle)
            out = [[] for _ in range(G)]
            for gid in ids:
                out[gid] = list(blocks)
            return tuple(out), hit
        H = self.hash_block_size
        partial = self.enable_partial_hash_hits
        hit_length = max_length
        lists: list[list | None] = [None] * G
        len_of = [0] * G
        simple = K == 2 and self.attention_groups[0][0]["kind"] in FULL_KINDS
        verified: set[int] = set()
        while True:
            cur = hit_length
            for k, (spec, ids) in enumerate(self.attention_groups):
                if spec["kind"] in FULL_KINDS and lists[ids[0]] is not None:
                    cur = min(cur, len_of[ids[0]])
                    continue
                drop = k in eagle and k not in verified
                bound = cur
                if drop and spec["kind"] != "mamba":
                    B = spec["block_size"]
                    margin = H if (partial and spec["kind"] in FULL_KINDS and B > H) else B
                    cap = max_length if self.semantics != "vllm-0.33" else len(hashes) * H
                    bound = min(cur + margin, cap)
                blocks, new = self._finder(spec, ids, hashes, bound, pool, drop)
                if drop:
                    verified.add(k)
                elif new < cur:
                    verified.clear()
                cur = new
                for gid in ids:
                    lists[gid] = list(blocks)
                    len_of[gid] = new
            if cur >= hit_length:
                break
            hit_length = cur
            if simple:
                break
        truncate = (
            self.attention_groups
            if self.semantics == "vllm-0.33"
            else self.attention_groups[:1]
        )
        for spec, ids in truncate:
            if spec["kind"] in FULL_KINDS:
                n = cdiv(hit_length, spec["block_size"])
                for gid in ids:
                    del lists[gid][n:]
        return tuple(x if x is not None else [] for x in lists), hit_length

    # ---- masks -----------------------------------------------------------------------------

    def store_mask(self, aligned_token_len, start_token=0, num_prompt_tokens=None):
        return self._reachable_masks(aligned_token_len, start_token, self.retention_interval,
                                     num_prompt_tokens, store=True)

    def lookup_mask(self, aligned_token_len):
        return self._reachable_masks(aligned_token_len, 0, None, None, store=False)

    def _boundaries(self, num_prompt_tokens):
        if num_prompt_tokens is None:
            return ()
        P, S = num_prompt_tokens, self.scheduler_block_size
        if self.semantics == "vllm-0.33" and self.eagle_group_ids:
            return tuple(sorted({max((P - 1) // S * S - S, 0), max(P // S * S - S, 0)}))
        return (P - 1,)

    def _reachable_masks(self, aligned, start_token, R, num_prompt_tokens, store):
        if aligned % self.lcm_block_size != 0:
            raise ReferenceError("unaligned_length")
        S = self.scheduler_block_size
        masks = []
        for gid, spec in enumerate(self.groups):
            B = spec["block_size"]
            end = aligned // B
            start = min(end, max(0, cdiv(start_token, B)))
            kind = spec["kind"]
            mask: list[bool] | None = None
            if kind in WINDOW_KINDS:
                e = 1 if gid in self.eagle_group_ids else 0
                need = cdiv(_window(spec, self.semantics) - 1, B) + e
                if not self.cacheable[gid] and S % B != 0:
                    masks.append(None)
                    continue
                seg = S if R is None else (None if R == 0 else R)
                if seg is not None:
                    per = seg // B
                    if need >= per:
                        masks.append(None)
                        continue
                    mask = [i >= e and (i - e) % per >= per - need for i in range(start, end)]
                else:
                    mask = [False] * (end - start)
                if R is not None:
                    for b in self._boundaries(num_prompt_tokens):
                        E = b // S * S // B + e
                        for i in range(max(start, E - need), min(end, E)):
                            mask[i - start] = True
            elif kind == "mamba":
                if store and self.semantics == "vllm-0.33":
                    mask = [False] * (end - start)
                elif R is not None:
                    mask = [False] * (end - start)
                    if R != 0:
                        per = R // B
                        if per <= 1:
                            masks.append(None)
                            continue
                        for i in range(start, end):
                            if (i + 1) % per == 0:
                                mask[i - start] = True
                    if num_prompt_tokens is not None:
                        c = (num_prompt_tokens - 1) // S * S // B - 1
                        if start <= c < end:
                            mask[c - start] = True
            masks.append(mask)
        return tuple(masks)
