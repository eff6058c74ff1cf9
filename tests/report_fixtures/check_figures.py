#!/usr/bin/python3
"""tests/report_fixtures/check_figures.py REPORT_PY [--m-act-from RUN_DIR]... -- REPORT_ARGS...

Runs scripts/report.py (imported, main() with REPORT_ARGS) and inspects every figure it saves, as
drawn (matplotlib's Agg renderer), for the two faults of issue 28:
  - a legend over the data: every legend (of an axes or of the figure) must lie outside every
    visible axes (their window extents do not overlap);
  - a log axis whose labels stop below the data: on every base-10 log axis, a labelled major
    tick (its label the plain number, e.g. "100") at every decade 10^k from k = floor(log10(min))
    to ceil(log10(max)) of the positive values drawn on it, and limits that hold them all.
With --m-act-from, the same decade rule against the M-Act values read here from the runs'
log.jsonl (the last probe's per-layer "m_act"), not from the figure: m_act.png's labelled
decades must reach 10^ceil(log10(max)) of those values.
Prints one line per figure; "FAIL: ..." and exit 1 on a fault. Standard library + matplotlib.
"""
import importlib.util
import json
import math
import os
import sys


def last_probe_m_act(run_dir):
    last = None
    with open(os.path.join(run_dir, "log.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{") and '"probe"' in line:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("type") == "probe":
                    last = r
    return [l["m_act"] for l in (last or {}).get("layers", []) if isinstance(l.get("m_act"), (int, float))]


def decades(vals):
    lo, hi = min(vals), max(vals)
    return list(range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1))


def main():
    argv = sys.argv[1:]
    if "--" not in argv or not argv:
        print(__doc__, file=sys.stderr)
        return 2
    k = argv.index("--")
    report_py, opts, report_args = argv[0], argv[1:k], argv[k + 1:]
    m_act_runs = [opts[i + 1] for i in range(len(opts) - 1) if opts[i] == "--m-act-from"]

    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    saved = {}
    orig_savefig = Figure.savefig

    def savefig(self, fname, *a, **kw):  # the figure object of every file report.py writes
        saved[os.path.basename(str(fname))] = self
        return orig_savefig(self, fname, *a, **kw)
    Figure.savefig = savefig

    spec = importlib.util.spec_from_file_location("report_under_test", report_py)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    sys.argv = [report_py] + report_args
    report.main()

    fails = []
    m_act_checked = False
    if not saved:
        fails.append("report.py saved no figure")
    for name, fig in sorted(saved.items()):
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        axes = [a for a in fig.axes if a.get_visible()]
        legends = list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend() is not None]
        notes = [f"{len(legends)} legend(s)"]
        for leg in legends:
            lb = leg.get_window_extent(r)
            for j, a in enumerate(axes):
                if lb.overlaps(a.get_window_extent(r)):
                    fails.append(f"{name}: a legend ({len(leg.get_texts())} entries) overlaps axes {j} "
                                 f"('{a.get_title()[:40]}'): it can cover the curves")
        for j, a in enumerate(axes):
            for which in ("x", "y"):
                axis = getattr(a, f"{which}axis")
                if getattr(a, f"get_{which}scale")() != "log" or getattr(axis.get_transform(), "base", 10) != 10:
                    continue
                vals = []
                for ln in a.get_lines():
                    vals += list(ln.get_xdata() if which == "x" else ln.get_ydata())
                for c in a.collections:
                    for off in c.get_offsets():
                        vals.append(off[0] if which == "x" else off[1])
                vals = [float(v) for v in vals if math.isfinite(float(v)) and float(v) > 0]
                if not vals:
                    continue
                lo, hi = sorted(getattr(a, f"get_{which}lim")())
                locs = [v for v in axis.get_majorticklocs() if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
                labels = axis.get_major_formatter().format_ticks(locs)
                labelled = {}
                for v, t in zip(locs, labels):
                    try:
                        if t and math.isclose(float(t), v, rel_tol=1e-6):
                            labelled[round(math.log10(v), 6)] = t
                    except ValueError:
                        pass  # not a plain number ("$10^{2}$"): counts as unlabelled
                want = decades(vals)
                missing = [e for e in want if float(e) not in labelled]
                notes.append(f"axes {j} {which} log: data {min(vals):.3g}..{max(vals):.3g}, limits {lo:.3g}..{hi:.3g}, "
                             f"labelled decades {sorted(labelled.values(), key=float)}")
                if missing:
                    fails.append(f"{name}: axes {j} ('{a.get_title()[:40]}'): data {min(vals):.3g}..{max(vals):.3g}, "
                                 f"no labelled major tick at 10^{missing} (labels: {[t for t in labels if t]})")
                if lo > min(vals) or hi < max(vals):
                    fails.append(f"{name}: axes {j}: limits {lo:.3g}..{hi:.3g} cut the data {min(vals):.3g}..{max(vals):.3g}")
                if name == "m_act.png" and which == "y" and m_act_runs:
                    ref = [v for d in m_act_runs for v in last_probe_m_act(d) if v > 0]
                    if not ref:
                        fails.append(f"no M-Act values in the last probe of {m_act_runs}")
                        continue
                    m_act_checked = True
                    top = math.ceil(math.log10(max(ref)))
                    notes.append(f"log.jsonl M-Act max {max(ref):.4g} -> decade 10^{top}")
                    if float(top) not in labelled or hi < 10.0 ** top * (1 - 1e-9):
                        fails.append(f"m_act.png: the runs' M-Act reaches {max(ref):.4g} (log.jsonl) but 10^{top} "
                                     f"is not a labelled tick inside the limits {lo:.3g}..{hi:.3g}")
        print(f"{name}: " + "; ".join(notes))
    if m_act_runs and not m_act_checked:
        fails.append("--m-act-from given, but no m_act.png with a log y axis was drawn")
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
