"""prefixhit: batched prefix-hit lookups for LLM serving.

A drop-in for the external-store cache-hit logic of vLLM's Mooncake store connector
(``MooncakeStoreCoordinator``): the same answers, computed by a C++ (and CUDA) engine.

Quick start::

    import prefixhit

    coord = prefixhit.Coordinator(
        [{"kind": "full_attention", "block_size": 64},
         {"kind": "sliding_window", "block_size": 16, "sliding_window": 32, "eagle": True}],
        scheduler_block_size=64, hash_block_size=16, use_eagle=True)
    masks, hit_length = coord.find_longest_cache_hit(block_hashes, max_length, store)

``store`` is a set of ``(group_id, key_bytes)`` pairs, a :class:`KeySet`, a :class:`BlockIndex`
or the :class:`PlanAnswers` of a remote store. :meth:`Coordinator.find_longest_cache_hits`
runs many requests in one call on numpy arrays.
"""

from __future__ import annotations

from . import errors
from ._core import (
    BatchLookupResult,
    BlockIndex,
    Coordinator,
    GroupSpec,
    KeyPlan,
    KeySet,
    PlanAnswers,
    build_info,
    hash_prompt,
    partial_hits_rule,
)
from ._types import SpecGroup
from .errors import (
    BackendUnavailableError,
    CapacityExceededError,
    CudaError,
    FormatError,
    InvalidArgumentError,
    InvalidConfigError,
    PrefixhitError,
    PrefixhitIOError,
    UnalignedLengthError,
    UnsupportedAlignmentChunkedLocalError,
    UnsupportedAlignmentSlidingWindowError,
    UnsupportedEagleChunkedLocalError,
    UnsupportedLookupError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "BatchLookupResult",
    "BlockIndex",
    "CapacityExceededError",
    "Coordinator",
    "CudaError",
    "FormatError",
    "GroupSpec",
    "InvalidArgumentError",
    "InvalidConfigError",
    "KeyPlan",
    "KeySet",
    "PlanAnswers",
    "PrefixhitError",
    "PrefixhitIOError",
    "SpecGroup",
    "UnalignedLengthError",
    "UnsupportedAlignmentChunkedLocalError",
    "UnsupportedAlignmentSlidingWindowError",
    "UnsupportedEagleChunkedLocalError",
    "UnsupportedLookupError",
    "build_info",
    "errors",
    "hash_prompt",
    "partial_hits_rule",
    "__version__",
]
