"""Every conformance vector, through the Python API.

The directory is $PREFIXHIT_VECTORS (so held-back sets run the same way), else
tests/data/conformance in the repository. Each file is run twice: once
with a Python set as the store (the reference's own type) and once rotating through the
other store types (KeySet, a list of pairs, the CPU BlockIndex)."""

from __future__ import annotations

from pathlib import Path

import pytest

import vector_runner as vr
from conftest import VECTOR_TOTALS

FILES = vr.vector_files()


def test_vectors_found() -> None:
    assert FILES, f"no conformance vectors in {vr.vectors_dir()} (set PREFIXHIT_VECTORS)"


def _report(outcome: vr.FileOutcome) -> str:
    lines = [f"{len(outcome.failures)} of {len(outcome.cases)} cases failed in {outcome.path}"]
    lines += [f"  {c.name}: {c.failure}" for c in outcome.failures[:10]]
    return "\n".join(lines)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_vector_file(path: Path) -> None:
    outcome = vr.run_file(path)
    assert outcome.cases, f"{path} has no cases"
    assert not outcome.failures, _report(outcome)
    VECTOR_TOTALS["files"] += 1
    VECTOR_TOTALS["cases"] += len(outcome.cases)
    VECTOR_TOTALS["ops"] += sum(c.ops for c in outcome.cases)


STORE_ROTATION = [vr.key_set_store, vr.list_store, vr.block_index_store]


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_vector_file_other_stores(path: Path) -> None:
    outcome = vr.run_file(path, lambda i: STORE_ROTATION[i % len(STORE_ROTATION)])
    assert not outcome.failures, _report(outcome)
