"""Type stubs of prefixhit._core, the compiled half of prefixhit (nanobind).

Generated with `python -m nanobind.stubgen -m prefixhit._core`, then given the argument aliases
below. tests/python/test_packaging.py checks that every public name of the module is here.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

import numpy

from ._types import SpecGroup

#: A request's 32-byte digests: a sequence of bytes-like objects, a uint8 [n, 32] array (numpy,
#: or a CUDA tensor for the batch API), a numpy "S32" array, or (batch and index calls) one
#: bytes-like object of n * 32 bytes.
Digests = Sequence[bytes] | numpy.ndarray | bytes | bytearray | memoryview
#: A 1-D integer array or a sequence of ints.
IntArray = Sequence[int] | numpy.ndarray

class Mask(Sequence[bool]):
    """
    A read-only sequence of bools, equal to the reference's mask list, built without creating a Python object per element. Indexing, slicing (a list), iteration, len(), count(), index(), `in` and == against lists behave as on the list; list(mask) or mask.tolist() expands it. Not hashable, like a list.
    """

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> bool: ...
    @overload
    def __getitem__(self, index: slice) -> list[bool]: ...
    def __iter__(self) -> Iterator[bool]: ...
    def __reversed__(self) -> Iterator[bool]: ...
    def __contains__(self, value: object) -> bool: ...
    def count(self, value: object) -> int: ...
    def index(self, value: object) -> int: ...  # type: ignore[override]
    def tolist(self) -> list[bool]:
        """The mask as a plain list of bools."""
    def __reduce__(self) -> tuple[type[list[bool]], tuple[list[bool]]]:
        """Pickled and copied as a plain list."""
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    __hash__: None  # type: ignore[assignment]

class GroupSpec:
    """
    One KV-cache group's spec (SEMANTICS.md 2.1, 9.2). Immutable.

    Every field except ``eagle`` takes part in spec equality: groups whose specs are equal merge into one spec group. ``kind`` is one of 'full_attention', 'mla_attention', 'sliding_window', 'sliding_window_mla', 'chunked_local', 'mamba'.
    """

    def __init__(
        self,
        kind: str,
        block_size: int,
        eagle: bool = False,
        *,
        num_kv_heads: int = 0,
        head_size: int = 0,
        dtype: object = "",
        sliding_window: int | None = None,
        attention_chunk_size: int | None = None,
        mamba_cache_mode: str = "none",
        state_dim: int = 0,
        extra_retained_tokens: int = 0,
        bounded_replay: bool = False,
        identity: Mapping[str, object] | str | None = None,
    ) -> None:
        """
        Builds a spec. Fields a kind does not use keep their defaults; the coordinator rejects missing required ones (a window for sliding_window kinds, a chunk size for chunked_local) with InvalidConfigError. extra_retained_tokens and bounded_replay are vllm-0.33 fields (SEMANTICS.md 11.2). identity: every other field of the real spec, as a dict (canonicalised) or canonical JSON text; it takes part in equality.
        """

    @staticmethod
    def from_dict(spec: Mapping[str, object]) -> GroupSpec:
        """A spec from a dict shaped like the conformance vectors' group objects."""

    def to_dict(self) -> dict[str, object]:
        """The vector-style dict of this spec."""

    @property
    def kind(self) -> str: ...
    @property
    def block_size(self) -> int: ...
    @property
    def eagle(self) -> bool:
        """The group holds EAGLE/MTP draft layers."""

    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_size(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def sliding_window(self) -> int | None: ...
    @property
    def attention_chunk_size(self) -> int | None: ...
    @property
    def mamba_cache_mode(self) -> str: ...
    @property
    def state_dim(self) -> int: ...
    @property
    def extra_retained_tokens(self) -> int: ...
    @property
    def bounded_replay(self) -> bool: ...
    @property
    def identity(self) -> str:
        """Canonical JSON text of the spec's other fields ('' when none)."""

    @property
    def prefix_cacheable(self) -> bool:
        """False for circular buffers and bounded-replay window-MLA groups (11.3)."""

    def same_spec(self, other: GroupSpec, semantics: str = "pr49069") -> bool:
        """
        Spec equality: every field but ``eagle``, the kind and identity included (the merge rule). Under 'vllm-0.33' window kinds compare the coverage window.
        """

    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __repr__(self) -> str: ...
    def __getstate__(self) -> dict[str, object]: ...
    def __setstate__(self, arg: dict[str, object], /) -> None: ...

def partial_hits_rule(
    groups: Sequence[GroupSpec | Mapping[str, object]], hash_block_size: int, dcp_world_size: int = 1
) -> bool:
    """
    vLLM 0.33's engine rule for enable_partial_hash_hits (SEMANTICS.md 11.1): more than one group, a Mamba 'align' group with block_size > H (>= H with DCP), and every prefix-cacheable window or chunked-local group with block_size * dcp == H.
    """

class KeySet:
    """
    A native set of (group_id, key) pairs: the fastest store for repeated or batched lookups when the caller owns the store content. Any group id is accepted; ids outside a configuration never match.
    """

    def __init__(
        self, entries: Iterable[tuple[int, bytes]] | None = None, *, digest_size: int = 32
    ) -> None:
        """
        digest_size: the width of every key, 8, 16 or 32 bytes; a lookup needs a KeySet of its coordinator's digest_size.
        """

    @property
    def digest_size(self) -> int:
        """The width of the keys, in bytes."""

    def add(self, group_id: int, key: bytes) -> bool:
        """Adds one pair; returns False if it was already present."""

    def update(self, entries: Iterable[tuple[int, bytes]]) -> None:
        """Adds every (group_id, key) pair of an iterable."""

    def insert(self, group_ids: int | IntArray, keys: Digests) -> int:
        """
        Bulk insert: keys as a [n, w] uint8 array (or bytes of n*w, or a list of w-byte bytes; w = digest_size), group_ids one int or one per key. Returns how many pairs were new.
        """

    def __contains__(self, pair: object) -> bool: ...
    def __len__(self) -> int: ...
    def clear(self) -> None:
        """Removes every pair."""

    def __repr__(self) -> str: ...

class PlanAnswers:
    """
    A remote store's answers to a KeyPlan, usable as the store of find_longest_cache_hit for the same block_hashes. Keys outside the plan count as absent.
    """

    @property
    def num_hashes(self) -> int: ...

class KeyPlan:
    """The (group_id, key) pairs one lookup may read (Coordinator.key_plan)."""

    @property
    def num_hashes(self) -> int:
        """Number of hashes of the request the plan was made for."""

    def __len__(self) -> int: ...
    @property
    def group_ids(self) -> numpy.ndarray:
        """int32 [k]: group id per entry."""

    @property
    def hash_indices(self) -> numpy.ndarray:
        """int64 [k]: the key of entry i is block_hashes[hash_indices[i]]."""

    @property
    def keys(self) -> numpy.ndarray:
        """uint8 [k, 32]: the key of each entry."""

    def pairs(self) -> list[tuple[int, bytes]]:
        """
        The entries as (group_id, key) tuples, the shape of a Python-set store.
        """

    def answers(self, present: Sequence[bool] | numpy.ndarray) -> PlanAnswers:
        """
        The store's answers, one truth value per plan entry, as a lookup store.
        """

class BlockIndex:
    """
    A resident set of (namespace, group_id, 32-byte key) entries, the store of find_longest_cache_hit(s) for a runtime that keeps its store's key directory in process. Thread-safe: concurrent readers and writers; each bulk call is atomic.

    device='cpu' is the host index. device='cuda' is the GPU-resident index; it needs a CUDA build with the device index and raises BackendUnavailableError otherwise.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        initial_capacity: int = 65536,
        max_load_factor: float = 0.8,
        max_capacity: int = 0,
        seed: int = 0,
    ) -> None:
        """
        device: 'cpu' (host memory) or 'cuda' (the current CUDA device). initial_capacity: slots reserved up front. max_load_factor: grow past this load. max_capacity: 0 for unbounded, else inserts that would not fit raise CapacityExceededError and insert nothing. seed: 0 draws a random hash seed.
        """

    @property
    def device(self) -> str: ...
    def insert(
        self,
        group_ids: int | IntArray,
        keys: Digests,
        *,
        namespace: int = 0,
        stream: int | None = None,
        digest_size: int = 32,
    ) -> int:
        """
        Inserts keys ([n, w] uint8 array, bytes of n*w, or a list of w-byte bytes, w = digest_size: 8, 16 or 32) for one group id or one id per key. Returns how many were new. The width is part of the key: the same bytes at two widths are two keys.
        """

    def erase(
        self,
        group_ids: int | IntArray,
        keys: Digests,
        *,
        namespace: int = 0,
        stream: int | None = None,
        digest_size: int = 32,
    ) -> int:
        """Erases keys (absent ones are ignored). Returns how many were removed."""

    def contains(
        self,
        group_ids: int | IntArray,
        keys: Digests,
        *,
        namespace: int = 0,
        stream: int | None = None,
        digest_size: int = 32,
    ) -> numpy.ndarray:
        """A bool array: whether each (group_id, key) is present."""

    def __contains__(self, pair: object) -> bool:
        """(group_id, key) in index: membership in namespace 0."""

    def __len__(self) -> int:
        """Number of keys, over all namespaces."""

    @property
    def capacity(self) -> int:
        """Slots currently allocated."""

    def clear(self) -> None:
        """Removes every key."""

    def __repr__(self) -> str: ...

class Coordinator:
    """
    Prefix-hit lookups for one KV-cache configuration, with the answers of vLLM's MooncakeStoreCoordinator (SEMANTICS.md).

    Construction merges equal group specs into spec groups, sorts full attention first, spreads the EAGLE flag and validates the block sizes (InvalidConfigError). A Coordinator is immutable and safe to share between threads.
    """

    def __init__(
        self,
        groups: Sequence[GroupSpec | Mapping[str, object]],
        scheduler_block_size: int,
        hash_block_size: int,
        use_eagle: bool = False,
        retention_interval: int | None = None,
        *,
        digest_size: int = 32,
        semantics: str = "pr49069",
        enable_partial_hash_hits: bool | None = None,
    ) -> None:
        """
        groups: one spec per KV-cache group id, as GroupSpec objects or dicts shaped like the vectors' group objects (kind, block_size, eagle, sliding_window, attention_chunk_size, num_kv_heads, head_size, dtype, mamba_cache_mode, state_dim).
        scheduler_block_size: S, a common multiple of every block size.
        hash_block_size: H, the granularity of the request's hash chain.
        use_eagle: speculative decoding with an EAGLE/MTP drafter is on.
        retention_interval: None, 0 or a positive token count (store masks only).
        digest_size: bytes per block hash, 8, 16 or 32 (vLLM's sha256 hashes are 32, xxhash 16, KV events' integer hashes 8). Every digest argument must have it, and a store must hold keys of it.
        semantics: 'pr49069' (vLLM PR #49069) or 'vllm-0.33' (the vLLM 0.33.0 release, SEMANTICS.md 11).
        enable_partial_hash_hits: vllm-0.33: the coordinator's input, None for partial_hits_rule(groups, hash_block_size); pr49069: derived from the groups, and a given value must agree (InvalidConfigError otherwise).
        Group dicts may carry any other field of the real spec: it takes part in spec equality (GroupSpec.identity); a near-miss of a known field name is an error.
        """

    @staticmethod
    def from_config(config: Mapping[str, object]) -> Coordinator:
        """
        A coordinator from a conformance vector's `config` object (hash_block_size, scheduler_block_size, use_eagle, retention_interval, groups). The informational enable_partial_hash_hits field is ignored.
        """

    @property
    def num_groups(self) -> int:
        """Number of KV-cache groups."""

    @property
    def hash_block_size(self) -> int: ...
    @property
    def scheduler_block_size(self) -> int: ...
    @property
    def use_eagle(self) -> bool: ...
    @property
    def digest_size(self) -> int:
        """Bytes per block hash: 8, 16 or 32."""

    @property
    def retention_interval(self) -> int | None: ...
    @property
    def groups(self) -> list[GroupSpec]:
        """The group specs, indexed by group id."""

    @property
    def eagle_group_ids(self) -> list[int]:
        """Sorted member ids of the EAGLE-flagged spec groups (SEMANTICS.md 2.3)."""

    @property
    def spec_groups(self) -> list[SpecGroup]:
        """
        Spec groups in processing order: (group_ids, use_eagle) named tuples, after merging, sorting full attention first and the EAGLE fallback. Each compares equal to the plain tuple or list [[ids...], flag].
        """

    @property
    def enable_partial_hash_hits(self) -> bool:
        """
        Fine-grained (partial) hash hits: some Mamba group in 'align' mode has a block larger than H (SEMANTICS.md 1.3).
        """

    @property
    def semantics(self) -> str:
        """'pr49069' or 'vllm-0.33': the reference release this coordinator reproduces."""

    @property
    def lookup_alignment(self) -> int:
        """A: hash_block_size with partial hits, else scheduler_block_size."""

    def align_lookup_length(self, length: int) -> int:
        """floor(length / A) * A."""

    def chunk_keys(self, block_hashes: Digests, block_size: int) -> list[bytes]:
        """
        The store keys of a group with `block_size` (SEMANTICS.md 1.2): the last hash of each whole block.
        """

    def find_longest_cache_hit(
        self,
        block_hashes: Digests,
        max_length: int,
        store: Store,
        *,
        apply_eagle: bool = True,
        namespace: int = 0,
        lazy: bool = False,
    ) -> tuple[Sequence[Sequence[bool]], int]:
        """
        The longest prefix of the request present in `store` (SEMANTICS.md 5).

        A list of bytes is read lazily: only the digests the lookup probes are converted (and checked); each one read stays referenced until the call returns. lazy=True returns a tuple of Mask objects (equal to the lists) instead of a list of lists.

        block_hashes: the request's 32-byte digests (a list of bytes, or a [n, 32] uint8 array).
        max_length: tokens to consider, 0 <= max_length <= 2**40. Past the hashes, full attention stops at the last hash and a window, chunked-local or Mamba group that would index past the hash list raises InvalidArgumentError, as the reference does.
        store: a set (or frozenset, or other collections.abc.Set) of (group_id, key) pairs, probed in place; an iterable of pairs (converted); a KeySet; a BlockIndex (with `namespace`); or PlanAnswers from key_plan().
        apply_eagle: apply the EAGLE drop (the receive path passes False).

        Returns (masks, hit_length): masks[group_id] lists the group's blocks, False for a placeholder and True for a block to load. Raises the finder errors (UnsupportedLookupError subclasses) and InvalidArgumentError (a ValueError) for a max_length out of range.
        """

    def find_longest_cache_hit_length(
        self,
        block_hashes: Digests,
        max_length: int,
        store: Store,
        *,
        apply_eagle: bool = True,
        namespace: int = 0,
    ) -> int:
        """
        find_longest_cache_hit's hit_length alone: no mask is built.
        """

    def load_mask(
        self, block_hashes: Digests | int, token_len: int, *, lazy: bool = False
    ) -> Sequence[Sequence[bool]]:
        """
        Which blocks of an already-decided hit to read (SEMANTICS.md 6): the lookup against a store holding every key, without the EAGLE drop. Only the number of hashes matters, so an int count is accepted too.
        """

    def store_mask(
        self,
        aligned_token_len: int,
        start_token: int = 0,
        num_prompt_tokens: int | None = None,
        *,
        lazy: bool = False,
    ) -> Sequence[Sequence[bool] | None]:
        """
        Which chunks of each group a save of tokens [start_token, aligned_token_len) writes (SEMANTICS.md 7). Per group: None (every chunk in range) or one bool per chunk from ceil(start_token / B). None and [] differ. Raises UnalignedLengthError unless aligned_token_len is a multiple of lookup_alignment.
        """

    def lookup_mask(
        self, aligned_token_len: int, *, lazy: bool = False
    ) -> Sequence[Sequence[bool] | None]:
        """
        store_mask with start_token 0, no retention interval and no prompt length: the chunks a lookup may find.
        """

    def key_plan(self, block_hashes: Digests, max_length: int) -> KeyPlan:
        """
        The (group_id, key) pairs one lookup may read, for a remote store: ask the store about all of them at once, then pass plan.answers(present) as the lookup's store.
        """

    def __repr__(self) -> str: ...
    def find_longest_cache_hits(
        self,
        digests: Digests,
        offsets: IntArray,
        max_lengths: int | IntArray,
        store: Store,
        *,
        apply_eagle: bool | Sequence[bool] | numpy.ndarray | None = None,
        namespace: int = 0,
        stream: int | None = None,
        num_threads: int = 0,
    ) -> BatchLookupResult:
        """
        Many lookups in one call; each request's answer equals find_longest_cache_hit's.

        digests: every request's digests back to back: uint8 [n, 32] (numpy, or a CUDA tensor through DLPack), bytes of n*32, or a list of bytes.
        offsets: int64 [R + 1]; request r owns digests[offsets[r]:offsets[r + 1]].
        max_lengths: int64 [R] (or one int for all).
        store: as for find_longest_cache_hit. KeySet and BlockIndex stores run on all cores without the GIL; a Python set is probed on the calling thread.
        apply_eagle: None or True (every request), False, or one flag per request.
        stream: the caller's CUDA stream (an int handle, or a torch/cupy stream object) for the GPU engine (device arrays, or a BlockIndex('cuda') store); the CPU engine ignores it.
        num_threads: at most this many threads (0: every hardware thread, 1: the calling thread only); workers start only when the first requests show the rest is worth them.

        Errors name the first failing request. Device arrays need the GPU engine and raise BackendUnavailableError in a build without it.
        """

class BatchLookupResult:
    """
    Results of find_longest_cache_hits. Arrays are read-only views that keep this object alive.
    """

    @property
    def num_requests(self) -> int: ...
    @property
    def num_groups(self) -> int: ...
    @property
    def hit_lengths(self) -> numpy.ndarray:
        """int64 [R]: hit length per request."""

    @property
    def num_blocks(self) -> numpy.ndarray:
        """int64 [R, G]: length of request r's block list for group g."""

    @property
    def num_placeholders(self) -> numpy.ndarray:
        """
        int64 [R, G]: leading placeholders (False entries) of that list; the rest are blocks to load.
        """

    def masks(self, r: int) -> list[list[bool]]:
        """Request r's masks, as find_longest_cache_hit returns them."""

    def __len__(self) -> int: ...
    def __getitem__(self, r: int) -> tuple[list[list[bool]], int]:
        """(masks, hit_length) of request r, equal to the one-by-one call."""

    def __repr__(self) -> str: ...

class EventMirror:
    """
    Keeps a BlockIndex true to a store from its KV-event streams (ZeroMQ PUB + msgpack), on its own threads: format='vllm' (BlockStored/BlockRemoved/AllBlocksCleared, tagged maps or positional arrays, hashes as bytes or 64-bit ints) or format='mooncake' (object keys in vLLM's store key format; a key counts only while every rank namespace in `ranks` holds it). Gaps and late joins are filled from the replay endpoint, else the mirror clears and resyncs. Bad messages are counted and skipped.
    """

    def __init__(
        self,
        index: BlockIndex | None,
        endpoints: Sequence[str],
        *,
        device: str = "auto",
        format: str = "vllm",
        replay: Sequence[str] = [],
        namespace: int = 0,
        topic: str = "",
        queue_capacity: int = 4096,
        queue_max_keys: int = 1048576,
        replay_timeout_ms: int = 1000,
        ranks: Sequence[tuple[int, int, int, int]] = [],
        model: str = "",
        cache_prefix: str | None = None,
    ) -> None: ...
    @property
    def index(self) -> BlockIndex:
        """The BlockIndex this mirror keeps in sync (the one given, or the one it made)."""

    @property
    def device(self) -> str:
        """'cpu' or 'cuda': where the mirrored index lives."""

    def lock(self) -> EventMirrorLock:
        """Holds the mirror's writes off a 'cuda' index while entered (`with mirror.lock(): ...`), for lookups on it; a no-op for 'cpu'. stats() and stop() cannot be called inside it."""

    def stats(self) -> dict[str, object]:
        """Counters: messages, events_stored/removed/cleared, gaps, replays, resyncs, malformed_messages/events, lag_ms, keys, last_seq, ..."""

    def wait_for_seq(self, seq: int, timeout: float = 5.0) -> bool:
        """Waits until a message with sequence >= seq has been applied; False on timeout."""

    def stop(self) -> None:
        """Stops ingesting and closes the sockets (idempotent). The index keeps its keys."""

    @property
    def running(self) -> bool: ...
    def __enter__(self) -> EventMirror: ...
    def __exit__(self, exc_type: object | None, exc: object | None, tb: object | None) -> None: ...

class EventMirrorLock:
    """What EventMirror.lock() returns: `with mirror.lock(): ...`."""

    def __enter__(self) -> EventMirrorLock: ...
    def __exit__(self, exc_type: object | None, exc: object | None, tb: object | None) -> None: ...

def mirror_available() -> bool:
    """Whether this build has EventMirror (ZeroMQ and msgpack-cxx were found at build time)."""

def build_info() -> dict[str, object]:
    """
    What this build and machine offer: 'cuda' (built with nvcc), 'gpu_available' (a CUDA device can be used: BlockIndex(device='cuda') and device-array batches work), 'device' (the device, or why there is none) and 'slot_hash' (how the CPU index hashes its keys: 'aes-ni', 'armv8-aes' or 'table').
    """

def hash_prompt(tokens: IntArray, hash_block_size: int, root: bytes | None = None) -> numpy.ndarray:
    """
    prefixhit's own block hashes for a token prompt: uint8 [floor(len(tokens) / hash_block_size), 32], a SHA-256 chain h[i] = SHA-256(h[i-1] || block i's tokens as little-endian int32) starting from `root` (32 zero bytes by default; a cache salt can go there). Prompts that share a prefix share its digests. Runtimes with their own hash chain (vLLM's) pass theirs instead.
    """

#: What a lookup reads the store from.
Store = (
    set[tuple[int, bytes]]
    | frozenset[tuple[int, bytes]]
    | Iterable[tuple[int, bytes]]
    | KeySet
    | BlockIndex
    | PlanAnswers
)

# ---- Mooncake store keys and remote mode (store.cpp; prefixhit.store drives them) ----------

class StoreLayout:
    """How a deployment names its Mooncake store keys: cache prefix, model name and, per KV-cache group, the rank namespaces a block must be in."""

    def __init__(self, coordinator: Coordinator, model_name: str, *, cache_prefix: str = "", tp_size: int = 1, pcp_size: int = 1, dcp_size: int = 1, pp_size: int = 1, num_kv_heads: int = 1, namespaces: Sequence[Sequence[tuple[int, int, int, int]]] | None = None) -> None: ...
    @property
    def model_name(self) -> str: ...
    @property
    def cache_prefix(self) -> str: ...
    @property
    def namespaces(self) -> list[list[tuple[int, int, int, int]]]: ...
    def key(self, group_id: int, digest: bytes, namespace: tuple[int, int, int, int] | None = None) -> str: ...
    def keys(self, group_id: int, digest: bytes) -> list[str]: ...

def parse_store_key(key: str) -> dict[str, object] | None:
    """Takes a vLLM Mooncake store key apart (cache_prefix, model_name, namespace, has_group, group_id, digest), or None."""

class RemoteLookup:
    """One remote lookup of a batch, round by round."""

    @staticmethod
    def batch(coordinator: Coordinator, layout: StoreLayout, digests: Digests, offsets: IntArray, max_lengths: IntArray, *, apply_eagle: IntArray | None = None, multi_round: bool = False, max_rounds: int = 6) -> RemoteLookup: ...
    @staticmethod
    def worker(coordinator: Coordinator, layout: StoreLayout, digests: Digests, offsets: IntArray, num_tokens: IntArray, *, multi_round: bool = False, max_rounds: int = 6) -> RemoteLookup: ...
    @property
    def done(self) -> bool: ...
    @property
    def pending_keys(self) -> list[str]: ...
    def answer(self, results: IntArray) -> None: ...
    @property
    def stats(self) -> dict[str, object]: ...
    def result(self, *, gpu: bool = False) -> BatchLookupResult: ...
    def hit_lengths(self) -> list[int]: ...
    def presence_table(self) -> numpy.ndarray: ...

# ---- router mode (issue 12; docs/router.md) ---------------------------------------------------

class ResidencyIndex:
    """Which workers (and tiers) hold which (namespace, group_id, key) entries. Thread-safe;
    each call is atomic and a failed call applies nothing."""

    def __init__(
        self, num_workers: int, num_tiers: int = 1, *, initial_capacity: int = 65536, seed: int = 0
    ) -> None: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def num_tiers(self) -> int: ...
    def insert(
        self, worker: int, group_id: int, keys: Digests, *, tier: int = 0, namespace: int = 0, digest_size: int = 32
    ) -> int: ...
    def erase(
        self, worker: int, group_id: int, keys: Digests, *, tier: int = 0, namespace: int = 0, digest_size: int = 32
    ) -> int: ...
    def contains(
        self, worker: int, group_id: int, keys: Digests, *, namespace: int = 0, digest_size: int = 32, tier_mask: int = 0xFFFFFFFF
    ) -> numpy.ndarray: ...
    def clear_worker(self, worker: int) -> None: ...
    def all_blocks_cleared(self, worker: int) -> None: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def memory(self) -> dict[str, int | float]: ...

class RouterScores:
    """score_workers' result: int64 arrays [R, W] and [R, W, G], and the scorer's cost counters."""

    @property
    def num_requests(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def num_groups(self) -> int: ...
    @property
    def hit_lengths(self) -> numpy.ndarray: ...
    @property
    def num_blocks(self) -> numpy.ndarray: ...
    @property
    def num_placeholders(self) -> numpy.ndarray: ...
    @property
    def classes(self) -> int: ...
    @property
    def index_reads(self) -> int: ...
    @property
    def probes(self) -> int: ...

def score_workers(
    coordinator: Coordinator,
    digests: Digests,
    offsets: IntArray,
    max_lengths: int | IntArray,
    residency: ResidencyIndex,
    *,
    apply_eagle: bool | Sequence[bool] | numpy.ndarray | None = None,
    namespace: int = 0,
    tier_mask: int = 0xFFFFFFFF,
    num_threads: int = 0,
    gpu: bool = False,
) -> RouterScores:
    """Every worker's exact hit for every request (result [r, w] equals find_longest_cache_hit
    on worker w's own keys), without the GIL. gpu=True scores on the GPU (same results and
    errors); BackendUnavailableError without a CUDA device."""

def top_k_workers(
    hit_lengths: numpy.ndarray | RouterScores, k: int, load: Sequence[float] | numpy.ndarray | None = None
) -> numpy.ndarray:
    """int32 [R, k]: longest hit first, then lowest load, then lowest id; -1 past the last worker."""
