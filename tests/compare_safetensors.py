#!/usr/bin/env python3
"""tests/compare_safetensors.py A.safetensors B.safetensors: exit 0 when both hold the same tensors
(names, dtypes, shapes) with byte-identical data; the __metadata__ (step) may differ. Standard
library only (the export -> import -> export round trip of tests/test_ckpt_tools.sh)."""
import json, struct, sys


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    hdr.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items()}


a, b = read(sys.argv[1]), read(sys.argv[2])
if set(a) != set(b):
    sys.exit(f"tensor names differ: only in A {sorted(set(a) - set(b))[:5]}, only in B {sorted(set(b) - set(a))[:5]}")
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit(f"{len(bad)} of {len(a)} tensors differ, e.g. {bad[0]}")
print(f"{len(a)} tensors, {sum(len(v[2]) for v in a.values())} bytes: identical")
