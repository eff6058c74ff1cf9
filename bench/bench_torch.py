#!/usr/bin/env python3
"""bench/bench_torch.py: the PyTorch side of bench_train (bench/README.md).

Times the same training step as bench/bench_train.c on the independent reference model
(tests/reference/model.py): fp32, eager, forward with targets, autograd backward,
torch.nn.utils.clip_grad_norm_, torch.optim.AdamW (weight decay on 2-D parameters only).
Random tokens from numpy.random.RandomState([train] seed); B and T from [train] batch_size and
seq_len of the INI.

  bench_torch.py CONFIG.ini [--set section.key=value ...] [--threads N] [--warmup 2] [--steps 5]
      runs warm-up + timed steps and prints one JSON line:
      {"ok": true, "torch": ..., "threads": ..., "params": ..., "B": ..., "T": ...,
       "ms": [...], "median_ms": ..., "loss0": ..., "maxrss_kb": ...}
  bench_torch.py CONFIG.ini ... --serve
      what bench_train uses: builds the model, prints {"ready": true, ...}, then runs one step
      per "step" line on stdin and answers {"ms": ..., "loss": ...}; "quit" or end of input
      prints {"done": true, "maxrss_kb": ...} and exits. bench_train steps this process and its
      own worker in lockstep, so machine noise hits both.

A config the reference cannot run yet (Gated DeltaNet layers, [model] layer_pattern with an L,
before tests/reference/model.py has them) prints {"skip": "..."} and exits 0: bench_train reports
it as skipped, not failed. Any failure prints {"error": "..."} and exits non-zero. Environment variables are left alone;
the only threading setting is torch.set_num_threads(--threads) when --threads > 0.
"""
import argparse
import configparser
import json
import os
import resource
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def emit(obj):
    print(json.dumps(obj), flush=True)


def read_ini(path, sets):
    """The INI with the --set overrides applied (a ConfigParser)."""
    cp = configparser.ConfigParser(comment_prefixes=(";", "#"), inline_comment_prefixes=(";",),
                                   interpolation=None)
    with open(path) as f:
        cp.read_file(f)
    for s in sets:
        key, sep, value = s.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot:
            raise ValueError(f"--set {s}: expected section.key=value")
        if not cp.has_section(section):
            cp.add_section(section)
        cp.set(section, name, value)
    return cp


def unsupported(ref, path, sets):
    """Why the reference cannot run this config, or None: hybrid layers need its gdn_block."""
    cp = read_ini(path, sets)
    pattern = cp.get("model", "layer_pattern", fallback="").strip()
    if "L" in pattern and not hasattr(ref, "gdn_block"):
        return (f"layer_pattern = {pattern}: tests/reference/model.py has no Gated DeltaNet "
                "(gdn_block) yet")
    return None


def load_config(ref, path, sets):
    """The INI with the --set overrides applied, resolved by the reference's own loader."""
    cp = read_ini(path, sets)
    fd, tmp = tempfile.mkstemp(suffix=".ini", prefix="bench_torch_")
    try:
        with os.fdopen(fd, "w") as f:
            cp.write(f)
        return ref.load_config(tmp)
    finally:
        os.unlink(tmp)


def maxrss_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--serve", action="store_true", help="step on 'step' lines from stdin (bench_train)")
    ap.add_argument("--bf16", action="store_true",
                    help='forward and loss under torch.autocast("cpu", dtype=torch.bfloat16): PyTorch\'s own CPU bf16 '
                         'training (fp32 parameters and AdamW; its autocast list picks the bf16 ops)')
    args = ap.parse_args()

    try:
        import numpy as np
        import torch
        sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
        import model as ref
    except Exception as e:  # noqa: BLE001 - reported to the C side as one line
        emit({"error": f"cannot import torch, numpy or tests/reference/model.py: {e}"})
        return 1

    try:
        why = unsupported(ref, args.config, args.set)
    except Exception as e:  # noqa: BLE001
        emit({"error": f"reading {args.config} failed: {type(e).__name__}: {e}"})
        return 1
    if why:
        emit({"skip": why})
        return 0

    try:
        t0 = time.perf_counter()
        c = load_config(ref, args.config, args.set)
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        torch.manual_seed(c.seed)
        B, T = c.batch_size, c.seq_len
        rng = np.random.RandomState(c.seed)
        params = ref.init_params(c, rng)               # float32, spec order
        for p in params.values():
            p.requires_grad_(True)
        toks = rng.randint(0, c.vocab_size, size=(B, T + 1))
        idx = torch.from_numpy(toks[:, :T].astype(np.int64))
        targets = torch.from_numpy(toks[:, 1:].astype(np.int64))
        plist = list(params.values())
        groups = [
            {"params": [p for p in plist if p.dim() >= 2], "weight_decay": c.weight_decay},
            {"params": [p for p in plist if p.dim() < 2], "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps)
        n_params = sum(p.numel() for p in plist)
        init_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        emit({"error": f"building the model failed: {type(e).__name__}: {e}"})
        return 1

    def step():
        s0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        moe = []
        if args.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                _, loss = ref.forward(c, params, idx, targets, moe)
        else:
            _, loss = ref.forward(c, params, idx, targets, moe)
        (loss + ref.moe_loss(c, moe)).backward()   # MoE models: + the aux and z losses
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, c.grad_clip)
        opt.step()
        ms = (time.perf_counter() - s0) * 1e3
        return ms, loss.item()

    info = {"torch": torch.__version__ + (" bf16 autocast" if args.bf16 else ""), "threads": torch.get_num_threads(), "params": n_params,
            "B": B, "T": T, "init_s": round(init_s, 3)}
    try:
        if args.serve:
            emit({"ready": True, **info})
            while True:
                line = sys.stdin.readline()     # one line at a time: no read-ahead on the pipe
                cmd = line.strip() if line else "quit"
                if cmd == "quit":
                    break
                if cmd != "step":
                    emit({"error": f"unknown command {cmd!r} (expected step or quit)"})
                    return 1
                ms, loss = step()
                emit({"ms": ms, "loss": loss})
            emit({"done": True, "maxrss_kb": maxrss_kb()})
            return 0
        loss0 = None
        times = []
        for i in range(args.warmup + args.steps):
            ms, loss = step()
            if i == 0:
                loss0 = loss
            if i >= args.warmup:
                times.append(ms)
            what = f"warm-up {i + 1}" if i < args.warmup else f"step {i - args.warmup + 1}"
            print(f"{what}: {ms:.1f} ms, loss {loss:.4f}", file=sys.stderr, flush=True)
        emit({"ok": True, **info, "config": args.config, "sets": args.set, "ms": times,
              "median_ms": statistics.median(times) if times else None, "loss0": loss0,
              "maxrss_kb": maxrss_kb()})
        return 0
    except Exception as e:  # noqa: BLE001
        emit({"error": f"training step failed: {type(e).__name__}: {e}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
