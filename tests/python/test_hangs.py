"""Sizes and factors that used to hang the interpreter (issue 13, item 4), each run in a
subprocess with a 10-second deadline: the call must raise a clear prefixhit error instead of
spinning with the GIL held (where Ctrl-C does nothing)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import prefixhit
from prefixhit.errors import PrefixhitError
FA = {"kind": "full_attention", "block_size": 16, "num_kv_heads": 8, "head_size": 128,
      "dtype": "bfloat16"}
def refused(call):
    try:
        call()
    except PrefixhitError as e:
        print("REFUSED", e.kind, e)
        return
    print("ACCEPTED")
"""

CASES = {
    # A shift overflow spun forever computing the bucket limit.
    "max_capacity 2**63": "refused(lambda: prefixhit.BlockIndex(max_capacity=2**63))",
    "max_capacity 2**64-1": "refused(lambda: prefixhit.BlockIndex(max_capacity=2**64 - 1))",
    # The first insert spun holding the index lock.
    "max_load_factor 1e-19": (
        "refused(lambda: prefixhit.BlockIndex(max_load_factor=1e-19).insert(0, [bytes(32)]))"
    ),
    # The mask size limit was not applied to load_mask's hash count.
    "load_mask 2**62": (
        "refused(lambda: prefixhit.Coordinator([FA], 16, 16, False).load_mask(2**62, 2**62 - 1))"
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_absurd_sizes_are_refused_quickly(name: str) -> None:
    script = textwrap.dedent(PRELUDE) + CASES[name] + "\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still running after 10 s (a hang)")
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr}"
    assert done.stdout.startswith("REFUSED invalid_argument"), f"{name}: {done.stdout}{done.stderr}"
