"""Shared fixtures of the Python suite.

Random tests draw a fresh seed every run (or take PREFIXHIT_SEED to replay one) and put it in
every failure message, so a failure can be reproduced exactly.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prefixhit  # noqa: E402

# Conformance totals, filled by test_vectors.py and printed at the end of the run.
VECTOR_TOTALS: dict[str, int] = {"files": 0, "cases": 0, "ops": 0}


def gpu_available() -> bool:
    return bool(prefixhit.build_info().get("gpu_available"))


requires_gpu = pytest.mark.skipif(
    not gpu_available(), reason=f"no usable CUDA device ({prefixhit.build_info()['device']})"
)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    value = int(os.environ.get("PREFIXHIT_SEED") or secrets.randbits(32))
    request.node.user_properties.append(("seed", value))
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[type-arg]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, value in item.user_properties:
            if name == "seed":
                report.sections.append(
                    ("seed", f"random seed {value}: rerun with PREFIXHIT_SEED={value}")
                )


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    if VECTOR_TOTALS["cases"]:
        terminalreporter.write_line(
            "conformance vectors through the Python API: "
            f"{VECTOR_TOTALS['cases']} cases, {VECTOR_TOTALS['ops']} ops passed "
            f"in {VECTOR_TOTALS['files']} files"
        )
