"""Stand-ins for vLLM's KV-cache spec classes: dataclasses with vLLM's class names, hierarchy and
fields (as of vLLM 0.33), so the drop-in is tested on the objects vLLM passes, without vLLM."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int


@dataclass(frozen=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int = 8
    head_size: int = 64
    dtype: Any = "bfloat16"
    page_size_padded: int | None = None


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    head_size_v: int | None = None
    sliding_window: int | None = None
    attention_chunk_size: int | None = None


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: str | None = None
    compress_ratio: int = 1


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int = 0
    head_size_v: int | None = None
    extra_retained_tokens: int = 0


@dataclass(frozen=True)
class SlidingWindowMLASpec(SlidingWindowSpec):
    cache_dtype_str: str | None = None
    bounded_replay: bool = False


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int = 0


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple = ((16, 64),)
    dtypes: tuple = ("float16",)
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0


@dataclass(frozen=True)
class CircularBufferSpec(AttentionSpec):
    pass


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    kv_cache_specs: dict = field(default_factory=dict)


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: KVCacheSpec
    is_eagle_group: bool = False


def groups(*specs: KVCacheSpec, eagle: tuple[int, ...] = ()) -> list[KVCacheGroupSpec]:
    return [
        KVCacheGroupSpec([f"layer.{i}"], s, is_eagle_group=i in eagle) for i, s in enumerate(specs)
    ]


def FA(block_size: int, **kw: Any) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, **kw)


def SWA(block_size: int, window: int, **kw: Any) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=block_size, sliding_window=window, **kw)
