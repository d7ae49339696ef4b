"""EventMirror against a real publisher: a pyzmq PUB socket and ROUTER replay socket on free
loopback ports, speaking vLLM's KV-event framing with msgpack payloads (and the Mooncake
master's event maps, as docs/mirror.md documents them: the PyPI master is built without its
publisher, so its messages are built here with msgpack).
"""

from __future__ import annotations

import random
import statistics
import struct
import threading
import time

import numpy as np
import pytest

import prefixhit

from conftest import gpu_available, requires_gpu

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

pytestmark = pytest.mark.skipif(
    not prefixhit.mirror_available(), reason="prefixhit built without the event mirror"
)

END = b"\xff" * 8


class Publisher:
    """PUB + ROUTER replay, framed as vLLM's ZmqEventPublisher frames them."""

    def __init__(self, keep: int = 100_000, topic_frame: bool = True, first_seq: int = 0):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 0)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        rport = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.replay_endpoint = f"tcp://127.0.0.1:{rport}"
        self.keep = keep
        self.topic_frame = topic_frame
        self.history: dict[int, bytes] = {}
        self.seq = first_seq
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def publish(self, payload: bytes, drop: bool = False) -> int:
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.history[seq] = payload
            while len(self.history) > self.keep:
                del self.history[min(self.history)]
        if not drop:
            self.pub.send_multipart([b"kv", struct.pack(">Q", seq), payload])
        return seq

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self.stopping:
            if not poller.poll(20):
                continue
            ident, empty, start = self.router.recv_multipart()
            (start,) = struct.unpack(">Q", start)
            with self.lock:
                items = sorted((s, p) for s, p in self.history.items() if s >= start)
            topic = [b"kv"] if self.topic_frame else []
            for s, p in items:
                self.router.send_multipart([ident, b"", *topic, struct.pack(">Q", s), p])
            self.router.send_multipart([ident, b"", *topic, END, b""])

    def close(self) -> None:
        self.stopping = True
        self.thread.join()
        self.pub.close()
        self.router.close()
        self.ctx.term()


@pytest.fixture
def publisher():
    pubs: list[Publisher] = []

    def make(**kwargs) -> Publisher:
        p = Publisher(**kwargs)
        pubs.append(p)
        return p

    yield make
    for p in pubs:
        p.close()


def stored(hashes, group=0, medium="GPU", positional=False):
    if positional:
        # BlockStored fields in order: block_hashes, parent_block_hash, token_ids, block_size,
        # lora_id, medium, lora_name, extra_keys, group_idx
        return ["BlockStored", list(hashes), None, [1, 2, 3], 16, None, medium, None, None, group]
    return {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "parent_block_hash": None,
        "token_ids": [1, 2, 3],
        "block_size": 16,
        "lora_id": None,
        "medium": medium,
        "group_idx": group,
    }


def removed(hashes, group=0, medium="GPU", positional=False):
    if positional:
        return ["BlockRemoved", list(hashes), medium, group]
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium,
            "group_idx": group}


def cleared(positional=False):
    return ["AllBlocksCleared"] if positional else {"type": "AllBlocksCleared"}


def batch(*events, ts=None) -> bytes:
    return msgpack.packb([time.time() if ts is None else ts, list(events), 0], use_bin_type=True)


def key_of(h) -> bytes:
    """The index key of an event hash: an int hash is the 8-byte digest of its big-endian bytes
    (width 8, a key of its own), a bytes hash is itself."""
    if isinstance(h, int):
        return h.to_bytes(8, "big")
    return bytes(h)


def fa_swa_coordinator():
    """Full attention and a 32-token sliding window, block size 16: the random-stream tests'."""
    return prefixhit.Coordinator([{"kind": "full_attention", "block_size": 16},
                                  {"kind": "sliding_window", "block_size": 16,
                                   "sliding_window": 32}],
                                 scheduler_block_size=16, hash_block_size=16)


def connect(index, pub, **kwargs):
    mirror = prefixhit.EventMirror(index, [pub.endpoint], replay=[pub.replay_endpoint],
                                   replay_timeout_ms=2000, **kwargs)
    time.sleep(0.2)  # SUB connect (a missed first message would be replayed anyway)
    return mirror


def publish_until_seen(pub, mirror, first_hash: int) -> int:
    """Publishes stored events of first_hash, first_hash + 1, ... until the mirror applies one
    (SUB connects asynchronously: early messages may go nowhere). Returns how many were sent."""
    for tries in range(1, 51):
        seq = pub.publish(batch(stored([first_hash + tries - 1])))
        if mirror.wait_for_seq(seq, 0.2):
            return tries
    pytest.fail("the mirror never received a message")


@pytest.mark.parametrize("positional", [False, True], ids=["tagged", "positional"])
@pytest.mark.parametrize("hash_form", ["int", "bytes"])
def test_both_encodings_and_hash_forms(publisher, positional, hash_form):
    pub = publisher()
    index = prefixhit.BlockIndex()
    rng = random.Random(7)
    if hash_form == "int":
        hashes = [rng.getrandbits(64) for _ in range(10)]
    else:
        hashes = [rng.randbytes(32) for _ in range(10)]
    with connect(index, pub) as mirror:
        pub.publish(batch(stored(hashes[:6], group=2, positional=positional),
                          stored(hashes[6:], group=1, medium="CPU", positional=positional)))
        pub.publish(batch(removed(hashes[:2], group=2, positional=positional)))
        assert mirror.wait_for_seq(1, 5)
        present = index.contains([2] * 6 + [1] * 4, b"".join(key_of(h) for h in hashes),
                                 digest_size=len(key_of(hashes[0])))
        assert present.tolist() == [False, False] + [True] * 8
        s = mirror.stats()
        assert (s["events_stored"], s["events_removed"], s["hashes_stored"]) == (2, 1, 10)
        assert s["keys"] == 8 and s["index_keys"] == 8 and s["malformed_events"] == 0
        pub.publish(batch(cleared(positional)))
        assert mirror.wait_for_seq(2, 5)
        assert len(index) == 0 and mirror.stats()["events_cleared"] == 1


def test_gap_recovery_by_dropping_messages(publisher):
    pub = publisher()
    index = prefixhit.BlockIndex()
    with connect(index, pub) as mirror:
        for i in range(60):
            pub.publish(batch(stored([i + 1])), drop=(i % 9 == 4))
            time.sleep(0.001)
        assert mirror.wait_for_seq(59, 10)
        s = mirror.stats()
        assert len(index) == 60
        assert s["gaps"] >= 1 and s["replays"] == s["gaps"] and s["replayed_messages"] >= 1
        assert s["resyncs"] == 0 and s["missed_messages"] == 0 and s["last_seq"] == 59
        assert all((0, key_of(i + 1)) in index for i in range(60))


def test_late_join_replays_what_the_publisher_holds(publisher):
    pub = publisher(topic_frame=False)  # older publishers send no topic frame in replies
    for i in range(25):
        pub.publish(batch(stored([1000 + i])))  # before anyone subscribes
    index = prefixhit.BlockIndex()
    with connect(index, pub) as mirror:
        sent = publish_until_seen(pub, mirror, 1)
        s = mirror.stats()
        assert len(index) == 25 + sent and s["gaps"] == 1 and s["resyncs"] == 0


def test_impossible_replay_clears_and_resyncs(publisher):
    pub = publisher(keep=3)
    for i in range(10):
        pub.publish(batch(stored([i + 1])))
    index = prefixhit.BlockIndex()
    with connect(index, pub) as mirror:
        sent = publish_until_seen(pub, mirror, 99)
        s = mirror.stats()
        # The publisher holds the last 3 of 10 + sent messages; everything before is gone.
        assert s["resyncs"] == 1 and s["missed_messages"] == 7 + sent
        assert "resync" in s["last_error"]
        assert len(index) == 3


def test_malformed_events_are_counted_never_fatal(publisher):
    pub = publisher()
    index = prefixhit.BlockIndex()
    with connect(index, pub) as mirror:
        sent = publish_until_seen(pub, mirror, 1000)
        pub.publish(batch(stored([1, 2])))
        pub.publish(b"\xc1 not msgpack")
        pub.publish(msgpack.packb({"not": "a batch"}))
        pub.publish(batch({"type": "BlockStored", "block_hashes": [b"short"]},
                          {"type": "Nope"}, ["BlockStored", [3]],
                          stored([4], group=99), "junk", removed([1])))
        pub.pub.send_multipart([b"kv", b"seq"])  # bad sequence frame
        last = pub.publish(batch(stored([5])))
        assert mirror.wait_for_seq(last, 5)
        s = mirror.stats()
        assert s["malformed_messages"] == 3
        assert s["malformed_events"] == 5
        assert len(index) == sent + 2  # the probes, 2 and 5
        assert (0, key_of(2)) in index and (0, key_of(5)) in index
        assert (0, key_of(1)) not in index


def test_several_endpoints(publisher):
    a, b = publisher(), publisher()
    index = prefixhit.BlockIndex()
    mirror = prefixhit.EventMirror(index, [a.endpoint, b.endpoint],
                                   replay=[a.replay_endpoint, b.replay_endpoint], namespace=3)
    time.sleep(0.2)
    for i in range(50):
        a.publish(batch(stored([i])))
        b.publish(batch(stored([10_000 + i]), ts=time.time()))
    deadline = time.time() + 10
    while len(index) < 100 and time.time() < deadline:
        time.sleep(0.01)
    assert len(index) == 100
    assert index.contains(0, key_of(10_049), namespace=3, digest_size=8).tolist() == [True]
    assert index.contains(0, key_of(10_049), namespace=0, digest_size=8).tolist() == [False]
    mirror.stop()
    assert not mirror.running


def test_mirror_and_plain_set_agree_on_random_streams(publisher, seed):
    """Random stored/removed/cleared streams over several media: lookups through the mirrored
    index and through a plain set of the live keys give identical hits."""
    rng = random.Random(seed)
    coord = fa_swa_coordinator()
    prompts = [[rng.randbytes(32) for _ in range(12)] for _ in range(4)]
    pub = publisher()
    index = prefixhit.BlockIndex()
    counts: dict[tuple[int, bytes, str], int] = {}
    with connect(index, pub) as mirror:
        for step in range(150):
            events = []
            for _ in range(rng.randint(1, 3)):
                kind = rng.random()
                prompt = rng.choice(prompts)
                lo = rng.randrange(len(prompt))
                hashes = prompt[lo:lo + rng.randint(1, 5)]
                group = rng.randrange(2)
                medium = rng.choice(["GPU", "CPU"])
                positional = rng.random() < 0.5
                if kind < 0.02:
                    events.append(cleared(positional))
                    counts.clear()
                elif kind < 0.65:
                    events.append(stored(hashes, group, medium, positional))
                    for h in hashes:
                        counts[(group, h, medium)] = counts.get((group, h, medium), 0) + 1
                else:
                    events.append(removed(hashes, group, medium, positional))
                    for h in hashes:
                        counts[(group, h, medium)] = max(0, counts.get((group, h, medium), 0) - 1)
            seq = pub.publish(batch(*events))
            assert mirror.wait_for_seq(seq, 5), f"seed {seed}"
            plain = {(g, h) for (g, h, _), c in counts.items() if c > 0}
            assert len(index) == len(plain), f"seed {seed} step {step}"
            for prompt in prompts:
                want = coord.find_longest_cache_hit(prompt, 16 * len(prompt) - 1, plain)
                got = coord.find_longest_cache_hit(prompt, 16 * len(prompt) - 1, index)
                assert got == want, f"seed {seed} step {step}"


def mooncake_event(kind: str, key: str, medium: str = "cpu") -> dict:
    # The 0.3.13 master's event map (legacy-compat and object-key fields on, the defaults).
    return {"event_id": 1, "timestamp": int(time.time() * 1000), "event_type": kind,
            "type": "BlockStored" if kind == "stored" else "BlockRemoved",
            "model_name": None, "block_size": None, "additional_salt": None, "lora_name": None,
            "tenant_id": "default", "backend_id": "store-node-1", "group_id": None,
            "medium": medium, "dp_rank": None, "object_key": key, "seq_hashes": [],
            "block_hashes": [], "base_block_idx": 0, "parent_hash": None, "token_ids": None,
            "parent_block_hash": None}


def test_mooncake_master_events_and_the_all_namespaces_rule(publisher):
    pub = publisher(first_seq=1)  # the master numbers from 1 and has no replay socket
    index = prefixhit.BlockIndex()
    digest = bytes(range(32))
    keys = [f"pfx@m@tp_rank:{t}@pcp0@dcp0@pp_rank:0@group:1@{digest.hex()}" for t in range(2)]
    mirror = prefixhit.EventMirror(index, [pub.endpoint], format="mooncake", model="m",
                                   cache_prefix="pfx", ranks=[(0, 0, 0, 0), (1, 0, 0, 0)])

    def send(*events):
        return pub.publish(msgpack.packb([int(time.time() * 1000), list(events), 0]))

    # Empty batches until SUB is connected (the master has no replay: a lost first message
    # would be a gap and a resync, so compare the counters against this point).
    for _ in range(50):
        if mirror.wait_for_seq(send(), 0.2):
            break
    base = mirror.stats()
    seq = send(mooncake_event("stored", keys[0]))
    assert mirror.wait_for_seq(seq, 5)
    assert (1, digest) not in index  # rank 1 lacks it
    send(mooncake_event("stored", keys[1]), mooncake_event("stored", "12345"),
         mooncake_event("stored", keys[1].replace("@m@", "@other@")))
    assert mirror.wait_for_seq(seq + 1, 5)
    assert (1, digest) in index
    assert mirror.stats()["foreign_keys"] == 2
    send(mooncake_event("stored", keys[0], medium="disk"), mooncake_event("removed", keys[0]))
    assert mirror.wait_for_seq(seq + 2, 5)
    assert (1, digest) in index  # the disk replica still holds rank 0's copy
    send(mooncake_event("removed", keys[0], medium="disk"))
    assert mirror.wait_for_seq(seq + 3, 5)
    assert (1, digest) not in index
    s = mirror.stats()
    assert s["gaps"] == base["gaps"] and s["malformed_events"] == 0 and s["lag_ms"] < 60_000
    mirror.stop()


def test_staleness_put_to_hit(publisher):
    """Time from publishing a BlockStored to the key being visible to a lookup."""
    pub = publisher()
    index = prefixhit.BlockIndex()
    samples = []
    with connect(index, pub):
        for i in range(200):
            key = (i + 1) << 20
            t0 = time.perf_counter()
            pub.publish(batch(stored([key])))
            while (0, key_of(key)) not in index:
                if time.perf_counter() - t0 > 5:
                    pytest.fail("a published key never became visible")
            samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    print(f"staleness put->hit: p50 {p50:.0f} us, p99 {p99:.0f} us over {len(samples)} puts")


def test_bad_arguments_raise_typed_errors():
    index = prefixhit.BlockIndex()
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(index, [])
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(index, ["tcp://127.0.0.1:1"], format="sglang")
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(index, ["bogus://x"])
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(object(), ["tcp://127.0.0.1:1"])
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(index, ["tcp://127.0.0.1:1"], namespace=-1)


def test_device_choice_and_typed_errors(publisher):
    pub = publisher()
    with prefixhit.EventMirror(None, [pub.endpoint], device="cpu") as mirror:
        assert mirror.device == "cpu" and mirror.index.device == "cpu"
    with prefixhit.EventMirror(None, [pub.endpoint]) as mirror:  # device="auto"
        assert mirror.device == ("cuda" if gpu_available() else "cpu")
        assert mirror.index.device == mirror.device
    index = prefixhit.BlockIndex()
    with prefixhit.EventMirror(index, [pub.endpoint]) as mirror:
        assert mirror.device == "cpu" and mirror.index is index
        with mirror.lock():
            with pytest.raises(prefixhit.InvalidArgumentError, match="inside"):
                mirror.stats()
            with pytest.raises(prefixhit.InvalidArgumentError, match="inside"):
                mirror.stop()
        assert mirror.running
        assert mirror.stats()["messages"] == 0
    with pytest.raises(prefixhit.InvalidArgumentError, match="'cpu' BlockIndex"):
        prefixhit.EventMirror(index, [pub.endpoint], device="cuda")
    with pytest.raises(prefixhit.InvalidArgumentError, match="device must be"):
        prefixhit.EventMirror(None, [pub.endpoint], device="gpu")
    with pytest.raises(prefixhit.InvalidArgumentError):
        prefixhit.EventMirror(None, [])
    if not gpu_available():
        with pytest.raises(prefixhit.BackendUnavailableError):
            prefixhit.EventMirror(None, [pub.endpoint], device="cuda")


@requires_gpu
def test_cuda_index_mirrors_like_the_cpu_index(publisher, seed):
    """One stream into a 'cpu' and a 'cuda' mirror: lookups through the GPU engine on the device
    index (under mirror.lock(), while events keep arriving) equal the CPU index's and a plain
    set's."""
    rng = random.Random(seed)
    coord = fa_swa_coordinator()
    prompts = [[rng.randbytes(32) for _ in range(12)] for _ in range(6)]
    digests = np.frombuffer(b"".join(b"".join(p) for p in prompts), dtype=np.uint8).reshape(-1, 32)
    offsets = np.arange(0, 12 * (len(prompts) + 1), 12, dtype=np.int64)
    max_lengths = np.full(len(prompts), 16 * 12 - 1, dtype=np.int64)
    pub = publisher()
    on_cpu = connect(prefixhit.BlockIndex("cpu"), pub)
    on_gpu = connect(None, pub, device="cuda")
    assert on_gpu.device == "cuda" and on_gpu.index.device == "cuda"
    counts: dict[tuple[int, bytes, str], int] = {}
    with on_cpu, on_gpu:
        for step in range(60):
            events = []
            for _ in range(rng.randint(1, 4)):
                prompt = rng.choice(prompts)
                lo = rng.randrange(len(prompt))
                hashes = prompt[lo:lo + rng.randint(1, 6)]
                group = rng.randrange(2)
                medium = rng.choice(["GPU", "CPU"])
                if rng.random() < 0.65:
                    events.append(stored(hashes, group, medium, rng.random() < 0.5))
                    for h in hashes:
                        counts[(group, h, medium)] = counts.get((group, h, medium), 0) + 1
                else:
                    events.append(removed(hashes, group, medium, rng.random() < 0.5))
                    for h in hashes:
                        counts[(group, h, medium)] = max(0, counts.get((group, h, medium), 0) - 1)
            seq = pub.publish(batch(*events))
            if step % 10 == 5:  # a lookup while the mirror may still be writing
                with on_gpu.lock():
                    coord.find_longest_cache_hits(digests, offsets, max_lengths, on_gpu.index)
            if step % 10 != 9:
                continue
            assert on_cpu.wait_for_seq(seq, 5) and on_gpu.wait_for_seq(seq, 5), f"seed {seed}"
            plain = {(g, h) for (g, h, _), c in counts.items() if c > 0}
            want = coord.find_longest_cache_hits(digests, offsets, max_lengths, plain)
            got_cpu = coord.find_longest_cache_hits(digests, offsets, max_lengths, on_cpu.index)
            with on_gpu.lock():
                got_gpu = coord.find_longest_cache_hits(digests, offsets, max_lengths,
                                                        on_gpu.index)
                assert len(on_gpu.index) == len(plain), f"seed {seed} step {step}"
            for r in range(len(prompts)):
                assert got_cpu[r] == want[r], f"seed {seed} step {step} request {r}"
                assert got_gpu[r] == want[r], f"seed {seed} step {step} request {r}"
            stats = on_gpu.stats()
            assert stats["index_keys"] == stats["keys"] == len(plain)
