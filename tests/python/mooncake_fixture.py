"""A real Mooncake store for the tests: its own mooncake_master on free loopback ports, and a
client connected over TCP. Both are stopped and cleaned up afterwards.

The store tests run whenever `mooncake.store` imports (PyPI mooncake-transfer-engine-non-cuda,
which needs Debian's libibverbs1, librdmacm1 and libnuma1). Without it they skip, unless
PREFIXHIT_REQUIRE_MOONCAKE=1 (set by .ci/run), where a missing store is a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest


def mooncake_available() -> tuple[bool, str]:
    try:
        from mooncake.store import MooncakeDistributedStore  # noqa: F401
    except Exception as error:  # ImportError, or OSError for a missing shared library
        return False, f"mooncake.store does not import: {error}"
    if master_binary() is None:
        return False, "mooncake_master is not on PATH nor next to the interpreter"
    return True, ""


def require_mooncake() -> None:
    """Skips the calling test without a Mooncake store, or fails under CI's requirement."""
    ok, why = mooncake_available()
    if ok:
        return
    if os.environ.get("PREFIXHIT_REQUIRE_MOONCAKE") == "1":
        pytest.fail(f"PREFIXHIT_REQUIRE_MOONCAKE=1 but {why}")
    pytest.skip(why)


def master_binary() -> str | None:
    beside = Path(sys.executable).parent / "mooncake_master"
    if beside.is_file():
        return str(beside)
    return shutil.which("mooncake_master")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mooncake_master exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"mooncake_master did not listen on {port} within {timeout} s")


class MooncakeMaster:
    """A mooncake_master process on free loopback ports."""

    def __init__(self, lease_ttl_ms: int = 200, extra_args: Sequence[str] = ()) -> None:
        binary = master_binary()
        assert binary is not None
        self.rpc_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.workdir = tempfile.mkdtemp(prefix="prefixhit-mooncake-")
        self.log = open(os.path.join(self.workdir, "master.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                binary,
                f"-rpc_port={self.rpc_port}",
                "-rpc_address=127.0.0.1",
                "-enable_http_metadata_server=true",
                "-http_metadata_server_host=127.0.0.1",
                f"-http_metadata_server_port={self.http_port}",
                f"-metrics_port={self.metrics_port}",
                # A short lease, so that the tests can remove what they just put.
                f"-default_kv_lease_ttl={lease_ttl_ms}",
                *extra_args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        try:
            _wait_listening(self.rpc_port, self.proc, 20.0)
            _wait_listening(self.http_port, self.proc, 20.0)
        except Exception:
            self.stop()
            raise
        self.lease_ttl_s = lease_ttl_ms / 1000.0

    def client(self, segment: int = 64 << 20, buffer: int = 16 << 20):
        from mooncake.store import MooncakeDistributedStore

        store = MooncakeDistributedStore()
        rc = store.setup(
            "127.0.0.1",
            f"http://127.0.0.1:{self.http_port}/metadata",
            segment,
            buffer,
            "tcp",
            "",
            f"127.0.0.1:{self.rpc_port}",
        )
        if rc != 0:
            raise RuntimeError(f"MooncakeDistributedStore.setup failed with {rc}")
        return store

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def running_store(
    lease_ttl_ms: int = 200, extra_args: Sequence[str] = ()
) -> Iterator[tuple[MooncakeMaster, object]]:
    """A master (with `extra_args` on its command line) and one connected client; both closed
    on exit."""
    master = MooncakeMaster(lease_ttl_ms, extra_args)
    store = None
    try:
        store = master.client()
        yield master, store
    finally:
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        master.stop()
