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

from collections.abc import Sequence

from . import errors
from ._core import (
    BatchLookupResult,
    BlockIndex,
    Coordinator,
    EventMirror,
    GroupSpec,
    KeyPlan,
    KeySet,
    Mask,
    PlanAnswers,
    ResidencyIndex,
    RouterScores,
    build_info,
    hash_prompt,
    mirror_available,
    partial_hits_rule,
    score_workers,
    top_k_workers,
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

# A Mask stands for a list of bools: let isinstance(mask, Sequence) say so.
Sequence.register(Mask)

__all__ = [
    "BackendUnavailableError",
    "BatchLookupResult",
    "BlockIndex",
    "CapacityExceededError",
    "Coordinator",
    "CudaError",
    "EventMirror",
    "FormatError",
    "GroupSpec",
    "InvalidArgumentError",
    "InvalidConfigError",
    "KeyPlan",
    "KeySet",
    "Mask",
    "PlanAnswers",
    "PrefixhitError",
    "PrefixhitIOError",
    "ResidencyIndex",
    "RouterScores",
    "SpecGroup",
    "UnalignedLengthError",
    "UnsupportedAlignmentChunkedLocalError",
    "UnsupportedAlignmentSlidingWindowError",
    "UnsupportedEagleChunkedLocalError",
    "UnsupportedLookupError",
    "build_info",
    "errors",
    "hash_prompt",
    "mirror_available",
    "partial_hits_rule",
    "score_workers",
    "top_k_workers",
    "__version__",
]
