#!/usr/bin/env python3
"""tests/compare_ckpt.py: compare two runs for the distributed tests (standard library only).

  compare_ckpt.py losses LOG_A LOG_B TOL    step losses and gradient norms of two log.jsonl (logged
                                            with 17 digits): max relative difference per step,
                                            printed; exit 1 if either is above TOL (0 = bitwise)
  compare_ckpt.py params CKPT_A CKPT_B TOL [RMS_TOL]
                                            model.bin of two checkpoints: per tensor
                                            max|a-b| / max|b| (the worst printed; exit 1 above TOL)
                                            and, with RMS_TOL, rms(a-b) / rms(b) (exit 1 above it)
  compare_ckpt.py adam CKPT_A CKPT_B        the AdamW moments of two checkpoints, byte for byte:
                                            each checkpoint's m and v over the whole arena,
                                            reassembled from its rank files (ZeRO-1: one shard
                                            each, concatenated in rank order; ZeRO-0: a full copy
                                            each, which must agree); AdamW's t; with the same
                                            process count, every rank's other state (step, data
                                            position, spike windows, counters, lr) byte for byte.
                                            Exit 1 if any byte differs (the first difference is
                                            printed, named by tensor)
"""
import glob
import json
import math
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ckpt import read_model, floats  # noqa: E402


def losses(path, key="loss"):
    out = {}
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if r.get("type") == "step":
            out[r["step"]] = r[key]
    return out


# rank_RRRRR.bin payload (docs/formats.md): the fixed fields, then two spike windows, then m, v
RANK_FIELDS = struct.Struct("<iiqiifiQqqqQQ")   # rank nproc step t nonfinite lr shuffle seed epoch shard batch offset count


def read_rank(path):
    """(fields dict, the state bytes other than offset/count and the moments, m bytes, v bytes)"""
    data = open(path, "rb").read()
    magic, version, kind, crc, nbytes, _, hcrc = struct.unpack("<IIIIQII", data[:32])
    if data[:4] != b"GGCK" or (version, kind) != (1, 2) or zlib.crc32(data[:28]) != hcrc:
        raise SystemExit(f"FAIL: {path}: not a rank-state file (magic {magic:#x} version {version} kind {kind})")
    if len(data) != 32 + nbytes or zlib.crc32(data[32:]) != crc:
        raise SystemExit(f"FAIL: {path}: size or payload checksum wrong (damaged)")
    p = 32
    vals = RANK_FIELDS.unpack_from(data, p)
    f = dict(zip("rank nproc step t nonfinite lr shuffle seed epoch shard batch offset count".split(), vals))
    p += RANK_FIELDS.size
    state = data[32:p - 16]   # everything before offset, count
    for _ in range(2):        # loss window, grad-norm window: i32 W, n, head, 0, f64 ring[W]
        w = struct.unpack_from("<i", data, p)[0]
        q = p + 16 + 8 * w
        state += data[p:q]
        p = q
    n = 4 * f["count"]
    if len(data) != p + 2 * n:
        raise SystemExit(f"FAIL: {path}: {len(data) - p} bytes of moments, want 2 x {n}")
    return f, state, data[p:p + n], data[p + n:p + 2 * n]


def read_moments(ckpt):
    """The whole arena's m and v from a checkpoint's rank files, and what they were made of."""
    paths = sorted(glob.glob(os.path.join(ckpt, "rank_*.bin")))
    if not paths:
        raise SystemExit(f"FAIL: {ckpt}: no rank_*.bin")
    ranks = [read_rank(p) for p in paths]
    nproc = ranks[0][0]["nproc"]
    if [r[0]["rank"] for r in ranks] != list(range(nproc)):
        raise SystemExit(f"FAIL: {ckpt}: rank files {[r[0]['rank'] for r in ranks]}, nproc {nproc}")
    total = len(read_model(ckpt)[1]) // 4   # arena floats (model.bin)
    m, v, pieces = bytearray(), bytearray(), []
    for path, (f, _, rm, rv) in zip(paths, ranks):
        off, cnt = f["offset"], f["count"]
        pieces.append(f"[{off},{off + cnt})")
        if off == 0 and cnt == total and len(m) == 4 * total:   # another full copy (ZeRO-0)
            if rm != bytes(m) or rv != bytes(v):
                raise SystemExit(f"FAIL: {path}: a full copy of the moments that differs from rank 0's")
            continue
        if 4 * off != len(m):
            raise SystemExit(f"FAIL: {path}: slice {pieces[-1]} does not continue the ranks before it (at {len(m) // 4})")
        m += rm
        v += rv
    if len(m) != 4 * total:
        raise SystemExit(f"FAIL: {ckpt}: the rank files cover {len(m) // 4} floats, the arena has {total}")
    return ranks, bytes(m), bytes(v), " ".join(pieces)


def first_diff(a, b, tensors):
    """index, tensor name, values, count of differing floats"""
    fa, fb = struct.unpack(f"<{len(a) // 4}f", a), struct.unpack(f"<{len(b) // 4}f", b)
    bad = [i for i in range(len(fa)) if a[4 * i:4 * i + 4] != b[4 * i:4 * i + 4]]
    i = bad[0]
    name = next((f"{n}[{i - off}]" for n, _, off, numel in tensors if off <= i < off + numel), "padding")
    return i, name, fa[i], fb[i], len(bad)


def adam(a, b):
    ra, ma, va, pa = read_moments(a)
    rb, mb, vb, pb = read_moments(b)
    tensors = read_model(a)[0]
    ok = True
    for what, x, y in (("m", ma, mb), ("v", va, vb)):
        if len(x) != len(y):
            print(f"FAIL: {what}: {len(x) // 4} vs {len(y) // 4} floats")
            ok = False
        elif x != y:
            i, name, p, q, n = first_diff(x, y, tensors)
            print(f"FAIL: AdamW {what}: {n} of {len(x) // 4} floats differ; the first at {i} ({name}): {p!r} vs {q!r}")
            ok = False
    ts = {r[0]["t"] for r in ra + rb}
    if len(ts) != 1:
        print(f"FAIL: AdamW t differs: {[r[0]['t'] for r in ra]} vs {[r[0]['t'] for r in rb]}")
        ok = False
    same_state = len(ra) == len(rb)
    if same_state:
        for (fa, sa, _, _), (fb, sb, _, _) in zip(ra, rb):
            if sa != sb:
                keys = [k for k in fa if k not in ("offset", "count") and fa[k] != fb[k]]
                print(f"FAIL: rank {fa['rank']}: state differs ({', '.join(keys) or 'spike windows'})")
                ok = False
    print(f"adam: m and v of {len(ma) // 4} floats {'byte-identical' if ok else 'DIFFER'}; t {sorted(ts)}; "
          f"A {len(ra)} rank file(s) {pa}, B {len(rb)} rank file(s) {pb}"
          + ("; every rank's other state compared" if same_state else "; process counts differ: the other state not compared"))
    sys.exit(0 if ok else 1)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "adam":
        adam(sys.argv[2], sys.argv[3])
    if not (len(sys.argv) == 5 or (len(sys.argv) == 6 and sys.argv[1] == "params")) \
            or sys.argv[1] not in ("losses", "params"):
        print(__doc__)
        sys.exit(2)
    what, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if what == "losses":
        ok, out = True, []
        for key in ("loss", "grad_norm"):
            la, lb = losses(a, key), losses(b, key)
            if sorted(la) != sorted(lb) or not la:
                print(f"FAIL: steps differ: {len(la)} vs {len(lb)} records")
                sys.exit(1)
            worst, at = max((abs(la[s] - lb[s]) / max(abs(lb[s]), 1e-30), s) for s in la)
            ok = ok and worst <= tol
            out.append(f"{key} {worst:.3g} (step {at})")
        print(f"losses: {len(la)} steps, max relative difference {', '.join(out)}, tolerance {tol:g}")
        sys.exit(0 if ok else 1)
    ta, aa = read_model(a)
    tb, ab = read_model(b)
    if [t[:2] for t in ta] != [t[:2] for t in tb]:
        print("FAIL: the parameter tables differ")
        sys.exit(1)
    rms_tol = float(sys.argv[5]) if len(sys.argv) == 6 else None
    worst, name, worst_rms, name_rms = 0.0, "-", 0.0, "-"
    for (n, _, off, numel), (_, _, offb, _) in zip(ta, tb):
        x, y = floats(aa, off, numel), floats(ab, offb, numel)
        mb = max(abs(v) for v in y) or 1.0
        e = max(abs(p - q) for p, q in zip(x, y)) / mb
        if e > worst:
            worst, name = e, n
        r = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)) / max(sum(q * q for q in y), 1e-300))
        if r > worst_rms:
            worst_rms, name_rms = r, n
    ok = worst <= tol
    msg = f"params: {len(ta)} tensors, worst max|a-b|/max|b| {worst:.3g} ({name}), tolerance {tol:g}"
    if rms_tol is not None:
        ok = ok and worst_rms <= rms_tol
        msg += f"; worst rms(a-b)/rms(b) {worst_rms:.3g} ({name_rms}), tolerance {rms_tol:g}"
    print(msg)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
