#!/usr/bin/python3
"""scripts/report.py: compare training runs of gatedgpt; writes report.md and PNG figures.

usage: scripts/report.py RUN_DIR... [--out DIR]

Each RUN_DIR is a run directory of train_gpt ([log] run_dir): it holds log.jsonl (one JSON
record per line, "type" = step, eval, sample, probe, spike; docs/metrics.md) and config.ini
(the resolved config). Written into DIR (default: the run directory for one run, else the
runs' common parent directory):

  report.md        summary table per run, what differs between the configs, the paper's
                   reference numbers, per-layer probe tables, spikes, last samples
  loss.png         train loss (smoothed) and val loss of every run, spikes marked; grad norm
  m_act.png        M-Act (max |h| of the residual stream) per layer, last probe, per run
  f_attn.png       F-Attn (attention on the first token) per layer, last probe, per run
  gate_hist.png    gate-score histograms, last probe, per run with a gate
  probes.png       M-Act, F-Attn and mean gate score over the probes of the run

Missing data (no probe records yet, no validation) shows as '-' in the tables and the figure
is skipped with a note. A missing run directory, a missing or empty log.jsonl, or a line that
is not a JSON object with a "type" stops the report with an error naming the file and line.

Needs python3-numpy and python3-matplotlib (Debian); figures use matplotlib's Agg backend.
"""
import argparse
import json
import math
import os
import re
import sys
import warnings

PROG = "report"


def die(msg, code=1):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(code)


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


try:
    import numpy as np
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # a clear line instead of a traceback
    die(f"{e}: install the Debian packages python3-numpy and python3-matplotlib "
        f"(apt-get install python3-numpy python3-matplotlib, or scripts/deps.sh)", 2)

# Paper reference (Qiu et al., NeurIPS 2025, Table 4: 15B MoE, baseline vs SDPA elementwise gate)
PAPER = {"f_attn": (0.467, 0.048), "m_act": (1053, 94), "gate_mean": 0.116}
SINK_HEAD_THRESHOLD = 0.3

# ------------------------------------------------------------------------------------------
# reading a run directory

# required fields per record type: name -> allowed kinds ("num", "bool", "str", "list", "null")
REQUIRED = {
    "step": {"step": "num", "loss": "num"},
    "eval": {"step": "num", "val_loss": "num"},
    "sample": {"step": "num"},
    "probe": {"step": "num"},
    "spike": {"step": "num", "kind": "str"},
}
# the trainer prints non-finite floats with printf("%f"): nan, -nan, inf, -inf (not JSON)
NONFINITE = re.compile(r'(:\s*|\[\s*|,\s*)(-?)(nan|inf)(?=\s*[,}\]])', re.IGNORECASE)


def _nonfinite_sub(m):
    word = "NaN" if m.group(3).lower() == "nan" else "Infinity"
    sign = "-" if (m.group(2) and word == "Infinity") else ""
    return m.group(1) + sign + word


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite(v):
    return is_num(v) and math.isfinite(v)


def read_log(path):
    """Records of a log.jsonl, in file order. Errors name the file and the line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"{path}: cannot read the log: {e.strerror}")
    if not data.strip():
        die(f"{path}: the log is empty (no records): did the run start? "
            f"(train_gpt writes one record per step)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        die(f"{path}:{line}: not UTF-8 text (byte {e.start})")
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    records = []
    for i, line in enumerate(lines, start=1):
        s = line.strip()
        if not s:
            continue
        try:
            rec = json.loads(s)
        except ValueError as e1:
            try:
                rec = json.loads(NONFINITE.sub(_nonfinite_sub, s))
            except ValueError:
                if i == len(lines) and not ends_with_newline:
                    warn(f"{path}:{i}: ignoring an incomplete last line (the run is still writing?)")
                    continue
                excerpt = s if len(s) <= 80 else s[:77] + "..."
                die(f"{path}:{i}: invalid JSON ({e1.msg} at column {e1.colno}): {excerpt}")
        if not isinstance(rec, dict):
            die(f"{path}:{i}: a record must be a JSON object, got {type(rec).__name__}")
        t = rec.get("type")
        if not isinstance(t, str):
            die(f"{path}:{i}: record without a \"type\" string (expected step, eval, sample, probe or spike)")
        for key, kind in REQUIRED.get(t, {}).items():
            v = rec.get(key)
            ok = is_num(v) if kind == "num" else isinstance(v, str)
            if not ok:
                die(f"{path}:{i}: \"{t}\" record: field \"{key}\" is {'missing' if key not in rec else repr(v)}"
                    f" (expected a {'number' if kind == 'num' else 'string'})")
        if t == "probe" and rec.get("layers") is not None:
            layers = rec["layers"]
            if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
                die(f"{path}:{i}: \"probe\" record: \"layers\" must be a list of objects")
        rec["_line"] = i
        records.append(rec)
    if not records:
        die(f"{path}: the log holds no records")
    return records


def read_ini(path):
    """The resolved config.ini: {section: {key: value}}; inline '; comments' dropped."""
    cfg = {}
    sec = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            s = line.strip()
            if not s or s[0] in ";#":
                continue
            if s.startswith("[") and s.endswith("]"):
                sec = s[1:-1].strip()
                cfg.setdefault(sec, {})
                continue
            if "=" not in s or sec is None:
                continue
            k, v = s.split("=", 1)
            v = re.split(r"\s[;#]", v, maxsplit=1)[0]
            cfg[sec][k.strip()] = v.strip()
    return cfg


class Run:
    def __init__(self, path, name):
        self.path = path
        self.name = name
        self.notes = []
        log = os.path.join(path, "log.jsonl")
        if not os.path.isfile(log):
            die(f"{path}: no log.jsonl in the run directory (is it a train_gpt run_dir?)")
        recs = read_log(log)
        cfg_path = os.path.join(path, "config.ini")
        if os.path.isfile(cfg_path):
            self.cfg = read_ini(cfg_path)
        else:
            self.cfg = {}
            self.notes.append("no config.ini in the run directory: config columns show '-'")
            warn(f"{path}: no config.ini: attn_gate and the config comparison show '-'")
        by = {}
        for r in recs:
            by.setdefault(r["type"], []).append(r)
        # a restarted run appends nothing (the trainer truncates log.jsonl), but keep step order
        key = lambda r: (r["step"], r["_line"])
        self.steps = sorted(by.get("step", []), key=key)
        self.evals = sorted(by.get("eval", []), key=key)
        self.samples = sorted(by.get("sample", []), key=key)
        self.probes = sorted(by.get("probe", []), key=key)
        self.spikes = sorted(by.get("spike", []), key=key)
        self.types = set(by)

    def conf(self, section, key, default=None):
        return self.cfg.get(section, {}).get(key, default)

    @property
    def attn_gate(self):
        return self.conf("model", "attn_gate")

    @property
    def has_gate(self):
        g = self.attn_gate
        if g is not None:
            return g != "none"
        p = self.last_probe
        return p is not None and p.get("gate_mean") is not None

    @property
    def last_probe(self):
        return self.probes[-1] if self.probes else None

    # ---- summary figures (None = no data) ----
    def final_val_loss(self):
        return self.evals[-1]["val_loss"] if self.evals else None

    def final_val_step(self):
        return self.evals[-1]["step"] if self.evals else None

    def last_step(self):
        return int(self.steps[-1]["step"]) if self.steps else None

    def spike_counts(self):
        """(loss + grad_norm, loss, grad_norm) spike records, or None when the run shows no
        spike detector. Non-finite steps ("nonfinite" records) are counted by skipped_steps."""
        detector = "spike" in self.types or "metrics" in self.cfg
        if not detector:
            return None
        n_loss = sum(1 for s in self.spikes if s["kind"] == "loss")
        n_grad = sum(1 for s in self.spikes if s["kind"] == "grad_norm")
        return (n_loss + n_grad, n_loss, n_grad)

    def skipped_steps(self):
        """Step records whose update was skipped (non-finite, or a spike over skip_*_z)."""
        flags = [s.get("skipped") for s in self.steps]
        if not flags or not all(isinstance(f, bool) for f in flags):
            return None
        return sum(flags)

    def layer_values(self, probe, key):
        layers = probe.get("layers") or []
        return [l.get(key) for l in layers]

    # run-level figures of a probe: the record's own field, else the mean over its layers
    def probe_m_act(self, probe):
        """M-Act: mean over layers of the per-layer max |h| of the residual stream."""
        v = probe.get("m_act_mean")
        if is_num(v):
            return v
        vals = [x for x in self.layer_values(probe, "m_act") if is_num(x)]
        return float(np.mean(vals)) if vals else None

    def probe_f_attn(self, probe):
        v = probe.get("f_attn_mean")
        if is_num(v):
            return v
        vals = [x for x in self.layer_values(probe, "f_attn") if is_num(x)]
        return float(np.mean(vals)) if vals else None

    def probe_gate_mean(self, probe):
        v = probe.get("gate_mean")
        if is_num(v):
            return v
        vals = [x for x in self.layer_values(probe, "gate_mean") if is_num(x)]
        return float(np.mean(vals)) if vals else None

    def f_attn_uniform(self, probe):
        v = probe.get("f_attn_uniform") if probe else None
        if is_num(v):
            return v
        T = self.conf("train", "seq_len")
        if T and T.isdigit() and int(T) > 1:
            T = int(T)
            return sum(1.0 / (q + 1) for q in range(1, T)) / (T - 1)
        return None

    def probe_m_act_ratio(self, probe):
        """Mean over layers of max |h| / median |h| of the residual stream (outliers vs a
        uniformly larger stream: massive activations give ratios of 100-1000)."""
        vals = [x for x in self.layer_values(probe, "m_act_ratio") if is_num(x) and math.isfinite(x)]
        return float(np.mean(vals)) if vals else None

    def median_tokens_per_s(self):
        v = [s["tokens_per_s"] for s in self.steps if finite(s.get("tokens_per_s"))]
        return float(np.median(v)) if v else None


# ------------------------------------------------------------------------------------------
# formatting

def fmt(v, spec):
    if v is None:
        return "-"
    if is_num(v) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return format(v, spec)


def md_cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_table(header, rows):
    out = ["| " + " | ".join(md_cell(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(md_cell(c) for c in r) + " |")
    return "\n".join(out)


def run_names(paths):
    """Basenames; the path relative to the common parent where basenames collide."""
    base = [os.path.basename(os.path.normpath(p)) or p for p in paths]
    if len(set(base)) == len(base):
        return base
    common = os.path.commonpath([os.path.abspath(p) for p in paths])
    return [os.path.relpath(os.path.abspath(p), common) for p in paths]


# ------------------------------------------------------------------------------------------
# figures (each returns None when drawn, else the reason it was skipped)

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def color(i):
    return COLORS[i % len(COLORS)]


def smooth(y):
    """Trailing median over w = max(1, min(50, n // 20)) points, ignoring non-finite values.
    A median, not a mean: a spike (marked separately) does not lift the curve for w steps."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    w = max(1, min(50, n // 20))
    if w == 1:
        return y, w
    y = np.where(np.isfinite(y), y, np.nan)
    padded = np.concatenate([np.full(w - 1, np.nan), y])
    windows = np.lib.stride_tricks.sliding_window_view(padded, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN window gives NaN
        return np.nanmedian(windows, axis=1), w


class PlainLogFormatter(matplotlib.ticker.LogFormatter):
    """matplotlib's choice of which log ticks to label, written as plain numbers (0.6, 2, 100)."""
    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def log_axis(ax, which="y"):
    """Log scale with plain tick labels (0.6, 2, 100; not 6e-01 or 2x10^0)."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def fig_loss(runs, path):
    if not any(r.steps or r.evals for r in runs):
        return "no step or eval records in any run"
    have_grad = any(any(finite(s.get("grad_norm")) for s in r.steps) for r in runs)
    nrows = 2 if have_grad else 1
    fig, axes = plt.subplots(nrows, 1, figsize=(9, 4.2 * nrows), sharex=True, squeeze=False)
    ax = axes[0][0]
    win = None
    for i, r in enumerate(runs):
        c = color(i)
        if r.steps:
            x = np.array([s["step"] for s in r.steps], dtype=float)
            y = np.array([s["loss"] for s in r.steps], dtype=float)
            ys, w = smooth(y)
            win = max(win or 1, w)
            ax.plot(x, y, color=c, alpha=0.18, lw=0.8)
            ax.plot(x, ys, color=c, lw=1.6, label=f"{r.name} train")
        if r.evals:
            ax.plot([e["step"] for e in r.evals], [e["val_loss"] for e in r.evals], "o--",
                    color=c, ms=5, lw=0.8, mfc="white", label=f"{r.name} val")
        skipped = [s["step"] for s in r.steps if s.get("skipped") is True][:200]
        for j, st in enumerate(skipped):
            ax.axvline(st, color=c, ls=":", lw=0.9, alpha=0.7, label=f"{r.name} update skipped" if j == 0 else None)
        ls = [s for s in r.spikes if s["kind"] == "loss" and finite(s.get("value"))]
        if ls:
            ax.scatter([s["step"] for s in ls], [s["value"] for s in ls], marker="X", s=70,
                       color=c, edgecolor="black", zorder=5, label=f"{r.name} loss spike")
    ax.set_ylabel("loss (nats/token)")
    title = "loss"
    if win and win > 1:
        title += f" (train: faint raw, solid trailing median over up to {win} steps; val: circles)"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if have_grad:
        ax2 = axes[1][0]
        for i, r in enumerate(runs):
            pts = [(s["step"], s["grad_norm"]) for s in r.steps if finite(s.get("grad_norm")) and s["grad_norm"] > 0]
            if pts:
                ax2.plot(*zip(*pts), color=color(i), lw=0.9, label=f"{r.name}")
            gs = [s for s in r.spikes if s["kind"] == "grad_norm" and finite(s.get("value")) and s["value"] > 0]
            if gs:
                ax2.scatter([s["step"] for s in gs], [s["value"] for s in gs], marker="X", s=70,
                            color=color(i), edgecolor="black", zorder=5, label=f"{r.name} grad-norm spike")
        log_axis(ax2)
        ax2.set_ylabel("grad norm (before clipping)")
        ax2.grid(alpha=0.3, which="both")
        ax2.legend(fontsize=8)
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _per_layer_fig(runs, path, key, ylabel, title, logy=False, uniform=False, max_head=False):
    have = [(i, r) for i, r in enumerate(runs)
            if r.last_probe and any(is_num(v) for v in r.layer_values(r.last_probe, key))]
    if not have:
        return "no probe records with per-layer values in any run"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    unif_drawn = set()
    for i, r in have:
        p = r.last_probe
        vals = r.layer_values(p, key)
        xs = [l.get("layer", j) for j, l in enumerate(p["layers"])]
        pts = [(x, v) for x, v in zip(xs, vals) if is_num(v) and (not logy or v > 0)]
        if pts:
            ax.plot(*zip(*pts), "o-", color=color(i), label=f"{r.name} (step {int(p['step'])})")
        if max_head:
            mh = [(x, v) for x, v in zip(xs, r.layer_values(p, "f_attn_max_head")) if is_num(v)]
            if mh:
                ax.plot(*zip(*mh), "v:", color=color(i), alpha=0.6, ms=5, label=f"{r.name} largest head")
        if uniform:
            u = r.f_attn_uniform(p)
            if u is not None and round(u, 4) not in unif_drawn:
                unif_drawn.add(round(u, 4))
                ax.axhline(u, color="gray", ls="--", lw=1, label=f"uniform attention ({u:.3f})")
    if max_head:
        ax.axhline(SINK_HEAD_THRESHOLD, color="red", ls=":", lw=0.8, alpha=0.6,
                   label=f"sink-head threshold ({SINK_HEAD_THRESHOLD})")
    if logy:
        log_axis(ax)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def fig_m_act(runs, path):
    return _per_layer_fig(runs, path, "m_act", "max |h|, residual stream after the layer",
                          "M-Act per layer (last probe)", logy=True)


def fig_f_attn(runs, path):
    return _per_layer_fig(runs, path, "f_attn", "attention probability on token 0",
                          "F-Attn per layer (last probe; mean over heads and queries 1..T-1)",
                          uniform=True, max_head=True)


def gate_hists(r):
    p = r.last_probe
    if not p:
        return None
    hs = [h for h in r.layer_values(p, "gate_hist")
          if isinstance(h, list) and len(h) > 0 and all(is_num(x) for x in h)]
    return hs or None


def fig_gate(runs, path):
    gated = [(i, r) for i, r in enumerate(runs) if gate_hists(r)]
    if not gated:
        if not any(r.has_gate for r in runs):
            return "no run has a gate (attn_gate = none)"
        return "no probe record with gate histograms in any gated run"
    n = len(gated)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.8), squeeze=False)
    for ax, (i, r) in zip(axes[0], gated):
        hs = gate_hists(r)
        nb = len(hs[0])
        hs = [h for h in hs if len(h) == nb]
        edges = np.linspace(0, 1, nb + 1)
        mean = np.mean(np.array(hs, dtype=float), axis=0)
        ax.bar(edges[:-1], mean, width=1.0 / nb, align="edge", color=color(i), alpha=0.55,
               edgecolor="black", lw=0.5, label="mean over layers")
        cmap = plt.get_cmap("viridis")
        for j, h in enumerate(hs):
            ax.step(edges, np.append(h, h[-1]), where="post", lw=0.9, alpha=0.8,
                    color=cmap(0.85 * j / max(1, len(hs) - 1)), label=f"layer {j}" if len(hs) <= 8 else None)
        p = r.last_probe
        gm = r.probe_gate_mean(p)
        ax.set_title(f"{r.name}: step {int(p['step'])}, mean gate {fmt(gm, '.3f')}", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_xlabel("gate score")
        ax.set_ylabel("fraction of gate scores")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def fig_probes(runs, path):
    have = [(i, r) for i, r in enumerate(runs) if len(r.probes) >= 2]
    if not have:
        return "fewer than 2 probe records in every run"
    series = [("M-Act (mean over layers of max |h|)", Run.probe_m_act, True),
              ("F-Attn (mean over layers)", Run.probe_f_attn, False),
              ("mean gate score", Run.probe_gate_mean, False)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for ax, (label, fn, logy) in zip(axes, series):
        for i, r in have:
            pts = [(p["step"], fn(r, p)) for p in r.probes]
            pts = [(s, v) for s, v in pts if finite(v) and (not logy or v > 0)]
            if pts:
                ax.plot(*zip(*pts), "o-", ms=3, color=color(i), label=r.name)
        if logy:
            log_axis(ax)
        else:
            vals = [v for ln in ax.lines for v in ln.get_ydata()]
            if vals and min(vals) >= 0 and max(vals) <= 1:
                ax.set_ylim(0, max(0.05, 1.15 * max(vals)))
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3, which="both")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


FIGURES = [
    ("loss.png", "Loss", fig_loss,
     "Train loss (faint: every step; solid: trailing median) and validation loss (circles); "
     "loss spikes as crosses, steps whose update was skipped as dotted vertical lines. Below: the gradient norm before clipping, grad-norm spikes as crosses."),
    ("m_act.png", "M-Act per layer", fig_m_act,
     "Max |h| of the residual stream after each layer at the last probe (log scale). "
     "Massive activations show as a jump of one to three orders of magnitude in the early layers."),
    ("f_attn.png", "F-Attn per layer", fig_f_attn,
     "Attention probability on the first token per layer at the last probe (solid), the largest "
     "head (dotted), the value uniform attention would give (dashed) and the sink-head threshold."),
    ("gate_hist.png", "Gate scores", fig_gate,
     "Distribution of the gate scores at the last probe (10 bins over [0, 1]): the mean over "
     "layers as bars, each layer as a line. The paper's gate is sparse: most scores near 0."),
    ("probes.png", "Probes over training", fig_probes,
     "Run-level M-Act, F-Attn and mean gate score at every probe."),
]


# ------------------------------------------------------------------------------------------
# report.md

IGNORED_DIFF = {("log", "run_dir"), ("checkpoint", "dir")}


def config_diff(runs):
    with_cfg = [r for r in runs if r.cfg]
    if len(with_cfg) < 2:
        return None
    keys = []
    for r in with_cfg:
        for sec, kv in r.cfg.items():
            for k in kv:
                if (sec, k) not in keys and (sec, k) not in IGNORED_DIFF:
                    keys.append((sec, k))
    rows = []
    for sec, k in keys:
        vals = [r.conf(sec, k, "(absent)") for r in with_cfg]
        if len(set(vals)) > 1:
            rows.append([f"[{sec}] {k}"] + vals)
    return [r.name for r in with_cfg], rows


def summary_rows(runs):
    rows = []
    for r in runs:
        sc = r.spike_counts()
        p = r.last_probe
        rows.append([
            r.name,
            r.attn_gate or "-",
            fmt(r.last_step(), "d"),
            fmt(r.final_val_loss(), ".4f"),
            "-" if sc is None else f"{sc[0]} ({sc[1]}/{sc[2]})",
            fmt(r.skipped_steps(), "d"),
            fmt(r.probe_m_act(p) if p else None, ".1f"),
            fmt(r.probe_f_attn(p) if p else None, ".3f"),
            fmt(r.probe_gate_mean(p) if (p and r.has_gate) else None, ".3f"),
            fmt(r.median_tokens_per_s(), ".0f"),
        ])
    return rows


SUMMARY_HEADER = ["run", "attn_gate", "steps", "final val loss", "spikes (loss/grad)",
                  "skipped steps", "M-Act", "F-Attn", "mean gate", "median tokens/s"]


# ------------------------------------------------------------------------------------------
# seeds: runs whose configs differ only in [train] seed (and run_dir) form a group

SEED_KEY = ("train", "seed")


def seed_groups(runs):
    """[(label, [runs])] for groups of 2+ runs with configs equal up to the seed; None when no
    such group exists. The label lists what sets the group apart from the first group."""
    with_cfg = [r for r in runs if r.cfg]
    def key(r):
        return tuple(sorted((sec, k, v) for sec, kv in r.cfg.items() for k, v in kv.items()
                            if (sec, k) not in IGNORED_DIFF and (sec, k) != SEED_KEY))
    groups = {}
    for r in with_cfg:
        groups.setdefault(key(r), []).append(r)
    multi = [g for g in groups.values() if len(g) > 1]
    if not multi:
        return None
    base = dict(((s, k), v) for s, k, v in key(multi[0][0]))
    out = []
    for g in multi:
        mine = dict(((s, k), v) for s, k, v in key(g[0]))
        diff = [f"[{s}] {k} = {v}" for (s, k), v in mine.items() if base.get((s, k)) != v]
        diff += [f"[{s}] {k} unset" for (s, k) in base if (s, k) not in mine]
        out.append(("; ".join(diff) if diff else "(first group)", g))
    return out


def spread(vals, spec):
    """'mean [min, max]' over the non-missing values"""
    v = [x for x in vals if x is not None and math.isfinite(x)]
    if not v:
        return "-"
    return f"{format(float(np.mean(v)), spec)} [{format(min(v), spec)}, {format(max(v), spec)}]"


def seed_rows(groups):
    rows = []
    for label, g in groups:
        probes = [(r, r.last_probe) for r in g]
        sc = [r.spike_counts() for r in g]
        rows.append([
            label, g[0].attn_gate or "-",
            ", ".join(r.conf("train", "seed", "?") for r in g),
            spread([r.final_val_loss() for r in g], ".4f"),
            spread([r.probe_m_act(p) if p else None for r, p in probes], ".2f"),
            spread([r.probe_m_act_ratio(p) if p else None for r, p in probes], ".1f"),
            spread([r.probe_f_attn(p) if p else None for r, p in probes], ".4f"),
            spread([r.probe_gate_mean(p) if (p and r.has_gate) else None for r, p in probes], ".3f"),
            "-" if any(s is None for s in sc) else ", ".join(str(s[0]) for s in sc),
        ])
    return rows


SEED_HEADER = ["group (differs from the first in)", "attn_gate", "seeds", "final val loss",
               "M-Act", "M-Act max/median", "F-Attn", "mean gate", "spikes per run"]


def layer_table(r):
    p = r.last_probe
    cols = [("layer", "layer", "d"), ("F-Attn", "f_attn", ".3f"), ("largest head", "f_attn_max_head", ".3f"),
            ("sink heads", "sink_heads", "d"), ("M-Act", "m_act", ".1f"), ("at pos", "m_act_pos", "d"),
            ("max/median", "m_act_ratio", ".1f"), ("attn out max", "attn_out_max", ".2f"),
            ("at pos", "attn_out_pos", "d"), ("MLP out max", "mlp_out_max", ".2f"), ("at pos", "mlp_out_pos", "d")]
    if r.has_gate:
        cols.append(("gate mean", "gate_mean", ".3f"))
    rows = []
    for j, l in enumerate(p.get("layers") or []):
        row = []
        for _, key, spec in cols:
            v = l.get(key, j if key == "layer" else None)
            if spec == "d" and is_num(v) and math.isfinite(v):
                v = int(v)
            row.append(fmt(v, spec) if (v is None or is_num(v)) else str(v))
        rows.append(row)
    return md_table([c[0] for c in cols], rows) if rows else None


def write_report(runs, out, notes_fig):
    L = []
    L.append("# gatedgpt run comparison\n")
    L.append("Runs:\n")
    for r in runs:
        L.append(f"- **{r.name}**: `{r.path}`")
    L.append("")
    diff = config_diff(runs)
    if diff is not None:
        names, rows = diff
        if rows:
            L.append("What differs between the configs (`[log] run_dir` aside):\n")
            L.append(md_table(["key"] + names, rows))
        else:
            L.append("The configs are identical (`[log] run_dir` aside).")
        L.append("")

    L.append("## Summary\n")
    L.append(md_table(SUMMARY_HEADER, summary_rows(runs)))
    L.append("")
    L.append("- **steps**: the last step record. **final val loss**: the last eval record "
             "(nats/token). **spikes**: loss and grad-norm spike records, total "
             "(loss/grad) ('-': the trainer logged no spike detection). **skipped steps**: steps "
             "whose update was skipped (non-finite loss or gradient, or a spike above "
             "`skip_loss_z`/`skip_grad_z`). **M-Act**: mean over layers of max |h| of the residual stream, last "
             "probe. **F-Attn**: attention on the first token, mean over layers, heads and queries "
             "1..T-1, last probe. **mean gate**: mean gate score, last probe. **median tokens/s**: "
             "over all step records. '-': no such data in the log. Definitions: docs/metrics.md.")
    unif = sorted({round(u, 4) for r in runs for u in [r.f_attn_uniform(r.last_probe)] if u is not None})
    if unif:
        L.append(f"- Uniform attention would give F-Attn = {', '.join(f'{u:.3f}' for u in unif)} "
                 f"(mean over q = 1..T-1 of 1/(q+1)).")
    L.append("")
    groups = seed_groups(runs)
    if groups:
        L.append("## Across seeds\n")
        L.append("Runs whose configs differ only in `[train] seed` are grouped; each cell is the "
                 "mean over the group's seeds and [min, max] (last probe for the probe figures). "
                 "**M-Act max/median**: mean over layers of the residual stream's max |h| over its "
                 "median |h|.\n")
        L.append(md_table(SEED_HEADER, seed_rows(groups)))
        L.append("")
    L.append("Paper reference (Qiu et al. 2025, Table 4: 15B MoE, 3.5T tokens; baseline vs the "
             "elementwise SDPA sigmoid gate):\n")
    L.append(md_table(["", "F-Attn", "M-Act", "mean gate"],
                      [["baseline", f"{PAPER['f_attn'][0]:.3f}", f"{PAPER['m_act'][0]}", "-"],
                       ["gated", f"{PAPER['f_attn'][1]:.3f}", f"{PAPER['m_act'][1]}", f"{PAPER['gate_mean']:.3f}"]]))
    L.append("")

    L.append("## Figures\n")
    for fname, title, _, caption in FIGURES:
        skipped = notes_fig.get(fname)
        L.append(f"### {title}\n")
        if skipped:
            L.append(f"_Figure skipped: {skipped}._\n")
        else:
            L.append(f"![{title}]({fname})\n")
            L.append(caption + "\n")

    probed = [r for r in runs if r.last_probe and r.last_probe.get("layers")]
    if probed:
        L.append("## Per-layer probe values (last probe)\n")
        for r in probed:
            p = r.last_probe
            t = layer_table(r)
            if t:
                extra = ""
                if finite(p.get("loss")):
                    extra += f", probe-batch loss {p['loss']:.4f}"
                if finite(p.get("ms")):
                    extra += f", {p['ms']:.0f} ms"
                L.append(f"**{r.name}**, step {int(p['step'])}{extra}:\n")
                L.append(t)
                L.append("")

    spiky = [r for r in runs if r.spikes]
    if spiky:
        L.append("## Spikes\n")
        for r in spiky:
            kinds = {}
            for sp in r.spikes:
                kinds[sp["kind"]] = kinds.get(sp["kind"], 0) + 1
            L.append(f"**{r.name}**: {len(r.spikes)} spike records ("
                     + ", ".join(f"{n} {k}" for k, n in kinds.items()) + ")"
                     + (", the first 30:" if len(r.spikes) > 30 else ":") + "\n")
            rows = [[fmt(int(s["step"]), "d"), s["kind"], fmt(s.get("value"), ".4g"), fmt(s.get("mean"), ".4g"),
                     fmt(s.get("std"), ".3g"), fmt(s.get("z"), ".1f"),
                     "yes" if s.get("skipped") is True else ("no" if s.get("skipped") is False else "-")]
                    for s in r.spikes[:30]]
            L.append(md_table(["step", "kind", "value", "window mean", "window std", "z", "update skipped"], rows))
            L.append("")

    sampled = [r for r in runs if r.samples]
    if sampled:
        L.append("## Last samples\n")
        for r in sampled:
            s = r.samples[-1]
            text = (str(s.get("prompt", "")) + str(s.get("text", ""))).replace("```", "'''").rstrip()
            if len(text) > 600:
                text = text[:600] + " ..."
            L.append(f"**{r.name}**, step {int(s['step'])}:\n")
            L.append("```\n" + text + "\n```\n")

    notes = [f"{r.name}: {n}" for r in runs for n in r.notes]
    for r in runs:
        if not r.evals:
            notes.append(f"{r.name}: no eval records (validation off or not reached): final val loss '-'")
        if not r.probes:
            notes.append(f"{r.name}: no probe records (the trainer has no probes yet, or none was due): "
                         f"M-Act, F-Attn and mean gate '-'")
        bad = [s for s in r.steps if not finite(s["loss"])]
        if bad:
            notes.append(f"{r.name}: {len(bad)} step(s) with a non-finite loss (first at step {int(bad[0]['step'])})")
    if notes:
        L.append("## Notes\n")
        L.extend(f"- {n}" for n in notes)
        L.append("")
    with open(os.path.join(out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(L).rstrip() + "\n")


def main():
    ap = argparse.ArgumentParser(prog="report.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="train_gpt run directories")
    ap.add_argument("--out", metavar="DIR",
                    help="output directory (default: the run directory for one run, else their common parent)")
    args = ap.parse_args()
    for p in args.runs:
        if not os.path.isdir(p):
            die(f"{p}: no such run directory" if not os.path.exists(p) else f"{p}: not a directory")
    out = args.out
    if out is None:
        if len(args.runs) == 1:
            out = args.runs[0]
        else:
            out = os.path.commonpath([os.path.abspath(p) for p in args.runs])
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        die(f"{out}: cannot create the output directory: {e.strerror}")
    names = run_names(args.runs)
    runs = [Run(p, n) for p, n in zip(args.runs, names)]
    notes_fig = {}
    for fname, _, fn, _ in FIGURES:
        path = os.path.join(out, fname)
        why = fn(runs, path)
        if why:
            notes_fig[fname] = why
            if os.path.exists(path):  # a stale figure from an earlier report would mislead
                os.remove(path)
    write_report(runs, out, notes_fig)
    drawn = [f for f, *_ in FIGURES if f not in notes_fig]
    print(f"{PROG}: {len(runs)} run(s) -> {os.path.join(out, 'report.md')}"
          f" ({', '.join(drawn) if drawn else 'no figures'}"
          f"{'; skipped ' + ', '.join(notes_fig) if notes_fig else ''})")


if __name__ == "__main__":
    main()
