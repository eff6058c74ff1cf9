#!/usr/bin/python3
"""tests/report_fixtures/make_runs.py OUT_DIR: synthetic train_gpt run directories for the
report test (tests/test_report.sh), written the way the trainer writes them (docs/metrics.md):

  OUT_DIR/baseline   attn_gate = none: step, eval, sample, probe (gate fields null) records,
                     3 spike records (2 loss, one of them with its update skipped, 1 grad_norm),
                     one non-finite step (a "nonfinite" spike record, and -nan / nan in the step
                     record, as printf writes them), config.ini with a [metrics] section
  OUT_DIR/gated      attn_gate = elementwise: the same record types with gate means and
                     histograms, no spike records (the detector ran: [metrics] in config.ini)
  OUT_DIR/minimal    step records only, no config.ini (the report must show '-', not crash)

Plain Python (no numpy), deterministic. It prints, for each run, the summary-table row that
scripts/report.py must write, computed here from the values it wrote, e.g.

  EXPECT | baseline | none | 200 | 4.3210 | 3 (2/1) | 2 | 123.5 | 0.412 | - | 5532 |

and the F-Attn of uniform attention at its T (UNIFORM 0.035).
"""
import json
import math
import os
import random
import statistics
import sys

N_LAYER = 4
T = 128
STEPS = 200


def uniform_f_attn(T):
    return sum(1.0 / (q + 1) for q in range(1, T)) / (T - 1)


CONFIG = """[model]
vocab_size = 8192                    ; configs/tiny_{name}.ini:7
n_layer = {n_layer}                          ; configs/tiny_{name}.ini:8
d_model = 128                        ; configs/tiny_{name}.ini:9
n_head = 4                           ; configs/tiny_{name}.ini:10
attn_gate = {gate}{pad}; configs/tiny_{name}.ini:22
gate_position = sdpa
gate_act = sigmoid
; padded_vocab = 8192 (derived: vocab_size rounded up to a multiple of 128)

[train]
seed = 1337                          ; configs/tiny_{name}.ini:28
seq_len = {T}                        ; configs/tiny_{name}.ini:30
steps = {steps}                          ; command line
lr = 0.001                           ; configs/tiny_{name}.ini:33

[log]
run_dir = {run_dir}                  ; command line
val_every = 50                       ; configs/tiny_{name}.ini:51

[metrics]
probe_every = 50                     ; configs/tiny_{name}.ini:62
spike_window = 100
spike_z = 5
skip_loss_z = {skip_loss_z}
skip_grad_z = 0
max_nonfinite = 5

[checkpoint]
dir = 
"""


def write_config(d, name, gate, skip_loss_z):
    with open(os.path.join(d, "config.ini"), "w") as f:
        f.write(CONFIG.format(name=name, gate=gate, pad=" " * max(1, 25 - len(gate)), n_layer=N_LAYER, T=T,
                              steps=STEPS, run_dir=d, skip_loss_z=skip_loss_z))


def step_line(step, loss, lr, gn, ms, tps, mfu, skipped):
    # the trainer's printf format (train_gpt.c); non-finite values come out as printf writes them
    def f6(v):
        return ("-nan" if v != v else "%.6f" % v) if isinstance(v, float) else v
    return ('{"type":"step","step":%d,"loss":%s,"lr":%.6e,"grad_norm":%s,"ms":%.3f,"tokens_per_s":%.1f,'
            '"mfu":%.5f,"skipped":%s}' % (step, f6(loss), lr, gn if isinstance(gn, str) else "%.6f" % gn,
                                          ms, tps, mfu, "true" if skipped else "false"))


def spike_line(step, kind, value, mean, std, skipped):
    # the trainer's format (train_gpt.c check_spike); a non-finite step gets nulls
    if kind == "nonfinite":
        return ('{"type":"spike","step":%d,"kind":"nonfinite","value":null,"mean":null,"std":null,'
                '"z":null,"skipped":true}' % step)
    return ('{"type":"spike","step":%d,"kind":"%s","value":%.6g,"mean":%.6g,"std":%.6g,"z":%.3f,"skipped":%s}'
            % (step, kind, value, mean, std, (value - mean) / std, "true" if skipped else "false"))


def make_run(out, name, gate, rng, spikes, nonfinite_step, probes, config=True, steps=STEPS, evals=True):
    """spikes: {step: (kind, skipped)}. Records in the trainer's order: eval 0 and probe 0; per
    step the spike records, the step record, eval, probe, sample."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if config:
        write_config(d, name, gate, 6 if any(sk for _, sk in spikes.values()) else 0)
    lines = []
    tps_written = []
    val_written = []
    if evals:
        v = round(9.0 + rng.uniform(-0.01, 0.01), 6)
        lines.append('{"type":"eval","step":0,"val_loss":%.6f}' % v)
        val_written.append(v)
    if 0 in probes:
        lines.append(json.dumps(probes[0], separators=(",", ":")))
    for step in range(1, steps + 1):
        loss = 3.0 + 6.0 / (1.0 + step / 15.0) + rng.uniform(-0.05, 0.05)
        gn = 0.5 + 1.5 / (1.0 + step / 20.0) + rng.uniform(0.0, 0.1)
        skipped = False
        if step in spikes:
            kind, skipped = spikes[step]
            if kind == "loss":
                loss += 2.0
                lines.append(spike_line(step, kind, loss, loss - 1.9, 0.2, skipped))
            else:
                gn *= 8.0
                lines.append(spike_line(step, kind, gn, gn - 1.9, 0.2, skipped))
        ms = 180.0 + rng.uniform(-20.0, 20.0)
        tps = round(1024 / (ms / 1000.0), 1)
        tps_written.append(tps)
        if step == nonfinite_step:
            lines.append(spike_line(step, "nonfinite", None, None, None, True))
            lines.append(step_line(step, float("nan"), 1e-3, "nan", ms, tps, 0.29, True))
        else:
            lines.append(step_line(step, loss, 1e-3 * min(1.0, step / 20.0), gn, ms, tps, 0.29, skipped))
        if evals and (step % 50 == 0 or step == steps):
            v = round(3.0 + 6.0 / (1.0 + step / 15.0) + 0.15 + rng.uniform(-0.02, 0.02), 6)
            lines.append('{"type":"eval","step":%d,"val_loss":%.6f}' % (step, v))
            val_written.append(v)
        if step in probes:
            lines.append(json.dumps(probes[step], separators=(",", ":")))
        if step % 100 == 0:
            lines.append(json.dumps({"type": "sample", "step": step, "prompt": "And God said",
                                     "text": ", Let there be \"light\" | and there was light.\n"},
                                    separators=(",", ":")))
    with open(os.path.join(d, "log.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return d, tps_written, val_written


def make_probe(step, rng, gated, scale):
    """One probe record; returns (record, m_act_mean, f_attn_mean, gate_mean) from the values written."""
    layers = []
    for l in range(N_LAYER):
        m_act = round(scale * (1.0 + 3.0 * (l >= 1)) + rng.uniform(0.0, 5.0), 3)
        f_attn = round((0.12 if gated else 0.45) + rng.uniform(-0.05, 0.05), 4)
        rec = {"layer": l, "f_attn": f_attn, "f_attn_max_head": round(min(1.0, f_attn * 1.6), 4),
               "sink_heads": 0 if gated else 1 + l % 3, "m_act": m_act, "m_act_pos": 0,
               "m_act_ratio": round(m_act / 1.3, 2), "attn_out_max": round(rng.uniform(1, 4), 3),
               "attn_out_pos": 5, "mlp_out_max": round(m_act * 0.7, 3), "mlp_out_pos": 0,
               "gate_mean": None, "gate_hist": None}
        if gated:
            w = [math.exp(-k / (1.5 + 0.3 * l)) for k in range(10)]
            s = sum(w)
            hist = [round(x / s, 6) for x in w]
            hist[-1] = round(1.0 - sum(hist[:-1]), 6)
            rec["gate_hist"] = hist
            rec["gate_mean"] = round(sum(h * (k + 0.5) / 10 for k, h in enumerate(hist)), 5)
        layers.append(rec)
    m_act_mean = sum(x["m_act"] for x in layers) / N_LAYER
    f_attn_mean = sum(x["f_attn"] for x in layers) / N_LAYER
    gate_mean = sum(x["gate_mean"] for x in layers) / N_LAYER if gated else None
    if not gated and step == STEPS:
        layers[3]["m_act_ratio"] = None  # the trainer writes null for a zero median (ratio = inf)
    rec = {"type": "probe", "step": step, "loss": round(3.5 + rng.uniform(0, 0.1), 5),
           "f_attn_uniform": round(uniform_f_attn(T), 6), "f_attn_mean": f_attn_mean,
           "m_act_mean": m_act_mean, "gate_mean": gate_mean, "ms": 41.5, "layers": layers}
    return rec, m_act_mean, f_attn_mean, gate_mean


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rows = []

    for name, gate, scale, spikes, nonfinite in [
            ("baseline", "none", 60.0, {37: ("loss", True), 120: ("loss", False), 150: ("grad_norm", False)}, 90),
            ("gated", "elementwise", 4.0, {}, None)]:
        rng = random.Random(name)
        gated = gate != "none"
        probes, last = {}, None
        for s in (0, 50, 100, 150, 200):
            rec, m, f, g = make_probe(s, rng, gated, scale * max(s, 10) / 200)
            probes[s] = rec
            last = (m, f, g)
        _, tps, vals = make_run(out, name, gate, rng, spikes, nonfinite, probes)
        n_loss = sum(1 for k, _ in spikes.values() if k == "loss")
        n_grad = sum(1 for k, _ in spikes.values() if k == "grad_norm")
        n_skipped = sum(1 for _, sk in spikes.values() if sk) + (nonfinite is not None)
        m, f, g = last
        rows.append([name, gate, str(STEPS), "%.4f" % vals[-1], "%d (%d/%d)" % (n_loss + n_grad, n_loss, n_grad),
                     str(n_skipped), "%.1f" % m, "%.3f" % f, "-" if g is None else "%.3f" % g,
                     "%.0f" % statistics.median(tps)])

    rng = random.Random("minimal")
    _, tps, _ = make_run(out, "minimal", None, rng, {}, None, {}, config=False, steps=20, evals=False)
    rows.append(["minimal", "-", "20", "-", "-", "0", "-", "-", "-", "%.0f" % statistics.median(tps)])

    for r in rows:
        print("EXPECT | " + " | ".join(r) + " |")
    print("UNIFORM %.3f" % uniform_f_attn(T))


if __name__ == "__main__":
    main()
