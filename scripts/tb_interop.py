"""scripts/tb_interop.py: a run's TensorBoard event files (train/tb.c) read by tensorboard itself,
against the run's log.jsonl (run by scripts/tb_interop.sh, in the interop venv with tensorboard).

  RUN_DIR      a run killed past a checkpoint and resumed, with [log] tensorboard = true
  --killed LOG the killed run's log.jsonl, copied before the resume; --resume-step S its checkpoint

Three of tensorboard's readers, each with its default purge of orphaned data:
  - EventAccumulator (tensorboard.backend.event_processing.event_accumulator), every scalar kept
  - the server's Python data loader (tensorboard --load_fast=false) over HTTP
  - the server's Rust data loader (tensorboard --load_fast=true, tensorboard_data_server) over HTTP
Each must show every (tag, step) once, and every number of log.jsonl (but "run" records), tagged
as docs/metrics.md "TensorBoard" says, equal as float32 (simple_value is a float32: the double
of log.jsonl rounded to nearest). --killed: the numbers of steps after the checkpoint whose
killed-run value differs from the resumed run's (timings) show the resumed run's.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from tb_check import numbers, tag_of  # noqa: E402  (the test's tag rule: one definition on the test side)


def f32(x):
    """x rounded to float32 as C's (float) cast does it (IEEE: beyond the range, an infinity)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def jsonl_scalars(path):
    """{tag: {step: [float32 values]}} of a log.jsonl."""
    out = {}
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if r["type"] == "run":
            continue
        for p, x in numbers({k: v for k, v in r.items() if k not in ("type", "step")}, ""):
            tag = tag_of(r, p)
            if tag is not None:
                out.setdefault(tag, {}).setdefault(r["step"], []).append(f32(float(x)))
    return out


def compare(name, got, want):
    """got: {tag: [(step, value)]}. Returns the failures (printed)."""
    fails = []
    n = 0
    for tag in sorted(set(got) | set(want)):
        g = got.get(tag, [])
        steps = [s for s, _ in g]
        if len(steps) != len(set(steps)):
            fails.append(f"{name}: {tag}: a step shown more than once: {steps}")
            continue
        w = {s: v for s, v in ((s, vs[-1]) for s, vs in want.get(tag, {}).items())}
        if any(len(vs) > 1 for vs in want.get(tag, {}).values()):
            fails.append(f"{name}: {tag}: log.jsonl has a step twice")
        gd = {s: f32(v) for s, v in g}
        if gd.keys() != w.keys():
            fails.append(f"{name}: {tag}: steps {sorted(gd)} vs log.jsonl's {sorted(w)}")
            continue
        for s in gd:
            n += 1
            if gd[s] != w[s]:
                fails.append(f"{name}: {tag} step {s}: {gd[s]!r} vs log.jsonl's {w[s]!r} (as float32)")
    for f in fails[:10]:
        print("FAIL: " + f)
    print(f"{name}: {len(got)} tags, {n} (tag, step) values compared, {len(fails)} failures")
    return fails


def event_accumulator(tb_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(tb_dir, size_guidance={ea.SCALARS: 0}).Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(port, path, **q):
    url = f"http://127.0.0.1:{port}{path}" + ("?" + urllib.parse.urlencode(q) if q else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def server(tb_dir, load_fast, n_tags):
    """Every scalar the tensorboard server shows, once it shows n_tags tags."""
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    port = free_port()
    proc = subprocess.Popen([exe, "--logdir", tb_dir, "--port", str(port), "--host", "127.0.0.1",
                             f"--load_fast={load_fast}", "--reload_interval=1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        tags = {}
        while time.time() < deadline:
            try:
                tags = get(port, "/data/plugin/scalars/tags").get(".", {})
                if len(tags) >= n_tags:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard --load_fast={load_fast} exited: {proc.stderr.read()[-2000:]}")
            time.sleep(0.5)
        time.sleep(2)   # one more reload: the files are complete, nothing more comes
        return {t: [(s, v) for _, s, v in get(port, "/data/plugin/scalars/scalars", run=".", tag=t)]
                for t in get(port, "/data/plugin/scalars/tags").get(".", {})}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--killed", help="the killed run's log.jsonl (before the resume)")
    ap.add_argument("--resume-step", type=int, default=0, help="the checkpoint's step the run resumed from")
    a = ap.parse_args()
    import tensorboard
    tb_dir = os.path.join(a.run_dir, "tb")
    want = jsonl_scalars(os.path.join(a.run_dir, "log.jsonl"))
    print(f"tensorboard {tensorboard.__version__}; {sorted(os.listdir(tb_dir))}; "
          f"log.jsonl: {len(want)} tags, {sum(len(v) for v in want.values())} (tag, step) values")
    fails = []
    ea = event_accumulator(tb_dir)
    fails += compare("EventAccumulator", ea, want)
    for fast in ("false", "true"):
        fails += compare(f"tensorboard --load_fast={fast} (HTTP)", server(tb_dir, fast, len(want)), want)
    if a.killed:
        killed = jsonl_scalars(a.killed)
        resume_step = a.resume_step
        differ = [(t, s) for t in killed for s in killed[t] if s > resume_step and t in want and s in want[t]
                  and killed[t][s] != want[t][s]]
        shown = {(t, s): f32(v) for t, g in ea.items() for s, v in g}
        bad = [(t, s) for t, s in differ if shown.get((t, s)) != want[t][s][-1]]
        print(f"killed run: {len(differ)} values after the step-{resume_step} checkpoint differ from the resumed run's "
              f"(timings); EventAccumulator shows the resumed run's for {len(differ) - len(bad)}")
        if not differ or bad:
            fails.append("killed vs resumed")
            print(f"FAIL: {bad[:5] if bad else 'no differing value to tell the runs apart'}")
    print("tb interop: " + ("FAILED" if fails else "OK"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
