#!/usr/bin/env python3
"""tests/compare_ckpt.py: compare two runs for the distributed tests (standard library only).

  compare_ckpt.py losses LOG_A LOG_B TOL    step losses of two log.jsonl: max relative difference
                                            per step, printed; exit 1 above TOL (0 = bitwise)
  compare_ckpt.py params CKPT_A CKPT_B TOL  model.bin of two checkpoints: per tensor
                                            max|a-b| / max|b|, the worst printed; exit 1 above TOL
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ckpt import read_model, floats  # noqa: E402


def losses(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if r.get("type") == "step":
            out[r["step"]] = r["loss"]
    return out


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("losses", "params"):
        print(__doc__)
        sys.exit(2)
    what, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if what == "losses":
        la, lb = losses(a), losses(b)
        if sorted(la) != sorted(lb) or not la:
            print(f"FAIL: steps differ: {len(la)} vs {len(lb)} records")
            sys.exit(1)
        worst, at = max((abs(la[s] - lb[s]) / max(abs(lb[s]), 1e-30), s) for s in la)
        print(f"losses: {len(la)} steps, max relative difference {worst:.3g} (step {at}), tolerance {tol:g}")
        sys.exit(0 if worst <= tol else 1)
    ta, aa = read_model(a)
    tb, ab = read_model(b)
    if [t[:2] for t in ta] != [t[:2] for t in tb]:
        print("FAIL: the parameter tables differ")
        sys.exit(1)
    worst, name = 0.0, "-"
    for (n, _, off, numel), (_, _, offb, _) in zip(ta, tb):
        x, y = floats(aa, off, numel), floats(ab, offb, numel)
        mb = max(abs(v) for v in y) or 1.0
        e = max(abs(p - q) for p, q in zip(x, y)) / mb
        if e > worst:
            worst, name = e, n
    print(f"params: {len(ta)} tensors, worst max|a-b|/max|b| {worst:.3g} ({name}), tolerance {tol:g}")
    sys.exit(0 if worst <= tol else 1)


if __name__ == "__main__":
    main()
