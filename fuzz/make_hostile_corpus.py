#!/usr/bin/env python3
"""Writes the hostile seeds of issue 13 into fuzz/corpus/ (re-run after changing them).

fuzz_vectors: depth bombs (lists and objects nested far past the loader's limit), size bombs
(a few hundred bytes asking for 2^28-entry masks), group ids past 32 bits, and documents
without real expectations. fuzz_index_file: sparse-file seeds (mode bit 2) whose header
declares 2^28..2^33 keys; the harness extends them with a hole to the declared size.
"""
import json
import os
import struct
import zlib  # noqa: F401  (CRC-32C is not in zlib; computed below)

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "corpus", "fuzz_vectors")
INDEX = os.path.join(HERE, "corpus", "fuzz_index_file")

CONFIG = {"hash_block_size": 1, "scheduler_block_size": 64, "use_eagle": False,
          "retention_interval": None,
          "groups": [{"kind": "sliding_window", "block_size": 1, "sliding_window": 4,
                      "num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16", "eagle": False}]}
EXPECT_CONFIG = {"eagle_group_ids": [], "spec_groups": [[[0], False]],
                 "enable_partial_hash_hits": False, "lookup_alignment": 64}
DIGEST = "00" * 31 + "01"


def case(ops, hashes=(), expect_config=EXPECT_CONFIG):
    return {"name": "hostile", "config": CONFIG, "expect_config": expect_config,
            "hashes": list(hashes), "ops": ops}


def write_doc(name, cases):
    with open(os.path.join(VECTORS, name), "w") as f:
        json.dump({"format": "prefixhit-conformance/1", "cases": cases}, f, separators=(",", ":"))


def vectors():
    with open(os.path.join(VECTORS, "bomb_depth_lists.json"), "w") as f:
        f.write('{"cases":[' + "[" * 10000)
    with open(os.path.join(VECTORS, "bomb_depth_objects.json"), "w") as f:
        f.write('{"cases":[' + '{"a":' * 2000 + "1" + "}" * 2000 + "]}")
    write_doc("bomb_lookup_mask_2e28.json", [case([
        {"op": "lookup_mask", "aligned_token_len": 1 << 28, "expect": {"masks": [[True]]}}])])
    write_doc("bomb_store_mask_2e28.json", [case([
        {"op": "store_mask", "aligned_token_len": 1 << 28, "start_token": 0,
         "num_prompt_tokens": None, "expect": {"masks": [None]}}])])
    write_doc("bomb_load_mask_2e62.json", [case([
        {"op": "load_mask", "token_len": (1 << 62) - 1, "expect": {"masks": [[]]}}])])
    write_doc("group_id_2e32.json", [case([
        {"op": "find_longest_cache_hit", "max_length": 1, "apply_eagle": True,
         "exists": [[1 << 32, DIGEST], [-(1 << 32), DIGEST], [(1 << 64) - 1, DIGEST]],
         "expect": {"hit_length": 0, "masks": [[]]}}], hashes=[DIGEST])])
    write_doc("expect_null.json", [case([{"op": "align_lookup_length", "length": 5,
                                          "expect": None}])])
    write_doc("expect_empty.json", [case([{"op": "align_lookup_length", "length": 5,
                                           "expect": {}}])])
    write_doc("ops_null.json", [dict(case([]), ops=None)])
    write_doc("expect_config_empty.json", [case([], expect_config={})])
    with open(os.path.join(VECTORS, "no_cases.json"), "w") as f:
        f.write('{"format":"prefixhit-conformance/1","cases":[]}')


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def header(keys):
    h = b"PFXINDEX" + struct.pack("<IIIIQI", 1, 40, 40, 0, keys, 0)
    return h + struct.pack("<I", crc32c(h))


def index_files():
    record = struct.pack("<Ii", 0, 0) + bytes(31) + b"\x01"
    for log2 in (28, 30, 33):
        # Mode byte 0b100: make a sparse file of the declared size.
        with open(os.path.join(INDEX, f"sparse_2e{log2}_mode4"), "wb") as f:
            f.write(bytes([4]) + header(1 << log2) + record)
    with open(os.path.join(INDEX, "sparse_one_key_mode4"), "wb") as f:
        f.write(bytes([4]) + header(1) + record)  # declared size = real size: no hole


if __name__ == "__main__":
    vectors()
    index_files()
