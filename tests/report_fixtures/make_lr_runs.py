#!/usr/bin/python3
"""tests/report_fixtures/make_lr_runs.py OUT_DIR: a synthetic learning-rate sweep for the report
test (tests/test_report.sh, "learning-rate sensitivity"): 2 variants (attn_gate none and
elementwise) x 2 seeds (1, 2) x 3 learning rates (1e-3, 1e-2, 1e-1), 100 steps, written as the
trainer writes them (an eval at step 0, 50 and 100; step records at 1, 50, 100; non-finite
values as null, the way train/jsonl.c prints them). Directories OUT_DIR/<variant>_lr<lr>_s<seed>,
as scripts/ablate.sh names them.

The values are chosen so that each wrong reading of the definition (docs/metrics.md, "LR
sensitivity") changes a printed number; tests/test_report.sh holds the expected numbers worked
out by hand from the table below, not from this file's code:

  variant  seed  L0 (eval at step 0)  lr 1e-3  lr 1e-2             lr 1e-1
  none     1     9.00                 4.50     4.00 (3.80 at 50)   stopped on non-finite losses
  none     2     9.10                 4.70     4.10                9.50 (above L0)
  elem.    1     9.05                 4.40     3.90                5.00 (4.20 at 50)
  elem.    2     9.15                 4.50     4.00                final eval null (non-finite)

The first step record's train loss is L0 + 0.02 in every run (not L0: "the first logged loss" is
the step-0 eval). Seed 1 ran on 1 thread, seed 2 on 2 ([train] threads, which changes no result:
the seeds must still form one variant). Plain Python, deterministic.
"""
import json
import os
import sys

STEPS = 100
CONFIG = """[model]
n_layer = 4
attn_gate = {gate}                   ; configs/tiny_x.ini:22

[train]
seed = {seed}                          ; command line
steps = {steps}                        ; command line
lr = {lr}                         ; command line
warmup_steps = 20
threads = {threads}                       ; command line

[log]
run_dir = {run_dir}                  ; command line
val_every = 50
"""

# (gate, seed) -> (L0, {lr: final}) where final is a number, "stopped" or "null"; mid-run
# evals at step 50: the given value where one is listed, else final + 0.3
RUNS = {
    ("none", 1): (9.00, {"1e-3": 4.50, "1e-2": 4.00, "1e-1": "stopped"}),
    ("none", 2): (9.10, {"1e-3": 4.70, "1e-2": 4.10, "1e-1": 9.50}),
    ("elementwise", 1): (9.05, {"1e-3": 4.40, "1e-2": 3.90, "1e-1": 5.00}),
    ("elementwise", 2): (9.15, {"1e-3": 4.50, "1e-2": 4.00, "1e-1": "null"}),
}
MID = {("none", 1, "1e-2"): 3.80, ("elementwise", 1, "1e-1"): 4.20}


def rec(f, **kv):
    f.write(json.dumps(kv, separators=(",", ":")).replace("NaN", "null") + "\n")


def main():
    out = sys.argv[1]
    for (gate, seed), (L0, finals) in RUNS.items():
        for lr, final in finals.items():
            d = os.path.join(out, f"{'baseline' if gate == 'none' else 'gated'}_lr{lr}_s{seed}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "config.ini"), "w") as f:
                f.write(CONFIG.format(gate=gate, seed=seed, steps=STEPS, lr=float(lr), run_dir=d, threads=seed))
            with open(os.path.join(d, "log.jsonl"), "w") as f:
                rec(f, type="run", step=0, params=1000)
                rec(f, type="eval", step=0, val_loss=L0)
                rec(f, type="step", step=1, loss=round(L0 + 0.02, 4), grad_norm=2.0, skipped=False)
                if final == "stopped":
                    # the trainer's stop after [metrics] max_nonfinite = 2 non-finite steps in a row:
                    # step 2 logged (loss null, a nonfinite spike), step 3's spike then the exit
                    rec(f, type="spike", step=2, kind="nonfinite", value=None, mean=None, std=None, z=None, skipped=True)
                    rec(f, type="step", step=2, loss=float("nan"), grad_norm=float("nan"), skipped=True)
                    rec(f, type="spike", step=3, kind="nonfinite", value=None, mean=None, std=None, z=None, skipped=True)
                    continue
                end = float("nan") if final == "null" else final
                mid = MID.get((gate, seed, lr), (final if final != "null" else 5.0) + 0.3)
                rec(f, type="step", step=50, loss=round(mid + 0.1, 4), grad_norm=0.5, skipped=False)
                rec(f, type="eval", step=50, val_loss=mid)
                rec(f, type="step", step=100, loss=round(end + 0.1, 4), grad_norm=0.4, skipped=False)
                rec(f, type="eval", step=100, val_loss=end)
    print(f"make_lr_runs: {sum(len(v[1]) for v in RUNS.values())} runs in {out}")


if __name__ == "__main__":
    main()
