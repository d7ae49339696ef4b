"""Every conformance vector, through the Python API.

Three folders: $PREFIXHIT_VECTORS (so held-back sets run the same way), else
tests/data/conformance in the repository (pr49069); $PREFIXHIT_VECTORS_033, else
tests/data/conformance-vllm-0.33 (SEMANTICS.md 11); $PREFIXHIT_VECTORS_EXTRA, else the
project's own tests/data/extra. Each file is run twice: once
with a Python set as the store (the reference's own type) and once rotating through the
other store types (KeySet, a list of pairs, the CPU BlockIndex)."""

from __future__ import annotations

from pathlib import Path

import pytest

import vector_runner as vr
from conftest import VECTOR_TOTALS

FOLDERS = {
    "pr49069": vr.vectors_dir(),
    "vllm-0.33": vr.vectors_033_dir(),
    "extra": vr.vectors_extra_dir(),
}
FILES = [path for folder in FOLDERS.values() for path in vr.vector_files(folder)]
IDS = [
    f"{name}/{path.stem}" for name, folder in FOLDERS.items() for path in vr.vector_files(folder)
]


@pytest.mark.parametrize("name", list(FOLDERS))
def test_vectors_found(name: str) -> None:
    assert vr.vector_files(FOLDERS[name]), f"no conformance vectors in {FOLDERS[name]}"


def _report(outcome: vr.FileOutcome) -> str:
    lines = [f"{len(outcome.failures)} of {len(outcome.cases)} cases failed in {outcome.path}"]
    lines += [f"  {c.name}: {c.failure}" for c in outcome.failures[:10]]
    return "\n".join(lines)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_vector_file(path: Path) -> None:
    outcome = vr.run_file(path)
    assert outcome.cases, f"{path} has no cases"
    assert not outcome.failures, _report(outcome)
    VECTOR_TOTALS["files"] += 1
    VECTOR_TOTALS["cases"] += len(outcome.cases)
    VECTOR_TOTALS["ops"] += sum(c.ops for c in outcome.cases)


STORE_ROTATION = [vr.key_set_store, vr.list_store, vr.block_index_store]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_vector_file_other_stores(path: Path) -> None:
    outcome = vr.run_file(path, lambda i: STORE_ROTATION[i % len(STORE_ROTATION)])
    assert not outcome.failures, _report(outcome)
