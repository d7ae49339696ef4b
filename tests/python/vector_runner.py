"""Runs conformance vectors (SEMANTICS.md 9) through the Python API of prefixhit.

Written from the vector format alone: every case builds a Coordinator from its config, checks
the derived configuration, then evaluates each op against a freshly built store and compares
the result (errors compare by kind, as the format says).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import prefixhit

REPO_ROOT = Path(__file__).resolve().parents[2]


def vectors_dir() -> Path:
    """$PREFIXHIT_VECTORS, else the vendored tests/data/conformance of the repository."""
    env = os.environ.get("PREFIXHIT_VECTORS")
    if env:
        return Path(env)
    return REPO_ROOT / "tests" / "data" / "conformance"


def vectors_033_dir() -> Path:
    """$PREFIXHIT_VECTORS_033, else the vendored vLLM 0.33 set (SEMANTICS.md 11)."""
    env = os.environ.get("PREFIXHIT_VECTORS_033")
    if env:
        return Path(env)
    return REPO_ROOT / "tests" / "data" / "conformance-vllm-0.33"


def vectors_extra_dir() -> Path:
    """$PREFIXHIT_VECTORS_EXTRA, else the project's own vectors in tests/data/extra."""
    env = os.environ.get("PREFIXHIT_VECTORS_EXTRA")
    if env:
        return Path(env)
    return REPO_ROOT / "tests" / "data" / "extra"


def vector_files(directory: Path | None = None) -> list[Path]:
    directory = directory or vectors_dir()
    if directory.is_file():
        return [directory]
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def digest(hex_text: str) -> bytes:
    """A 32-byte digest from hex; the vLLM unit test's 4-byte toy hashes are zero-padded on the
    right, exactly as the C++ runner does."""
    raw = bytes.fromhex(hex_text)
    if len(raw) == 4:
        return raw + bytes(28)
    if len(raw) != 32:
        raise ValueError(f"digest {hex_text!r} is neither 32 nor 4 bytes")
    return raw


# How a case's store is handed to the lookup. Each factory gets the (group_id, key) pairs.
StoreFactory = Callable[[list[tuple[int, bytes]]], Any]


def set_store(pairs: list[tuple[int, bytes]]) -> Any:
    return set(pairs)


def key_set_store(pairs: list[tuple[int, bytes]]) -> Any:
    return prefixhit.KeySet(pairs)


def list_store(pairs: list[tuple[int, bytes]]) -> Any:
    return list(pairs)


def block_index_store(pairs: list[tuple[int, bytes]]) -> Any:
    index = prefixhit.BlockIndex("cpu", initial_capacity=1024, seed=12345)
    # Ids the configuration does not have can never match; the index only takes valid ids.
    for gid, key in pairs:
        if 0 <= gid < 32:
            index.insert(gid, [key])
    return index


STORES: dict[str, StoreFactory] = {
    "set": set_store,
    "keyset": key_set_store,
    "list": list_store,
    "block_index": block_index_store,
}


def build_coordinator(config: dict[str, Any], as_spec_objects: bool) -> prefixhit.Coordinator:
    groups: list[Any] = config["groups"]
    if as_spec_objects:
        groups = [prefixhit.GroupSpec.from_dict(g) for g in groups]
    # A config without "semantics" is a pr49069 case, where enable_partial_hash_hits is derived
    # and informational; under vllm-0.33 it is the coordinator's input (SEMANTICS.md 11.1).
    semantics = config.get("semantics", "pr49069")
    partial = config.get("enable_partial_hash_hits") if semantics == "vllm-0.33" else None
    return prefixhit.Coordinator(
        groups,
        scheduler_block_size=config["scheduler_block_size"],
        hash_block_size=config["hash_block_size"],
        use_eagle=config["use_eagle"],
        retention_interval=config["retention_interval"],
        semantics=semantics,
        enable_partial_hash_hits=partial,
    )


def run_op(
    op: dict[str, Any], coord: prefixhit.Coordinator, hashes: list[bytes], store: StoreFactory
) -> dict[str, Any]:
    kind = op["op"]
    try:
        if kind == "find_longest_cache_hit":
            pairs = [(int(g), digest(h)) for g, h in op["exists"]]
            masks, hit = coord.find_longest_cache_hit(
                hashes, op["max_length"], store(pairs), apply_eagle=op["apply_eagle"]
            )
            return {"hit_length": hit, "masks": masks}
        if kind == "load_mask":
            return {"masks": coord.load_mask(hashes, op["token_len"])}
        if kind == "store_mask":
            return {
                "masks": coord.store_mask(
                    op["aligned_token_len"], op["start_token"], op["num_prompt_tokens"]
                )
            }
        if kind == "lookup_mask":
            return {"masks": coord.lookup_mask(op["aligned_token_len"])}
        if kind == "align_lookup_length":
            return {"length": coord.align_lookup_length(op["length"])}
        if kind == "chunk_keys":
            return {"keys": [k.hex() for k in coord.chunk_keys(hashes, op["block_size"])]}
    except prefixhit.PrefixhitError as e:
        return {"error": e.kind}
    raise ValueError(f"unknown op {kind!r}")


def expected(op: dict[str, Any]) -> dict[str, Any]:
    expect = op["expect"]
    if op["op"] == "chunk_keys" and "keys" in expect:
        return {"keys": [digest(k).hex() for k in expect["keys"]]}
    if "error" in expect:
        return {"error": expect["error"]}
    return expect


@dataclass
class CaseOutcome:
    name: str
    ops: int = 0
    failure: str | None = None


def run_case(
    case: dict[str, Any], store: StoreFactory = set_store, as_spec_objects: bool = False
) -> CaseOutcome:
    outcome = CaseOutcome(case.get("name", "<unnamed>"))
    expect_config = case["expect_config"]
    try:
        coord = build_coordinator(case["config"], as_spec_objects)
    except prefixhit.PrefixhitError as e:
        if expect_config.get("error") != e.kind:
            outcome.failure = f"config: expected {expect_config}, got error {e.kind}: {e}"
        return outcome
    if "error" in expect_config:
        outcome.failure = f"config: expected error {expect_config['error']}, construction succeeded"
        return outcome
    actual_config = {
        "eagle_group_ids": coord.eagle_group_ids,
        "spec_groups": coord.spec_groups,
        "enable_partial_hash_hits": coord.enable_partial_hash_hits,
        "lookup_alignment": coord.lookup_alignment,
    }
    for key, value in expect_config.items():
        if actual_config.get(key) != value:
            outcome.failure = f"config.{key}: expected {value}, got {actual_config.get(key)}"
            return outcome
    hashes = [digest(h) for h in case.get("hashes", [])]
    for i, op in enumerate(case["ops"]):
        want = expected(op)
        got = run_op(op, coord, hashes, store)
        outcome.ops += 1
        if got != want:
            params = {k: v for k, v in op.items() if k not in ("expect", "exists")}
            outcome.failure = f"op {i} {params}: expected {want}, got {got}"
            return outcome
    return outcome


@dataclass
class FileOutcome:
    path: Path
    cases: list[CaseOutcome] = field(default_factory=list)

    @property
    def failures(self) -> list[CaseOutcome]:
        return [c for c in self.cases if c.failure is not None]


def load_cases(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise ValueError(f"{path}: not a conformance document")
    fmt = doc.get("format", "prefixhit-conformance/1")
    if fmt != "prefixhit-conformance/1":
        raise ValueError(f"{path}: unsupported format {fmt!r}")
    return doc["cases"]


def run_file(
    path: Path, store_for: Callable[[int], StoreFactory] = lambda i: set_store
) -> FileOutcome:
    """Runs every case of a file. Case i uses store_for(i) and, on odd i, GroupSpec objects
    instead of dicts, so both constructor spellings are covered."""
    out = FileOutcome(path)
    for i, case in enumerate(load_cases(path)):
        out.cases.append(run_case(case, store_for(i), as_spec_objects=bool(i % 2)))
    return out


def iter_all(paths: Iterable[Path]) -> Iterable[FileOutcome]:
    for path in paths:
        yield run_file(path)
