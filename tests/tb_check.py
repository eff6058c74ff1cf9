#!/usr/bin/env python3
"""tests/tb_check.py RUN_DIR: the TensorBoard event files of a run (train/tb.c) read with a reader
of this test's own (Python's standard library only: CI has no tensorboard or protobuf), against the
run's log.jsonl.

  - framing: every TFRecord's length and data CRCs are the masked CRC-32C of the right bytes
    (CRC-32C written here bit by bit, not with train/tb.c's table); no bytes after the last record
  - messages: only the wire types the Event, Summary, Value and SessionLog fields have; each file
    starts with file_version "brain.Event:2", then a SessionLog START (the restart marker)
  - content: the files read in name order with TensorBoard's purge (a START at step s drops every
    earlier event at a step >= s) give each (tag, step) once, and the (tag, step, value) triples
    equal those of log.jsonl: every number of every record but "run" records, tagged as
    docs/metrics.md "TensorBoard" says, compared as float32 (simple_value is a float)
  --expect-purged N: without the purge, N (tag, step) pairs appear twice (a resumed run's
    restart marker is what removes them); --require TAGS: these tags are there
Prints one line a failure and a summary; exit 1 on any failure.
"""
import argparse
import glob
import json
import os
import struct
import sys

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def crc32c(data):
    """CRC-32C (Castagnoli), bit by bit: reflected polynomial 0x82F63B78."""
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The data of each TFRecord of one file, its CRCs checked."""
    buf = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(buf):
        if len(buf) - pos < 12:
            fail(f"{path}:{pos}: {len(buf) - pos} bytes after the last record")
            break
        head = buf[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (lcrc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if lcrc != masked(crc32c(head)):
            fail(f"{path}:{pos}: length CRC {lcrc:#010x}, want masked CRC-32C {masked(crc32c(head)):#010x}")
            break
        data = buf[pos + 12:pos + 12 + n]
        if len(data) != n or len(buf) < pos + 16 + n:
            fail(f"{path}:{pos}: record of {n} bytes cut short")
            break
        (dcrc,) = struct.unpack("<I", buf[pos + 12 + n:pos + 16 + n])
        if dcrc != masked(crc32c(data)):
            fail(f"{path}:{pos}: data CRC {dcrc:#010x}, want masked CRC-32C {masked(crc32c(data)):#010x}")
            break
        out.append(data)
        pos += 16 + n
    return out


def varint(b, i):
    v, shift = 0, 0
    while True:
        if i >= len(b):
            raise ValueError("varint runs past the end")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def fields(b, wire_of):
    """(field, value) pairs of one message; wire_of: field number -> the wire type it must have."""
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if f not in wire_of:
            raise ValueError(f"unexpected field {f}")
        if wt != wire_of[f]:
            raise ValueError(f"field {f}: wire type {wt}, want {wire_of[f]}")
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        if i > len(b):
            raise ValueError(f"field {f} runs past the end")
        out.append((f, v))
    return out


def event(b):
    """Event: wall_time 1 (double), step 2 (int64), file_version 3, summary 5, session_log 7."""
    e = {"step": 0, "values": []}
    for f, v in fields(b, {1: 1, 2: 0, 3: 2, 5: 2, 7: 2}):
        if f == 1:
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif f == 2:
            e["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif f == 3:
            e["file_version"] = v.decode()
        elif f == 5:
            for _, val in fields(v, {1: 2}):        # Summary.value
                tag, x = None, None
                for g, w in fields(val, {1: 2, 2: 5}):   # Value: tag, simple_value
                    if g == 1:
                        tag = w.decode()
                    else:
                        x = struct.unpack("<f", w)[0]
                e["values"].append((tag, x))
        elif f == 7:
            e["session_log"] = dict(fields(v, {1: 0, 2: 2, 3: 2})).get(1, 0)
    return e


def f32(x):
    """x rounded to float32 as C's (float) cast does it (IEEE: beyond the range, an infinity)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def tag_of(rec, path):
    """docs/metrics.md "TensorBoard": <type>[/<name>]/<path>, layers/<i>/<rest> -> <rest>/layer_<i>."""
    head = rec["type"]
    for k in ("name", "task", "kind"):
        if isinstance(rec.get(k), str):
            head += "/" + rec[k]
            break
    p = path.split("/")
    if len(p) >= 3 and p[0] == "layers" and p[1].isdigit():
        if p[2:] == ["layer"]:
            return None
        return f"{head}/{'/'.join(p[2:])}/layer_{p[1]}"
    return f"{head}/{path}"


def numbers(v, path):
    """(path, number) of every number under v; bools, strings and nulls are not numbers."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return []
    if isinstance(v, (int, float)):
        return [(path, v)]
    items = v.items() if isinstance(v, dict) else enumerate(v)
    out = []
    for k, x in items:
        out += numbers(x, f"{path}/{k}" if path else str(k))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--expect-purged", type=int, default=None)
    ap.add_argument("--require", default="", help="tags that must be there, comma-separated")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.run_dir, "tb", "events.out.tfevents.*")))
    if not files:
        fail(f"no event files in {a.run_dir}/tb")
    kept, raw, n_rec = [], [], 0     # kept: (tag, step, value) after the purge; raw: all
    for path in files:
        evs = []
        for i, data in enumerate(records(path)):
            n_rec += 1
            try:
                evs.append(event(data))
            except ValueError as e:
                fail(f"{path}: record {i}: {e}")
        if len(evs) < 2 or evs[0].get("file_version") != "brain.Event:2":
            fail(f"{path}: the first event is not file_version brain.Event:2")
        if len(evs) < 2 or evs[1].get("session_log") != 1:
            fail(f"{path}: the second event is not a SessionLog START")
        for e in evs:
            if e.get("session_log") == 1:    # TensorBoard's EventAccumulator: drop step >= the marker's
                kept = [t for t in kept if t[1] < e["step"]]
            for tag, x in e["values"]:
                kept.append((tag, e["step"], x))
                raw.append((tag, e["step"]))
    want = []
    for line in open(os.path.join(a.run_dir, "log.jsonl"), encoding="utf-8"):
        r = json.loads(line)
        if r["type"] == "run":
            continue
        for path, x in numbers({k: v for k, v in r.items() if k not in ("type", "step")}, ""):
            tag = tag_of(r, path)
            if tag is not None:
                want.append((tag, r["step"], f32(float(x))))
    seen = {}
    for tag, step, x in kept:
        seen[(tag, step)] = seen.get((tag, step), 0) + 1
    dup = [k for k, c in seen.items() if c > 1]
    if dup:
        fail(f"{len(dup)} (tag, step) pairs shown more than once, e.g. {sorted(dup)[:3]}")
    got_set, want_set = set(kept), set(want)
    for t in sorted(want_set - got_set)[:5]:
        fail(f"log.jsonl has {t}, the event files do not (as float32)")
    for t in sorted(got_set - want_set)[:5]:
        fail(f"the event files have {t}, log.jsonl does not")
    for t in filter(None, a.require.split(",")):
        if not any(k[0] == t for k in seen):
            fail(f"no tag {t} in the event files")
    raw_dup = len(raw) - len(set(raw))
    if a.expect_purged is not None and raw_dup != a.expect_purged:
        fail(f"{raw_dup} (tag, step) pairs twice before the purge, want {a.expect_purged}")
    print(f"{len(files)} event files, {n_rec} records, {len(kept)} scalars kept "
          f"({len(set(t for t, _, _ in kept))} tags), {raw_dup} dropped by the restart marker; "
          f"log.jsonl: {len(want)} numbers")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
