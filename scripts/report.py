#!/usr/bin/python3
"""scripts/report.py: compare training runs of gatedgpt; writes report.md and PNG figures.

usage: scripts/report.py RUN_DIR... [--out DIR]
       scripts/report.py --replot REPORT_MD [--out DIR]

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

When some config was run at 2 or more learning rates (scripts/ablate.sh --lrs, with --seeds),
report.md gets a "Learning-rate sensitivity" section: per variant (the runs whose configs differ
only in [train] lr and seed) the final validation loss min(L, L0) at each lr, the LR sensitivity of
Wortsman et al. (per seed, then mean [min, max]; docs/metrics.md), a diverged run counting as L0,
and the figure
  lr_sweep.png     final validation loss against learning rate (log), one line per variant

When a run directory holds long_context.jsonl (scripts/long_context.sh: "length_eval" and
"stream_eval" records of the final checkpoint; docs/metrics.md), report.md gets a "Long context"
section: loss by context length per RoPE scaling and the streaming (rolling KV window) table,
one column per group of runs that differ only in the seed (mean [min, max]), each with a
sentence stating the measured differences, and the figures
  long_context_length.png   loss vs context length (log2), per scaling, per group
  long_context_buckets.png  loss per position bucket at the longest length, per scaling
  long_context_stream.png   streaming loss vs sink count S, positions cache / original, dense line
A malformed line in long_context.jsonl stops the report as one in log.jsonl does.

Missing data (no probe records yet, no validation) shows as '-' in the tables and the figure
is skipped with a note. A missing run directory, a missing or empty log.jsonl, or a line that
is not a JSON object with a "type" stops the report with an error naming the file and line.

--replot draws m_act.png and f_attn.png again from the per-layer tables of a report.md this
script wrote (values as printed there), for results whose run directories are not kept
(docs/results/).

Figures: every legend sits outside the axes (to the right); a log axis spans whole decades
around its data and labels each of them.

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
# "num?": a number, or null: train/jsonl.c writes a non-finite float as null (JSON has no NaN), so
# a step or eval of a diverged run reads as NaN
REQUIRED = {
    "step": {"step": "num", "loss": "num?"},
    "eval": {"step": "num", "val_loss": "num?"},
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


def read_jsonl(path, what, empty_hint, types_hint):
    """[(line number, record)] of a JSON-lines file, in file order: every non-blank line must be a
    JSON object with a "type" string. Errors name the file and the line; an incomplete last line
    (no newline: the writer is still at it) is skipped with a warning."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"{path}: cannot read the {what}: {e.strerror}")
    if not data.strip():
        die(f"{path}: the {what} is empty (no records): {empty_hint}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        die(f"{path}:{line}: not UTF-8 text (byte {e.start})")
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    out = []
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
        if not isinstance(rec.get("type"), str):
            die(f"{path}:{i}: record without a \"type\" string (expected {types_hint})")
        out.append((i, rec))
    return out


def check_fields(path, i, rec, required):
    """required: {field: kind}, kind "num", "num?" (a number or null, read as NaN) or "str"; dies
    naming the file, line and field."""
    t = rec["type"]
    for key, kind in required.items():
        v = rec.get(key)
        if kind == "num?" and key in rec and v is None:
            rec[key] = float("nan")
            continue
        ok = is_num(v) if kind.startswith("num") else isinstance(v, str)
        if not ok:
            die(f"{path}:{i}: \"{t}\" record: field \"{key}\" is {'missing' if key not in rec else repr(v)}"
                f" (expected a {'number' if kind.startswith('num') else 'string'})")


def read_log(path):
    """Records of a log.jsonl, in file order. Errors name the file and the line."""
    records = []
    for i, rec in read_jsonl(path, "log", "did the run start? (train_gpt writes one record per step)",
                             "step, eval, sample, probe or spike"):
        t = rec["type"]
        check_fields(path, i, rec, REQUIRED.get(t, {}))
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


# long_context.jsonl (scripts/long_context.sh: gatedgpt_ckpt lengths / stream on the final
# checkpoint): "length_eval" and "stream_eval" records
LC_FILE = "long_context.jsonl"
LC_REQUIRED = {
    "length_eval": {"step": "num", "scaling": "str", "length": "num", "loss": "num"},
    "stream_eval": {"step": "num", "window": "num", "sinks": "num", "positions": "str", "loss": "num"},
}
SCALING_ORDER = ["none", "linear", "ntk", "yarn"]
POSITIONS_ORDER = ["cache", "original"]


def _lc_field_error(path, i, t, key, v, expected):
    die(f"{path}:{i}: \"{t}\" record: field \"{key}\" is {repr(v)} (expected {expected})")


def read_long_context(path):
    """A run's long_context.jsonl: {"path", "step", "length": {(scaling, length): rec},
    "stream": {key: rec}, "notes": [...]}, from the records of the latest step in the file
    (a later line of the same key wins). Errors name the file and the line, as for log.jsonl."""
    recs = []
    for i, rec in read_jsonl(path, "long-context file", "did scripts/long_context.sh finish?",
                             "length_eval or stream_eval"):
        t = rec["type"]
        if t not in LC_REQUIRED:
            continue  # other record types are not the report's
        check_fields(path, i, rec, LC_REQUIRED[t])
        b = rec.get("buckets")
        if b is not None and not (isinstance(b, list) and all(
                isinstance(x, dict) and is_num(x.get("lo")) and is_num(x.get("hi")) and is_num(x.get("loss"))
                for x in b)):
            _lc_field_error(path, i, t, "buckets", b if len(repr(b)) <= 60 else "[...]",
                            "a list of {\"lo\", \"hi\", \"loss\"} objects with numbers")
        for key in ("train_len", "factor") + (("loss_after_window",) if t == "stream_eval" else ()):
            if rec.get(key) is not None and not is_num(rec[key]):
                _lc_field_error(path, i, t, key, rec[key], "a number or null")
        if t == "stream_eval":
            fa = rec.get("f_attn")
            if fa is not None and not (isinstance(fa, list) and all(x is None or is_num(x) for x in fa)):
                _lc_field_error(path, i, t, "f_attn", fa, "a list of numbers, one per layer, or null")
            if rec.get("dense") is not None and not isinstance(rec["dense"], bool):
                _lc_field_error(path, i, t, "dense", rec["dense"], "true or false")
        rec["_line"] = i
        recs.append(rec)
    out = {"path": path, "step": None, "length": {}, "stream": {}, "notes": []}
    if not recs:
        out["notes"].append(f"no length_eval or stream_eval record in {path}")
        return out
    step = max(r["step"] for r in recs)
    older = sorted({int(r["step"]) for r in recs if r["step"] != step})
    if older:
        out["notes"].append(f"{LC_FILE} also holds records of step(s) {', '.join(map(str, older))}: "
                            f"only step {int(step)} (the latest) is reported")
    out["step"] = step
    dup = 0
    for r in recs:
        if r["step"] != step:
            continue
        if r["type"] == "length_eval":
            d, k = out["length"], (r["scaling"], r["length"])
        else:
            d, k = out["stream"], stream_key(r)
        dup += k in d
        d[k] = r
    if dup:
        out["notes"].append(f"{LC_FILE}: {dup} record(s) repeat an earlier one of step {int(step)} "
                            f"(same scaling and length, or same stream setting): the later line is used")
    return out


def stream_key(r):
    """The stream table's row: the dense reference is one row whatever its window."""
    if r.get("dense") is True:
        return ("dense",)
    return ("stream", r["window"], r["sinks"], r["positions"])


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
        lc = os.path.join(path, LC_FILE)
        self.lc = read_long_context(lc) if os.path.isfile(lc) else None

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

    # ---- the learning-rate sweep's figures (docs/metrics.md, "LR sensitivity") ----
    def init_val_loss(self):
        """L0: the validation loss of the untrained model, this run's eval record at step 0 (the
        trainer writes it before the first step); None when there is none (e.g. a resumed log)."""
        e = next((e for e in self.evals if e["step"] == 0), None)
        return e["val_loss"] if e is not None else None

    def end_val_loss(self):
        """(L, state) for the final validation loss L: the eval record at the config's [train]
        steps (the last eval of a completed run). state "ok" (L finite), "diverged" (that eval is
        non-finite, or there is none and the trainer stopped on non-finite losses: the last
        step or spike record is a non-finite loss or a "nonfinite" spike; L = None) or
        "incomplete" (neither: a run still going, or one that failed for another reason)."""
        try:
            steps = int(self.conf("train", "steps"))
        except (TypeError, ValueError):
            return None, "incomplete"
        e = next((e for e in reversed(self.evals) if e["step"] == steps), None)
        if e is not None:
            return (e["val_loss"], "ok") if finite(e["val_loss"]) else (None, "diverged")
        tail = sorted(self.steps + self.spikes, key=lambda r: (r["step"], r["_line"]))
        if tail:
            t = tail[-1]
            if (t["type"] == "step" and not finite(t["loss"])) or \
                    (t["type"] == "spike" and t["kind"] == "nonfinite"):
                return None, "diverged"
        return None, "incomplete"

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
    """Log scale (base 10) over whole decades: call after plotting. The limits are the powers of
    10 just below the smallest and just above the largest positive value drawn (lines and
    markers), strictly outside them, and every decade between is a labelled major tick, so the
    top label is above every curve (matplotlib's own limits end at the data and can leave its
    largest values above the last labelled decade). Plain tick labels (0.1, 1, 100; not 1e-01 or
    10^2); minor ticks labelled as matplotlib chooses when the axis spans 2 decades or less."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    k = 0 if which == "x" else 1
    vals = [np.asarray(ln.get_xdata() if k == 0 else ln.get_ydata(), dtype=float).ravel() for ln in ax.get_lines()]
    for c in ax.collections:
        off = np.asarray(c.get_offsets(), dtype=float)
        if off.ndim == 2 and off.shape[1] == 2:
            vals.append(off[:, k])
    vals = [float(v) for v in np.concatenate(vals + [np.zeros(0)]) if math.isfinite(v) and v > 0]
    if vals:
        lo = math.ceil(math.log10(min(vals))) - 1
        hi = math.floor(math.log10(max(vals))) + 1
        getattr(ax, f"set_{which}lim")(10.0 ** lo, 10.0 ** hi)
        axis.set_major_locator(matplotlib.ticker.FixedLocator([10.0 ** e for e in range(lo, hi + 1)]))
        axis.set_minor_locator(matplotlib.ticker.LogLocator(base=10, subs=np.arange(2, 10), numticks=1000))
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, pos=None: f"{x:g}"))
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def save_legend_outside(fig, path, handles=None, fontsize=8):
    """Lays the figure out, puts one legend to the right of all its axes (outside them: it never
    covers a curve) and saves with the bounding box grown to hold it. handles: the legend's
    artists (their labels), default every labelled artist of the axes, one per label in order."""
    fig.tight_layout()
    axes = [a for a in fig.axes if a.get_visible()]
    if handles is None:
        seen, handles = set(), []
        for a in axes:
            for h, lab in zip(*a.get_legend_handles_labels()):
                if lab not in seen:
                    seen.add(lab)
                    handles.append(h)
    if handles:
        right = max(a.get_position().x1 for a in axes)
        top = max(a.get_position().y1 for a in axes)
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(right + 0.01, top),
                   bbox_transform=fig.transFigure, borderaxespad=0.0, fontsize=fontsize)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def fig_loss(runs, path):
    if not any(r.steps or r.evals for r in runs):
        return "no step or eval records in any run"
    have_grad = any(any(finite(s.get("grad_norm")) for s in r.steps) for r in runs)
    nrows = 2 if have_grad else 1
    from matplotlib.lines import Line2D
    fig, axes = plt.subplots(nrows, 1, figsize=(9, 4.2 * nrows), sharex=True, squeeze=False)
    ax = axes[0][0]
    win = None
    # the legend: one entry per run (its colour), then one per kind of mark (in black)
    handles = [Line2D([], [], color=color(i), lw=1.6, label=r.name) for i, r in enumerate(runs)]
    kinds = {}
    for i, r in enumerate(runs):
        c = color(i)
        if r.steps:
            x = np.array([s["step"] for s in r.steps], dtype=float)
            y = np.array([s["loss"] for s in r.steps], dtype=float)
            ys, w = smooth(y)
            win = max(win or 1, w)
            ax.plot(x, y, color=c, alpha=0.18, lw=0.8)
            ax.plot(x, ys, color=c, lw=1.6)
            kinds["train"] = Line2D([], [], color="black", lw=1.6, label="train loss")
        if r.evals:
            ax.plot([e["step"] for e in r.evals], [e["val_loss"] for e in r.evals], "o--",
                    color=c, ms=5, lw=0.8, mfc="white")
            kinds["val"] = Line2D([], [], color="black", ls="--", marker="o", ms=5, lw=0.8, mfc="white", label="val loss")
        skipped = [s["step"] for s in r.steps if s.get("skipped") is True][:200]
        for st in skipped:
            ax.axvline(st, color=c, ls=":", lw=0.9, alpha=0.7)
        if skipped:
            kinds["skip"] = Line2D([], [], color="black", ls=":", lw=0.9, label="update skipped")
        ls = [s for s in r.spikes if s["kind"] == "loss" and finite(s.get("value"))]
        if ls:
            ax.scatter([s["step"] for s in ls], [s["value"] for s in ls], marker="X", s=70,
                       color=c, edgecolor="black", zorder=5)
            kinds["loss_spike"] = Line2D([], [], ls="", marker="X", ms=8, color="gray", mec="black", label="loss spike")
    ax.set_ylabel("loss (nats/token)")
    title = "loss"
    if win and win > 1:
        title += f" (train: faint raw, solid trailing median over up to {win} steps; val: circles)"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if have_grad:
        ax2 = axes[1][0]
        for i, r in enumerate(runs):
            pts = [(s["step"], s["grad_norm"]) for s in r.steps if finite(s.get("grad_norm")) and s["grad_norm"] > 0]
            if pts:
                ax2.plot(*zip(*pts), color=color(i), lw=0.9)
            gs = [s for s in r.spikes if s["kind"] == "grad_norm" and finite(s.get("value")) and s["value"] > 0]
            if gs:
                ax2.scatter([s["step"] for s in gs], [s["value"] for s in gs], marker="X", s=70,
                            color=color(i), edgecolor="black", zorder=5)
                kinds["grad_spike"] = Line2D([], [], ls="", marker="X", ms=8, color="gray", mec="black",
                                             label="grad-norm spike (below)")
        log_axis(ax2)
        ax2.set_ylabel("grad norm (before clipping)")
        ax2.grid(alpha=0.3, which="both")
    axes[-1][0].set_xlabel("step")
    order = ["train", "val", "skip", "loss_spike", "grad_spike"]
    save_legend_outside(fig, path, handles + [kinds[k] for k in order if k in kinds])
    return None


def _per_layer_fig(runs, path, key, ylabel, title, logy=False, uniform=False, max_head=False):
    have = [(i, r) for i, r in enumerate(runs)
            if r.last_probe and any(is_num(v) for v in r.layer_values(r.last_probe, key))]
    if not have:
        return "no probe records with per-layer values in any run"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    unif = []  # drawn after the runs, so the legend lists the runs first
    head_drawn = False
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
                ax.plot(*zip(*mh), "v:", color=color(i), alpha=0.6, ms=5)
                head_drawn = True
        if uniform:
            u = r.f_attn_uniform(p)
            if u is not None and round(u, 4) not in [round(x, 4) for x in unif]:
                unif.append(u)
    for u in unif:
        ax.axhline(u, color="gray", ls="--", lw=1, label=f"uniform attention ({u:.3f})")
    if head_drawn:  # one entry for every run's dotted line (in the run's colour)
        ax.plot([], [], "v:", color="gray", ms=5, label="largest head (dotted, run's colour)")
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
    save_legend_outside(fig, path)
    return None


def fig_m_act(runs, path, note=""):
    return _per_layer_fig(runs, path, "m_act", "max |h|, residual stream after the layer",
                          "M-Act per layer (last probe" + note + ")", logy=True)


def fig_f_attn(runs, path, note=""):
    return _per_layer_fig(runs, path, "f_attn", "attention probability on token 0",
                          "F-Attn per layer (last probe; mean over heads and queries 1..T-1" + note + ")",
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
               edgecolor="black", lw=0.5)
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
    # one legend for all panels: the layers' lines (the same colours in every panel), then the bars
    from matplotlib.patches import Patch
    seen, handles = set(), []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
    handles.append(Patch(facecolor="lightgray", edgecolor="black", lw=0.5, label="mean over layers (bars, run's colour)"))
    save_legend_outside(fig, path, handles, fontsize=7)
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
    save_legend_outside(fig, path, fontsize=7)  # the runs, once for the three panels
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


# keys that do not change what a run computes: the CPU backend's results do not depend on the
# thread count (the same losses to every printed digit at 1 and 2 threads), so runs that differ
# only there still group
SAME_RESULT_KEYS = {("train", "threads")}


def config_key(r):
    """The run's config up to the seed (and run_dir, checkpoint dir, thread count)."""
    return tuple(sorted((sec, k, v) for sec, kv in r.cfg.items() for k, v in kv.items()
                        if (sec, k) not in IGNORED_DIFF and (sec, k) != SEED_KEY
                        and (sec, k) not in SAME_RESULT_KEYS))


def seed_groups(runs):
    """[(label, [runs])] for groups of 2+ runs with configs equal up to the seed; None when no
    such group exists. The label lists what sets the group apart from the first group."""
    with_cfg = [r for r in runs if r.cfg]
    key = config_key
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
    if any(l.get("kind") == "linear" for l in (p.get("layers") or [])):   # a hybrid: the mixer and its state
        cols.insert(1, ("mixer", "kind", "s"))
        cols.append(("GDN state", "gdn_state_norm", ".3f"))
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


# ------------------------------------------------------------------------------------------
# learning-rate sensitivity (Wortsman et al. 2023, "Small-scale proxies for large-scale
# Transformer training instabilities"): runs whose configs differ only in [train] lr and seed
# (scripts/ablate.sh --lrs --seeds); definition in docs/metrics.md, "LR sensitivity"

LR_KEY = ("train", "lr")
LR_FIGURE = "lr_sweep.png"


class LRPoint:
    """One run of the sweep: its lr, seed, L0, final L and state (Run.end_val_loss)."""
    def __init__(self, r):
        self.run = r
        self.lr = float(r.conf("train", "lr"))
        self.seed = r.conf("train", "seed", "?")
        self.L0 = r.init_val_loss()
        self.L, self.state = r.end_val_loss()
        if self.L0 is None or not finite(self.L0):
            self.state = "no L0"

    def clipped(self):
        """min(L, L0), L0 for a diverged run; None when the run gives no result."""
        if self.state == "ok":
            return min(self.L, self.L0)
        return self.L0 if self.state == "diverged" else None


class LRVariant:
    """The runs of one config up to lr and seed: points[seed][lr] = LRPoint."""
    def __init__(self, label, runs):
        self.label = label
        self.points = {}
        for r in runs:
            p = LRPoint(r)
            self.points.setdefault(p.seed, {})[p.lr] = p
        self.lrs = sorted({lr for by_lr in self.points.values() for lr in by_lr})
        self.seeds = list(self.points)

    def sensitivity(self, seed):
        """(S, best lr, min L, mean of min(L, L0)) of one seed over every lr of the variant's
        sweep: S = mean over lr of min(L(lr), L0) - min over lr of L(lr), a diverged run counting
        as L0; None when an lr of the sweep has no result for this seed or no lr has a finite L."""
        by_lr = self.points[seed]
        pts = [by_lr.get(lr) for lr in self.lrs]
        if any(p is None or p.clipped() is None for p in pts):
            return None
        ok = [p for p in pts if p.state == "ok"]
        if not ok:
            return None
        best = min(ok, key=lambda p: p.L)
        mean_clipped = float(np.mean([p.clipped() for p in pts]))
        return mean_clipped - best.L, best.lr, best.L, mean_clipped


def lr_variant_key(r):
    """The run's config up to the learning rate and the seed (and run_dir, checkpoint dir)."""
    return tuple(x for x in config_key(r) if (x[0], x[1]) != LR_KEY)


def lr_groups(runs):
    """[LRVariant] when some config was run at 2 or more learning rates (runs grouped by config up
    to lr and seed, labelled as the long-context groups); None otherwise. Runs without config.ini
    or an lr that is not a number are left out."""
    with_lr = []
    for r in runs:
        try:
            float(r.conf("train", "lr"))
        except (TypeError, ValueError):
            continue
        with_lr.append(r)
    order, by = [], {}
    for r in with_lr:
        k = lr_variant_key(r)
        if k not in by:
            order.append(k)
            by[k] = []
        by[k].append(r)
    if not any(len({float(r.conf("train", "lr")) for r in by[k]}) > 1 for k in order):
        return None
    out = []
    for k in order:
        g = by[k][0].attn_gate
        lab = "baseline" if g == "none" else (f"gated ({g})" if g else by[k][0].name)
        if lab in [v.label for v in out]:
            lab = f"{lab} #{len(out) + 1}"
        out.append(LRVariant(lab, by[k]))
    return out


def fmt_lr(lr):
    """1e-3, 3e-3, 1.5e-2: as ablate.sh's run names write them (3 significant digits)"""
    m, e = f"{lr:.2e}".split("e")
    m = m.rstrip("0").rstrip(".")
    return f"{m}e{int(e)}"


def lr_cell(points):
    """min(L, L0) over the seeds' runs at one lr: 'mean [min, max]', '(k diverged)' after it,
    '(k of n runs)' when some seed has no result; '-' when none has."""
    vals = [p.clipped() if p is not None else None for p in points]
    have = [v for v in vals if v is not None]
    if not have:
        return "-"
    s = format(have[0], ".4f") if len(have) == 1 else spread(have, ".4f")
    nd = sum(1 for p in points if p is not None and p.state == "diverged")
    if nd:
        s += f" ({nd} diverged)"
    if len(have) < len(vals):
        s += f" ({len(have)} of {len(vals)} runs)"
    return s


def write_lr_sweep(L, variants, fig_note):
    """The "Learning-rate sensitivity" section of report.md."""
    L.append("## Learning-rate sensitivity\n")
    L.append("Runs whose configs differ only in `[train] lr` and `[train] seed` form a variant. "
             "**L0**: the validation loss at step 0 (the untrained model). **L**: the final "
             "validation loss (the eval at the last step). A run that diverged (its final eval "
             "non-finite, or the trainer stopped on non-finite losses) counts as L0. **LR sensitivity** "
             "(Wortsman et al. 2023): mean over the sweep's learning rates of min(L, L0), minus the "
             "lowest L of the sweep; per seed, then mean [min, max] over the seeds. Lower: the loss "
             "depends less on the learning rate. Definitions: docs/metrics.md.\n")
    all_lrs = sorted({lr for v in variants for lr in v.lrs})
    def one_or_spread(vals):
        return format(vals[0], ".4f") if len(vals) == 1 else spread(vals, ".4f")
    rows = []
    for v in variants:
        sens = [v.sensitivity(s) for s in v.seeds]
        L0s = [mean_or_none([p.L0 for p in v.points[s].values()]) for s in v.seeds]   # per seed
        rows.append([f"**{v.label}**", ", ".join(v.seeds), one_or_spread([x for x in L0s if x is not None] or [None])]
                    + [lr_cell([v.points[s].get(lr) for s in v.seeds]) if lr in v.lrs else "-" for lr in all_lrs]
                    + ["-" if any(x is None for x in sens) else one_or_spread([x[0] for x in sens])])
    L.append("Final loss min(L, L0) by learning rate (mean [min, max] over the seeds):\n")
    L.append(md_table(["variant", "seeds", "L0"] + [f"lr {fmt_lr(lr)}" for lr in all_lrs] + ["LR sensitivity"], rows))
    L.append("")
    rows, notes = [], []
    for v in variants:
        for s in v.seeds:
            x = v.sensitivity(s)
            pts = v.points[s]
            L0s = sorted({p.L0 for p in pts.values() if p.L0 is not None})
            div = [fmt_lr(lr) for lr in v.lrs if lr in pts and pts[lr].state == "diverged"]
            rows.append([f"**{v.label}**", s, ", ".join(f"{x0:.4f}" for x0 in L0s) or "-",
                         "-" if x is None else fmt_lr(x[1]), "-" if x is None else f"{x[2]:.4f}",
                         "-" if x is None else f"{x[3]:.4f}", "-" if x is None else f"{x[0]:.4f}",
                         ", ".join(div) or "none"])
            for lr in v.lrs:
                p = pts.get(lr)
                if p is None:
                    notes.append(f"{v.label}, seed {s}: no run at lr {fmt_lr(lr)}: no LR sensitivity for this seed")
                elif p.state in ("incomplete", "no L0"):
                    why = ("no eval record at step 0 (L0)" if p.state == "no L0" else
                           "no final eval and no sign of divergence (still running, or failed otherwise)")
                    notes.append(f"{p.run.name} (lr {fmt_lr(lr)}, seed {s}): {why}: left out of the sweep")
    L.append("Per seed (**best lr**: the lowest L; **mean min(L, L0)**: over the sweep):\n")
    L.append(md_table(["variant", "seed", "L0", "best lr", "min L", "mean min(L, L0)", "LR sensitivity",
                       "diverged at lr"], rows))
    L.append("")
    if fig_note:
        L.append(f"_Figure skipped: {fig_note}._\n")
    else:
        L.append("![Final loss against learning rate](lr_sweep.png)\n")
        L.append("Final validation loss min(L, L0) against the learning rate (log scale), one colour per "
                 "variant: the mean over the seeds with [min, max] bars; each diverged run as a cross at its "
                 "L0; the dashed line is L0 (mean over the seeds), drawn when some run reached it (else its "
                 "values are in the legend).\n")
    if notes:
        L.extend(f"- {n}" for n in notes)
        L.append("")


def fig_lr_sweep(variants, path):
    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(figsize=(8, 4.5))
    handles, drawn = [], False
    # L0 (~ln V) lies far above trained losses: its line is drawn only when some run sits at it
    # (diverged, or ended above it); otherwise the legend gives its values and the axis the data
    at_L0 = any(p.state == "diverged" or (p.state == "ok" and p.L >= p.L0)
                for v in variants for s in v.seeds for p in v.points[s].values())
    L0_text = []
    for j, v in enumerate(variants):
        c = color(j)
        pts = []
        for lr in v.lrs:
            a = _agg([v.points[s][lr].clipped() for s in v.seeds if lr in v.points[s]])
            if a:
                pts.append((lr, a))
        _errorbar(ax, pts, color=c, marker=MARKERS[j % len(MARKERS)], ls="-")
        div = [(p.lr, p.L0) for s in v.seeds for p in v.points[s].values() if p.state == "diverged"]
        if div:
            ax.scatter([x for x, _ in div], [y for _, y in div], marker="x", s=60, color=c, zorder=5)
        L0 = mean_or_none([p.L0 for s in v.seeds for p in v.points[s].values()])
        if L0 is not None and at_L0:
            ax.axhline(L0, color=c, ls="--", lw=0.9)
        elif L0 is not None:
            L0_text.append(f"{L0:.3f}")
        drawn = drawn or bool(pts) or bool(div)
        handles.append(Line2D([], [], color=c, marker=MARKERS[j % len(MARKERS)], label=v.label))
    if not drawn:
        plt.close(fig)
        return "no run of the sweep has a final or initial validation loss"
    if at_L0:
        handles += [Line2D([], [], color="black", ls="--", lw=0.9, label="L0 (step 0)"),
                    Line2D([], [], color="black", ls="", marker="x", label="diverged (at L0)")]
    elif L0_text:
        handles.append(Line2D([], [], ls="", label=f"L0 (step 0): {' / '.join(L0_text)},\nabove every run: not drawn"))
    log_axis(ax, "x")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final val loss, min(L, L0)")
    ax.set_title("Final validation loss against learning rate")
    ax.grid(alpha=0.3)
    save_legend_outside(fig, path, handles=handles)
    return None


# ------------------------------------------------------------------------------------------
# long context: long_context.jsonl of each run, grouped as the seed table groups runs

class LCGroup:
    def __init__(self, label, runs):
        self.label = label
        self.runs = runs

    def length_vals(self, key):
        return [(r.lc["length"].get(key) or {}).get("loss") for r in self.runs]

    def stream_recs(self, key):
        return [r.lc["stream"].get(key) for r in self.runs]


def long_context_groups(runs):
    """[LCGroup] of the runs that have a long_context.jsonl, grouped by config up to the seed (a
    group of one run is kept; a run without config.ini is its own group); None when no run has
    the file. Labels: from the group's attn_gate, with what sets it apart from the first group where two labels would be the same: "baseline" (attn_gate
    none), "gated (elementwise)", ...; the run's name for a run without config.ini."""
    have = [r for r in runs if r.lc is not None]
    if not have:
        return None
    order, by = [], {}
    for r in have:
        k = config_key(r) if r.cfg else ("run", r.path)
        if k not in by:
            order.append(k)
            by[k] = []
        by[k].append(r)
    def gate_label(r):
        g = r.attn_gate
        if not r.cfg or g is None:
            return r.name
        return "baseline" if g == "none" else f"gated ({g})"
    labels = [gate_label(by[k][0]) for k in order]
    first_cfg = next((k for k in order if by[k][0].cfg), None)
    base = dict(((s_, k_), v) for s_, k_, v in first_cfg) if first_cfg else {}
    out = []
    for j, k in enumerate(order):
        lab = labels[j]
        if labels.count(lab) > 1 and by[k][0].cfg and k != first_cfg:
            mine = dict(((s_, k_), v) for s_, k_, v in k)
            diff = [f"[{s_}] {k_} = {v}" for (s_, k_), v in mine.items()
                    if base.get((s_, k_)) != v and (s_, k_) != ("model", "attn_gate")]
            diff += [f"[{s_}] {k_} unset" for (s_, k_) in base if (s_, k_) not in mine]
            if diff:
                lab = f"{lab} ({'; '.join(diff)})"
        if lab in [g.label for g in out]:
            lab = f"{lab} #{j + 1}"
        out.append(LCGroup(lab, by[k]))
    return out


def lc_reference(groups):
    """The group the others are compared with: the first without a gate, else the first."""
    return next((g for g in groups if g.runs[0].attn_gate == "none"), groups[0])


def finite_vals(vals):
    return [v for v in vals if v is not None and math.isfinite(v)]


def mean_or_none(vals):
    v = finite_vals(vals)
    return float(np.mean(v)) if v else None


def lc_cell(vals, spec):
    """'mean [min, max]' over the group's runs; one value alone; '(k of n runs)' when measured in
    fewer runs than the group has; non-finite values listed as they are; '-' when none."""
    n = len(vals)
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    if len(finite_vals(v)) < len(v):
        return ", ".join(fmt(x, spec) for x in v)
    s = format(v[0], spec) if len(v) == 1 else spread(v, spec)
    return s + (f" ({len(v)} of {n} runs)" if len(v) < n else "")


def lc_train_len(groups):
    """T: the train_len of the records (the most common one); None if none is given."""
    ts = [rec.get("train_len") for g in groups for r in g.runs
          for rec in list(r.lc["length"].values()) + list(r.lc["stream"].values())]
    ts = [int(t) for t in ts if is_num(t) and t > 0]
    return max(set(ts), key=ts.count) if ts else None


def length_label(L, T):
    if not T:
        return f"{int(L)}"
    m = L / T
    return f"{int(L)} ({'' if m == 1 else format(m, 'g')}T)"


def scaling_sort(names):
    return sorted(set(names), key=lambda s: (SCALING_ORDER.index(s) if s in SCALING_ORDER else len(SCALING_ORDER), s))


def with_length(groups):
    return [g for g in groups if any(r.lc["length"] for r in g.runs)]


def with_stream(groups):
    return [g for g in groups if any(r.lc["stream"] for r in g.runs)]


def length_keys(groups):
    keys = {k for g in groups for r in g.runs for k in r.lc["length"]}
    sc = scaling_sort(k[0] for k in keys)
    return sorted(keys, key=lambda k: (sc.index(k[0]), k[1]))


def stream_keys(groups):
    keys = {k for g in groups for r in g.runs for k in r.lc["stream"]}
    def order(k):
        if k[0] == "dense":
            return (1, 0, 0, 0, "")
        p = k[3]
        return (0, k[1], k[2], POSITIONS_ORDER.index(p) if p in POSITIONS_ORDER else len(POSITIONS_ORDER), p)
    return sorted(keys, key=order)


def f_attn_last(rec, n):
    """Mean of F-Attn over the last n attention layers of a stream record (a hybrid's Gated
    DeltaNet layers are null there); None without n values."""
    fa = rec.get("f_attn") if rec else None
    vals = [x for x in fa if is_num(x)] if isinstance(fa, list) else []
    if len(vals) < n:
        return None
    return float(np.mean(vals[-n:]))


STREAM_METRICS = [("loss", lambda rec: rec.get("loss") if rec else None),
                  ("loss after window", lambda rec: rec.get("loss_after_window") if rec else None),
                  ("F-Attn last layer", lambda rec: f_attn_last(rec, 1)),
                  ("F-Attn last 2 layers", lambda rec: f_attn_last(rec, 2))]


def length_table(groups, T):
    rows = []
    for key in length_keys(groups):
        rows.append([key[0], length_label(key[1], T)] + [lc_cell(g.length_vals(key), ".4f") for g in groups])
    return md_table(["scaling", "length"] + [g.label for g in groups], rows)


def stream_table(groups):
    rows = []
    for key in stream_keys(groups):
        if key[0] == "dense":
            recs = [rec for g in groups for rec in g.stream_recs(key) if rec]
            row = ["full", fmt(recs[0].get("sinks"), "d") if is_num(recs[0].get("sinks")) else "0",
                   str(recs[0].get("positions", "original")), "yes"]
        else:
            row = [fmt(int(key[1]), "d"), fmt(int(key[2]), "d"), key[3], "no"]
        for name, get in STREAM_METRICS:
            spec = ".4f"
            row += [lc_cell([get(rec) for rec in g.stream_recs(key)], spec) for g in groups]
        rows.append(row)
    header = ["window", "S", "positions", "dense"] + [f"{name}: {g.label}" for name, _ in STREAM_METRICS for g in groups]
    return md_table(header, rows)


def length_sentence(groups, T):
    """Measured differences: loss at the longest length minus loss at T; each group minus the
    reference group at T and at the longest length. Means over each group's runs."""
    keys = length_keys(groups)
    if not keys:
        return None
    Lmax = max(k[1] for k in keys)
    scal = scaling_sort(k[0] for k in keys)
    ref = lc_reference(groups)
    Ltxt = length_label(Lmax, T)
    parts = []
    at_T = {g.label: mean_or_none(g.length_vals(("none", T))) if T else None for g in groups}
    if T and Lmax > T:
        per = []
        for g in groups:
            base = at_T[g.label]
            d = [(sc, mean_or_none(g.length_vals((sc, Lmax)))) for sc in scal]
            d = [f"{sc} {v - base:+.3f}" for sc, v in d if v is not None and base is not None]
            d[:1] = [f"scaling {x}" for x in d[:1]]
            per.append(f"**{g.label}**: " + (", ".join(d) if d else f"not measured at {int(Lmax)}"
                                              + (" and T" if base is None else "")))
        parts.append(f"Loss at {Ltxt} minus loss at {int(T)} (T, scaling none), mean over each group's runs: "
                     + "; ".join(per) + ".")
    if len(groups) >= 2:
        per = []
        for g in groups:
            if g is ref:
                continue
            d = []
            if at_T[g.label] is not None and at_T[ref.label] is not None:
                d.append(f"at T {at_T[g.label] - at_T[ref.label]:+.3f}")
            if Lmax != T:
                dl = []
                for sc in scal:
                    a, b = mean_or_none(g.length_vals((sc, Lmax))), mean_or_none(ref.length_vals((sc, Lmax)))
                    if a is not None and b is not None:
                        dl.append(f"{sc} {a - b:+.3f}")
                if dl:
                    dl[:1] = [f"scaling {x}" for x in dl[:1]]
                    d.append(f"at {int(Lmax)}: " + ", ".join(dl))
            per.append(f"**{g.label}** minus **{ref.label}**: " + ("; ".join(d) if d else "no length measured in both"))
        parts.append(" ".join(p + "." for p in per) + " (Negative: lower loss than "
                     + f"**{ref.label}**.)")
    return " ".join(parts) if parts else None


def stream_metric(groups):
    """loss_after_window when every streaming record has it, else loss."""
    recs = [rec for g in groups for r in g.runs for rec in r.lc["stream"].values()]
    if recs and all(finite(rec.get("loss_after_window")) for rec in recs):
        return "loss after the window", lambda rec: rec.get("loss_after_window") if rec else None
    return "loss", lambda rec: rec.get("loss") if rec else None


def stream_sentence(groups):
    keys = stream_keys(groups)
    if not keys:
        return None
    mname, get = stream_metric(groups)
    parts = []
    combos = sorted({(k[1], k[3]) for k in keys if k[0] == "stream"},
                    key=lambda c: (c[0], POSITIONS_ORDER.index(c[1]) if c[1] in POSITIONS_ORDER else 9, c[1]))
    clauses = []
    for W, P in combos:
        sinks = sorted(k[2] for k in keys if k[0] == "stream" and k[1] == W and k[3] == P)
        if 0 not in sinks or sinks[-1] <= 0:
            continue
        S = sinks[-1]
        d = []
        for g in groups:
            a = mean_or_none([get(x) for x in g.stream_recs(("stream", W, S, P))])
            b = mean_or_none([get(x) for x in g.stream_recs(("stream", W, 0, P))])
            if a is not None and b is not None:
                d.append(f"{a - b:+.3f} ({g.label})")
        if d:
            clauses.append(f"window {int(W)}, positions {P}, S={int(S)} minus S=0: " + ", ".join(d))
    if clauses:
        parts.append(f"{mname[0].upper() + mname[1:]}, mean over each group's runs: " + "; ".join(clauses) + ".")
    gaps = []
    for g in groups:
        dense = mean_or_none([get(x) for x in g.stream_recs(("dense",))])
        rows = [mean_or_none([get(x) for x in g.stream_recs(k)]) for k in keys if k[0] == "stream"]
        rows = [v - dense for v in rows if v is not None and dense is not None]
        if rows:
            lo, hi = min(rows), max(rows)
            gaps.append(f"{lo:+.3f} ({g.label})" if lo == hi else f"{lo:+.3f} to {hi:+.3f} ({g.label})")
    if gaps:
        parts.append(f"Streaming minus the dense reference ({mname}): " + ", ".join(gaps) + ".")
    fa = []
    for g in groups:
        v = [mean_or_none([f_attn_last(x, 1) for x in g.stream_recs(k)]) for k in keys
             if k[0] == "stream" and k[2] > 0]
        v = [x for x in v if x is not None]
        if v:
            fa.append(f"{min(v):.3f} ({g.label})" if min(v) == max(v) else f"{min(v):.3f} to {max(v):.3f} ({g.label})")
    if fa:
        parts.append("F-Attn of the last layer on the sink slots (rows with S > 0): " + ", ".join(fa) + ".")
    return " ".join(parts) if parts else None


LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P"]


def _agg(vals):
    v = finite_vals(vals)
    return (float(np.mean(v)), min(v), max(v)) if v else None


def _errorbar(ax, pts, **kw):
    """pts: [(x, (mean, min, max))]; draws the mean with min-max bars."""
    if not pts:
        return
    xs = [x for x, _ in pts]
    ys = [a[0] for _, a in pts]
    err = [[a[0] - a[1] for _, a in pts], [a[2] - a[0] for _, a in pts]]
    ax.errorbar(xs, ys, yerr=err if any(e > 0 for e in err[0] + err[1]) else None, capsize=3, lw=1.4, ms=5, **kw)


def _group_handles(groups):
    from matplotlib.lines import Line2D
    return [Line2D([], [], color="black", ls=LINESTYLES[j % 4], marker=MARKERS[j % len(MARKERS)], label=g.label)
            for j, g in enumerate(groups)]


def fig_lc_length(groups, path):
    groups = with_length(groups)
    keys = length_keys(groups)
    if not keys:
        return "no length_eval records"
    from matplotlib.lines import Line2D
    T = lc_train_len(groups)
    scal = scaling_sort(k[0] for k in keys)
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    for j, g in enumerate(groups):
        for si, sc in enumerate(scal):
            pts = [(L, _agg(g.length_vals((sc, L)))) for L in sorted({k[1] for k in keys if k[0] == sc})]
            _errorbar(ax, [(x, a) for x, a in pts if a], color=color(si), ls=LINESTYLES[j % 4],
                      marker=MARKERS[j % len(MARKERS)])
    lengths = sorted({k[1] for k in keys})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(lengths))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter([length_label(L, T) for L in lengths]))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Loss by context length (mean over seeds, bars: min-max); colour: RoPE scaling, line: group",
                 fontsize=9)
    ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=color(si), lw=2, label=f"scaling {sc}") for si, sc in enumerate(scal)]
    save_legend_outside(fig, path, handles + _group_handles(groups))
    return None


def fig_lc_buckets(groups, path):
    groups = with_length(groups)
    keys = length_keys(groups)
    have = {}
    for k in keys:  # the longest length of each scaling with buckets in some run
        if any((r.lc["length"].get(k) or {}).get("buckets") for g in groups for r in g.runs):
            have[k[0]] = max(have.get(k[0], 0), k[1])
    if not have:
        return "no length_eval record with position buckets"
    T = lc_train_len(groups)
    scal_all = scaling_sort(k[0] for k in keys)
    scal = [sc for sc in scal_all if sc in have]
    n = len(scal)
    ncol = min(n, 4)
    nrow = (n + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.6 * nrow), sharey=True, squeeze=False)
    drawn = set()  # the groups with a curve in some panel
    for ax, sc in zip(axes.flat, scal):
        L = have[sc]
        si = scal_all.index(sc)
        for j, g in enumerate(groups):
            by = {}
            for r in g.runs:
                for b in (r.lc["length"].get((sc, L)) or {}).get("buckets") or []:
                    by.setdefault((b["lo"], b["hi"]), []).append(b["loss"])
            pts = [((lo + hi) / 2, _agg(v)) for (lo, hi), v in sorted(by.items())]
            if any(a for _, a in pts):
                drawn.add(j)
            _errorbar(ax, [(x, a) for x, a in pts if a], color=color(si), ls=LINESTYLES[j % 4],
                      marker=MARKERS[j % len(MARKERS)], label=g.label)
        if T:
            ax.axvline(T, color="gray", ls=":", lw=1)
        ax.set_title(f"scaling {sc}, length {length_label(L, T)}", fontsize=9)
        ax.set_xlabel("position (bucket centre)" + (f"; dotted: T = {T}" if T else ""), fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("loss (nats/token)")
    # one legend: the groups' line styles (the colour is the panel's scaling, as in the length figure)
    save_legend_outside(fig, path, [h for j, h in enumerate(_group_handles(groups)) if j in drawn], fontsize=7)
    return None


def fig_lc_stream(groups, path):
    keys = stream_keys(groups)
    sg = with_stream(groups)
    if not sg:
        return "no stream_eval records"
    metrics = [("loss", lambda rec: rec.get("loss") if rec else None)]
    if any(finite(rec.get("loss_after_window")) for g in sg for r in g.runs for rec in r.lc["stream"].values()):
        metrics.append(("loss after the window", lambda rec: rec.get("loss_after_window") if rec else None))
    combos = sorted({(k[1], k[3]) for k in keys if k[0] == "stream"},
                    key=lambda c: (c[0], POSITIONS_ORDER.index(c[1]) if c[1] in POSITIONS_ORDER else 9, c[1]))
    windows = sorted({c[0] for c in combos})
    positions = sorted({c[1] for c in combos}, key=lambda p: (POSITIONS_ORDER.index(p) if p in POSITIONS_ORDER else 9, p))
    sinks = sorted({k[2] for k in keys if k[0] == "stream"})
    fig, axes = plt.subplots(len(metrics), len(sg), figsize=(4.6 * len(sg), 3.6 * len(metrics)),
                             sharey="row", squeeze=False)
    for mi, (mname, get) in enumerate(metrics):
        for gi, g in enumerate(sg):
            ax = axes[mi][gi]
            for W, P in combos:
                pts = [(S, _agg([get(x) for x in g.stream_recs(("stream", W, S, P))])) for S in sinks]
                lab = f"positions {P}" + (f", window {int(W)}" if len(windows) > 1 else "")
                _errorbar(ax, [(x, a) for x, a in pts if a], color=color(positions.index(P)),
                          ls=LINESTYLES[windows.index(W) % 4], marker="o", label=lab)
            d = _agg([get(x) for x in g.stream_recs(("dense",))])
            if d:
                ax.axhline(d[0], color="gray", ls="--", lw=1.2, label="dense (full attention; value in the title)")
                if d[2] > d[1]:
                    ax.axhspan(d[1], d[2], color="gray", alpha=0.15)
            if sinks:
                ax.set_xticks(sinks)
            ax.set_title(f"{g.label}: {mname}" + (f"; dense {d[0]:.3f}" if d else ""), fontsize=9)
            ax.set_xlabel("S (sink tokens kept)")
            if gi == 0:
                ax.set_ylabel(f"{mname} (nats/token)", fontsize=8)
            ax.grid(alpha=0.3)
    save_legend_outside(fig, path, fontsize=7)  # the same entries in every panel: once
    return None


LC_FIGURES = [
    ("long_context_length.png", "Loss by context length", fig_lc_length,
     "Mean next-token loss at each context length (log2 axis), one colour per RoPE scaling, one "
     "line style per group; bars: min-max over the group's runs."),
    ("long_context_buckets.png", "Loss by position at the longest length", fig_lc_buckets,
     "Loss per position bucket (width T) at the longest length measured for each scaling; the "
     "dotted line marks T, the training length."),
    ("long_context_stream.png", "Streaming loss by sink count", fig_lc_stream,
     "Streaming loss (rolling KV window) against the number S of sink tokens kept, for "
     "positions cache and original, one panel per group; dashed: the dense (full attention) reference."),
]


def write_long_context(L, groups, notes_fig):
    """The "Long context" section of report.md."""
    T = lc_train_len(groups)
    notes_missing = []
    L.append("## Long context\n")
    L.append(f"Each run's final checkpoint evaluated by `scripts/long_context.sh` (`{LC_FILE}` in the run "
             "directory; definitions: docs/metrics.md). A column is a group of runs whose configs "
             "differ only in `[train] seed`; a cell is the mean over the group's runs and [min, max] "
             "('-': not measured; '(k of n runs)': measured in fewer runs than the group has). "
             "Losses in nats/token.\n")
    L.append("Groups: " + "; ".join(
        f"**{g.label}**: " + ", ".join(
            f"{r.name} (seed {r.conf('train', 'seed', '?')}, step {fmt(int(r.lc['step']), 'd') if r.lc['step'] is not None else '-'})"
            for r in g.runs) for g in groups) + ".\n")

    def figs(names):
        for fname, title, _, caption in LC_FIGURES:
            if fname not in names:
                continue
            if notes_fig.get(fname):
                L.append(f"_Figure skipped: {notes_fig[fname]}._\n")
            else:
                L.append(f"![{title}]({fname})\n")
                L.append(caption + "\n")

    L.append("### Loss by context length\n")
    gl, gs = with_length(groups), with_stream(groups)
    for what, have in (("length_eval", gl), ("stream_eval", gs)):
        lacking = [g.label for g in groups if g not in have]
        if have and lacking:
            notes_missing.append(f"no {what} records for {', '.join(lacking)}: not in its table")
    if gl:
        L.append("Mean next-token loss over windows of the given length" + (f", T = {T} (`train_len`)" if T else "")
                 + "; RoPE scaling with factor = length / T (scaling none: the model as trained).\n")
        L.append(length_table(gl, T))
        L.append("")
        sent = length_sentence(gl, T)
        if sent:
            L.append(sent + "\n")
    else:
        L.append("No length_eval records.\n")
    figs({"long_context_length.png", "long_context_buckets.png"})

    L.append("### Streaming (rolling KV window)\n")
    if gs:
        L.append("A stream of tokens through a KV cache of `window` tokens that keeps the first S "
                 "(\"sink\") tokens and the latest window - S; positions `cache`: RoPE positions of the "
                 "cache slots, `original`: the tokens' positions in the stream; dense: full attention "
                 "over the whole stream (the reference). **loss after window**: the tokens after the "
                 "first `window`. **F-Attn**: mean attention probability on the first max(S, 1) cache "
                 "slots, of the last layer and the mean of the last two layers.\n")
        L.append(stream_table(gs))
        L.append("")
        sent = stream_sentence(gs)
        if sent:
            L.append(sent + "\n")
    else:
        L.append("No stream_eval records.\n")
    figs({"long_context_stream.png"})

    notes = notes_missing + [f"{r.name}: {n}" for g in groups for r in g.runs for n in r.lc["notes"]]
    for g in groups:
        for r in g.runs:
            last = r.last_step()
            if r.lc["step"] is not None and last is not None and int(r.lc["step"]) != last:
                notes.append(f"{r.name}: {LC_FILE} is of step {int(r.lc['step'])}, the run's last step is {last}")
    if notes:
        L.append("Notes on the long-context data:\n")
        L.extend(f"- {n}" for n in notes)
        L.append("")



# ------------------------------------------------------------------------------------------
# multiple-choice tasks: the "task" records of [eval] tasks (docs/metrics.md)

TASK_FIELDS = {"step": "num", "task": "str", "n": "num", "acc": "num", "acc_norm": "num", "chance": "num"}


def task_recs(r):
    """The run's "task" records in step order (read from its log.jsonl once; [] for a run known only
    from a report.md). Errors name the file and the line."""
    if not hasattr(r, "_task_recs"):
        recs = []
        log = os.path.join(r.path, "log.jsonl") if getattr(r, "path", None) else None
        if log and os.path.isfile(log):
            for rec in read_log(log):
                if rec["type"] == "task":
                    check_fields(log, rec["_line"], rec, TASK_FIELDS)
                    recs.append(rec)
        r._task_recs = sorted(recs, key=lambda x: (x["step"], x["_line"]))
    return r._task_recs


def pm(v, se, spec=".3f"):
    """'v +- se' ('-' when v is missing; the stderr is null for n < 2)"""
    if not finite(v):
        return "-"
    return format(v, spec) + (f" +- {format(se, spec)}" if finite(se) else "")


def fig_tasks(runs, names, path):
    """acc (solid) and acc_norm (dashed) over steps, one panel per task, +- 1 stderr bars, chance dotted"""
    fig, axes = plt.subplots(1, len(names), figsize=(6.5 * len(names), 4.2), squeeze=False)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=color(i), lw=1.6, label=r.name) for i, r in enumerate(runs) if task_recs(r)]
    for ax, name in zip(axes[0], names):
        chance = set()
        for i, r in enumerate(runs):
            recs = [t for t in task_recs(r) if t["task"] == name]
            if not recs:
                continue
            x = [t["step"] for t in recs]
            for key, ls in (("acc", "-"), ("acc_norm", "--")):
                y = [t[key] for t in recs]
                e = [t.get(key + "_stderr") if finite(t.get(key + "_stderr")) else 0.0 for t in recs]
                ax.errorbar(x, y, yerr=e, color=color(i), ls=ls, marker="o", ms=4, lw=1.3, capsize=3)
            chance |= {round(t["chance"], 6) for t in recs}
        for c in chance:
            ax.axhline(c, color="gray", ls=":", lw=1.2)
        ax.set_title(f"{name}: accuracy over training", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
    handles += [Line2D([], [], color="black", ls="-", marker="o", label="acc"),
                Line2D([], [], color="black", ls="--", marker="o", label="acc_norm"),
                Line2D([], [], color="gray", ls=":", label="chance")]
    save_legend_outside(fig, path, handles)


def write_tasks(L, runs, out):
    """The "Multiple-choice tasks" section: the last record of each run and task, the spread over
    seeds, and tasks.png (accuracy over steps). Nothing when no run has task records."""
    runs_t = [r for r in runs if task_recs(r)]
    if not runs_t:
        return
    names = sorted({t["task"] for r in runs_t for t in task_recs(r)})
    L.append("## Multiple-choice tasks\n")
    L.append("`[eval] tasks` (docs/metrics.md \"Multiple-choice tasks\": lm-evaluation-harness's acc and acc_norm, "
             "+- its standard error). **first**: the first record (step 0: the untrained model).\n")
    rows = []
    for r in runs_t:
        for name in names:
            recs = [t for t in task_recs(r) if t["task"] == name]
            if not recs:
                continue
            t, f0 = recs[-1], recs[0]
            rows.append([r.name, name, fmt(int(t["step"]), "d"), fmt(int(t["n"]), "d"), pm(t["acc"], t.get("acc_stderr")),
                         pm(t["acc_norm"], t.get("acc_norm_stderr")), fmt(t["chance"], ".3f"),
                         f"{fmt(f0['acc'], '.3f')} (step {int(f0['step'])})"])
    L.append(md_table(["run", "task", "step", "n", "acc", "acc_norm", "chance", "first acc"], rows))
    L.append("")
    groups = seed_groups(runs_t)
    if groups:
        rows = []
        for label, g in groups:
            for name in names:
                last = [[t for t in task_recs(r) if t["task"] == name][-1:] for r in g]
                last = [x[0] for x in last if x]
                if last:
                    rows.append([label, name, ", ".join(r.conf("train", "seed", "?") for r in g),
                                 spread([t["acc"] for t in last], ".3f"), spread([t["acc_norm"] for t in last], ".3f")])
        L.append("Across seeds (last record; mean [min, max]):\n")
        L.append(md_table(["group (differs from the first in)", "task", "seeds", "acc", "acc_norm"], rows))
        L.append("")
    fig_tasks(runs_t, names, os.path.join(out, "tasks.png"))
    L.append("![accuracy over steps](tasks.png)\n")
    L.append("acc (solid) and acc_norm (dashed) at each task evaluation, +- one standard error; chance dotted.\n")


def write_report(runs, out, notes_fig, lc_groups=None, notes_lc=None, lr_variants=None, lr_note=None):
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
    hybrid = [r for r in runs if r.last_probe and is_num(r.last_probe.get("gdn_state_norm_mean"))]
    if hybrid:
        L.append("- **Hybrid runs** (Gated DeltaNet layers, `layer_pattern`): M-Act covers every layer; F-Attn "
                 "and the gate scores only the attention layers. Gated DeltaNet state norm ||S||_F after "
                 "the probe sequence (mean over the linear layers, sequences and heads; docs/metrics.md), "
                 "last probe: " + ", ".join(f"{r.name} {r.last_probe['gdn_state_norm_mean']:.3f}" for r in hybrid) + ".")
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
    if lr_variants:
        write_lr_sweep(L, lr_variants, lr_note)
    L.append("Paper reference (Qiu et al. 2025, Table 4: 15B MoE, 3.5T tokens; baseline vs the "
             "elementwise SDPA sigmoid gate):\n")
    L.append(md_table(["", "F-Attn", "M-Act", "mean gate"],
                      [["baseline", f"{PAPER['f_attn'][0]:.3f}", f"{PAPER['m_act'][0]}", "-"],
                       ["gated", f"{PAPER['f_attn'][1]:.3f}", f"{PAPER['m_act'][1]}", f"{PAPER['gate_mean']:.3f}"]]))
    L.append("")

    write_tasks(L, runs, out)   # [eval] tasks: table and tasks.png (when any run has task records)

    L.append("## Figures\n")
    for fname, title, _, caption in FIGURES:
        skipped = notes_fig.get(fname)
        L.append(f"### {title}\n")
        if skipped:
            L.append(f"_Figure skipped: {skipped}._\n")
        else:
            L.append(f"![{title}]({fname})\n")
            L.append(caption + "\n")

    if lc_groups:
        write_long_context(L, lc_groups, notes_lc or {})

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


# ------------------------------------------------------------------------------------------
# --replot: the per-layer figures again from a report.md (when the run directories are gone)

class TableRun(Run):
    """A run known only from its per-layer table in a report.md: name and last probe."""
    def __init__(self, name, step, layers, uniform):
        self.name, self.path, self.cfg, self.notes = name, None, {}, []
        self.probes = [{"step": step, "layers": layers, "f_attn_uniform": uniform}]


def runs_from_report_md(path):
    """The runs of the "Per-layer probe values" section of a report.md written by this script:
    each "**NAME**, step N..." line and the table under it (columns layer, F-Attn, largest head,
    M-Act; '-' = no value). Values as printed there (M-Act to 0.1, F-Attn to 0.001)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    m = [re.match(r"- Uniform attention would give F-Attn = ([0-9.]+) ", ln) for ln in lines]
    m = [x for x in m if x]
    uniform = float(m[0].group(1)) if m else None
    try:
        start = lines.index("## Per-layer probe values (last probe)")
    except ValueError:
        die(f"{path}: no '## Per-layer probe values (last probe)' section: not a report.md with probe tables")
    cols = {"layer": "layer", "F-Attn": "f_attn", "largest head": "f_attn_max_head", "M-Act": "m_act"}
    runs, i = [], start + 1
    while i < len(lines) and not (lines[i].startswith("## ") and i > start):
        h = re.match(r"\*\*(.+)\*\*, step (\d+)", lines[i])
        i += 1
        if not h:
            continue
        while i < len(lines) and not lines[i].startswith("|"):
            i += 1
        header = [c.strip() for c in lines[i].strip("|").split("|")] if i < len(lines) else []
        i += 2  # the header and the |---| line
        layers = []
        while i < len(lines) and lines[i].startswith("|"):
            cells = [c.strip() for c in lines[i].strip("|").split("|")]
            rec = {}
            for name, key in cols.items():
                if name in header:
                    v = cells[header.index(name)]
                    try:
                        rec[key] = None if v == "-" else (int(v) if key == "layer" else float(v))
                    except ValueError:
                        die(f"{path}:{i + 1}: '{v}' in column '{name}' is not a number")
            layers.append(rec)
            i += 1
        if "M-Act" not in header or not layers:
            die(f"{path}: the per-layer table of '{h.group(1)}' has no M-Act column or no rows")
        runs.append(TableRun(h.group(1), int(h.group(2)), layers, uniform))
    if not runs:
        die(f"{path}: the per-layer section holds no run tables")
    return runs


def replot(report_md, out):
    out = out or os.path.dirname(os.path.abspath(report_md))
    os.makedirs(out, exist_ok=True)
    runs = runs_from_report_md(report_md)
    note = "; replotted from report.md's tables"
    drawn = []
    for fname, fn in (("m_act.png", fig_m_act), ("f_attn.png", fig_f_attn)):
        why = fn(runs, os.path.join(out, fname), note)
        if why:
            warn(f"{fname} not drawn: {why}")
        else:
            drawn.append(fname)
    print(f"{PROG}: {len(runs)} run(s) from {report_md} -> {', '.join(os.path.join(out, f) for f in drawn) or 'no figures'}")


def main():
    ap = argparse.ArgumentParser(prog="report.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", metavar="RUN_DIR", help="train_gpt run directories")
    ap.add_argument("--out", metavar="DIR",
                    help="output directory (default: the run directory for one run, else their common parent)")
    ap.add_argument("--replot", metavar="REPORT_MD",
                    help="draw m_act.png and f_attn.png again from the per-layer tables of a report.md written "
                         "by this script (default --out: its directory); no run directories")
    args = ap.parse_args()
    if args.replot:
        if args.runs:
            die("--replot takes a report.md, not run directories")
        replot(args.replot, args.out)
        return
    if not args.runs:
        die("no run directories given (usage: report.py RUN_DIR... [--out DIR], or --replot REPORT_MD)", 2)
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
    groups = long_context_groups(runs)
    notes_lc = {}
    for fname, _, fn, _ in LC_FIGURES:
        path = os.path.join(out, fname)
        why = fn(groups, path) if groups else "no long_context.jsonl in any run"
        if why:
            notes_lc[fname] = why
            if os.path.exists(path):
                os.remove(path)
    lr_variants = lr_groups(runs)
    lr_path = os.path.join(out, LR_FIGURE)
    lr_note = fig_lr_sweep(lr_variants, lr_path) if lr_variants else "no config run at 2 or more learning rates"
    if lr_note and os.path.exists(lr_path):
        os.remove(lr_path)
    write_report(runs, out, notes_fig, groups, notes_lc, lr_variants, lr_note)
    if groups:
        notes_fig = dict(notes_fig, **notes_lc)
    drawn = [f for f, *_ in FIGURES + (LC_FIGURES if groups else []) if f not in notes_fig]
    drawn += [LR_FIGURE] if lr_variants and not lr_note else []
    print(f"{PROG}: {len(runs)} run(s) -> {os.path.join(out, 'report.md')}"
          f" ({', '.join(drawn) if drawn else 'no figures'}"
          f"{'; skipped ' + ', '.join(notes_fig) if notes_fig else ''})")


if __name__ == "__main__":
    main()
