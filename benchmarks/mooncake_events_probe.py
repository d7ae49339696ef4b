#!/usr/bin/env python3
"""Does this mooncake_master publish KV events? Starts one with every KV-event flag its --help
lists as needed, subscribes to the endpoint, drives every write path of the Python client, and
reports what came out. docs/perf/store.md records the result for the PyPI master.

    python benchmarks/mooncake_events_probe.py [--wait 2]

Checks, in order: the binary's libzmq dependency (ldd), the startup log's KV-event lines, a TCP
connect to the PUB endpoint, messages received by a SUB socket (topic ""), and the master's
/kv_events/status on its metrics port. Exits 0 either way; prints "publishes: yes/no".
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
from mooncake_fixture import free_port, master_binary, running_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=float, default=2.0, help="seconds to listen after each step")
    args = ap.parse_args()
    binary = master_binary()
    if binary is None:
        raise SystemExit("no mooncake_master (pip install mooncake-transfer-engine-non-cuda)")
    elf = binary
    with open(binary, "rb") as f:
        if f.read(4) != b"\x7fELF":  # a launcher script (pyenv shim): the wheel's own binary
            import mooncake

            elf = str(Path(mooncake.__file__).parent / "mooncake_master")
    ldd = subprocess.run(["ldd", elf], capture_output=True, text=True).stdout
    print(f"binary {elf}: links libzmq: {'libzmq' in ldd}")
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    flags = ["-enable_kv_events=true", f"-kv_events_bind_endpoint={endpoint}",
             "-kv_events_backend_id=store-node-1", "-kv_events_queue_capacity=0"]
    print("flags:", " ".join(flags))
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    received: list[list[bytes]] = []

    def drain(step: str) -> None:
        end = time.time() + args.wait
        n = len(received)
        while time.time() < end:
            if sub.poll(50):
                received.append(sub.recv_multipart())
        print(f"  {step}: {len(received) - n} messages")

    with running_store(lease_ttl_ms=200, extra_args=flags) as (master, store):
        log = Path(master.workdir, "master.log").read_text(errors="replace")
        lines = [ln for ln in log.splitlines() if "kv_event" in ln.lower()]
        print("startup log lines naming kv_events:")
        for ln in lines:
            at = ln.lower().find("kv_event")
            print("  ..." + ln[max(0, at - 20):at + 200])
        with socket.socket() as s:
            s.settimeout(1.0)
            listening = s.connect_ex(("127.0.0.1", port)) == 0
        print(f"PUB endpoint {endpoint} accepts TCP connections: {listening}")
        sub.connect(endpoint)
        time.sleep(0.5)  # slow joiner
        drain("connect")
        print("put:", store.put("probe-1", b"x" * 64))
        drain("after put")
        print("put_batch:", store.put_batch([f"probe-b{i}" for i in range(8)], [b"y"] * 8))
        drain("after put_batch")
        print("batch_is_exist:", store.batch_is_exist(["probe-1", "probe-b0"]))
        time.sleep(0.5)  # past the 200 ms lease
        print("remove:", store.remove("probe-1"))
        drain("after remove")
        print("remove_all:", store.remove_all())
        drain("after remove_all")
        try:
            url = f"http://127.0.0.1:{master.metrics_port}/kv_events/status"
            with urllib.request.urlopen(url, timeout=2) as r:
                print(f"GET /kv_events/status: {json.loads(r.read())}")
        except Exception as e:  # noqa: BLE001 - report whatever the master answers
            print(f"GET /kv_events/status failed: {e}")
    sub.close()
    ctx.term()
    print(f"publishes: {'yes' if received else 'no'} ({len(received)} messages)")


if __name__ == "__main__":
    main()
