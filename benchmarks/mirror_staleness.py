"""Mirror staleness: the time from a publisher sending a BlockStored to the key being visible to
a lookup on the mirrored BlockIndex (put -> hit), from a local pyzmq publisher over tcp loopback.

    python benchmarks/mirror_staleness.py [--puts 2000] [--interval-us 200]

Prints p50/p90/p99/max in microseconds. docs/perf/mirror.md records the figures.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time

import msgpack
import zmq

import prefixhit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--puts", type=int, default=2000)
    ap.add_argument("--interval-us", type=float, default=200.0, help="pause between puts")
    args = ap.parse_args()

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    index = prefixhit.BlockIndex()
    mirror = prefixhit.EventMirror(index, [f"tcp://127.0.0.1:{port}"])
    time.sleep(0.3)
    samples = []
    for i in range(args.puts):
        h = (i + 1) * 0x9E3779B97F4A7C15 % (1 << 64)
        key = h.to_bytes(8, "big")  # an int hash is a width-8 key: its big-endian bytes
        event = {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": None,
                 "token_ids": [], "block_size": 16, "medium": "GPU", "group_idx": 0}
        payload = msgpack.packb([time.time(), [event], 0])
        t0 = time.perf_counter()
        pub.send_multipart([b"kv", struct.pack(">Q", i), payload])
        while (0, key) not in index:
            if time.perf_counter() - t0 > 5:
                raise SystemExit(f"put {i} never became visible: {mirror.stats()}")
        samples.append((time.perf_counter() - t0) * 1e6)
        time.sleep(args.interval_us / 1e6)
    mirror.stop()
    samples.sort()

    def q(p: float) -> float:
        return samples[min(len(samples) - 1, int(p * len(samples)))]

    print(f"staleness put->hit over {len(samples)} puts: p50 {statistics.median(samples):.0f} us, "
          f"p90 {q(0.90):.0f} us, p99 {q(0.99):.0f} us, max {samples[-1]:.0f} us")
    print(f"mirror stats: {mirror.stats()}")


if __name__ == "__main__":
    main()
