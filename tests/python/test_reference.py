"""The plain-Python reference of benchmarks/reference/ (the denominator of the speed ratios)
reproduces every conformance vector of both sets, so its timings are a faithful reference's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from vector_runner import REPO_ROOT, digest, load_cases

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "reference"))
import mooncake_reference as ref  # noqa: E402

SETS = {
    "pr49069": REPO_ROOT / "tests" / "data" / "conformance",
    "vllm-0.33": REPO_ROOT / "tests" / "data" / "conformance-vllm-0.33",
}


def build(config: dict[str, Any]) -> ref.MooncakeStoreCoordinator:
    return ref.MooncakeStoreCoordinator(
        config["groups"], config["scheduler_block_size"], config["hash_block_size"],
        config["use_eagle"], config["retention_interval"],
        enable_partial_hash_hits=config.get("enable_partial_hash_hits"),
        semantics=config.get("semantics", "pr49069"))


def run_op(coord: ref.MooncakeStoreCoordinator, op: dict[str, Any], hashes: list[bytes]) -> Any:
    kind = op["op"]
    try:
        if kind == "find_longest_cache_hit":
            pool = ref.ExternalCachedBlockPool(
                coord.hash_block_size, {(int(g), digest(h)) for g, h in op["exists"]})
            masks, hit = coord.find_longest_cache_hit(
                hashes, op["max_length"], pool, apply_eagle=op["apply_eagle"])
            return {"hit_length": hit, "masks": list(masks)}
        if kind == "load_mask":
            return {"masks": list(coord.load_mask(hashes, op["token_len"]))}
        if kind == "store_mask":
            return {"masks": list(coord.store_mask(op["aligned_token_len"], op["start_token"],
                                                   op["num_prompt_tokens"]))}
        if kind == "lookup_mask":
            return {"masks": list(coord.lookup_mask(op["aligned_token_len"]))}
        if kind == "align_lookup_length":
            return {"length": coord.align_lookup_length(op["length"])}
        if kind == "chunk_keys":
            spec = {"block_size": op["block_size"]}
            return {"keys": [k.hex() for k in coord.block_hashes_for_spec(hashes, spec)]}
    except ref.ReferenceError as e:
        return {"error": e.kind}
    raise ValueError(kind)


def files() -> list[Path]:
    return [p for d in SETS.values() for p in sorted(d.glob("*.json"))]


@pytest.mark.parametrize("path", files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reference_reproduces_vectors(path: Path) -> None:
    failures = []
    cases = load_cases(path)
    for case in cases:
        want_config = case["expect_config"]
        try:
            coord = build(case["config"])
        except ref.ReferenceError as e:
            if want_config.get("error") != e.kind:
                failures.append(f"{case['name']}: config error {e.kind}")
            continue
        if "error" in want_config:
            failures.append(f"{case['name']}: construction succeeded")
            continue
        got_config = {
            "eagle_group_ids": sorted(coord.eagle_group_ids),
            "spec_groups": [[ids, k in coord.eagle_attn_group_indices]
                            for k, (_, ids) in enumerate(coord.attention_groups)],
            "enable_partial_hash_hits": coord.enable_partial_hash_hits,
            "lookup_alignment": coord.lcm_block_size,
        }
        bad = [k for k, v in want_config.items() if got_config.get(k) != v]
        if bad:
            failures.append(f"{case['name']}: config {bad}")
            continue
        hashes = [digest(h) for h in case.get("hashes", [])]
        for i, op in enumerate(case["ops"]):
            want = op["expect"]
            if "error" in want:
                want = {"error": want["error"]}
            elif op["op"] == "chunk_keys":
                want = {"keys": [digest(k).hex() for k in want["keys"]]}
            got = run_op(coord, op, hashes)
            if got != want:
                failures.append(f"{case['name']} op {i} ({op['op']}): want {want} got {got}")
                break
    assert not failures, f"{len(failures)} of {len(cases)} cases differ: " + "\n".join(failures[:5])
